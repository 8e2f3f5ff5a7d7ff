"""The release check: a READY draft is evaluated on the KB's default set before publishing; a
draft that loses documents shows the loss and is refused when the KB blocks regressions."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from evaluation.models import EvalRun, EvalSet
from evaluation.release import ReleaseCheck
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import Document, KnowledgeBase, KnowledgeBaseVersion, VersionStatus
from ragsite.errors import InvalidTransition, ValidationFailed
from tests.evaluation.test_evaluate_retrieval import write_dataset

pytestmark = pytest.mark.django_db(transaction=True)

QUESTIONS = [
    {"id": "R1", "question": "入职满一年的员工每年有几天带薪年假？", "expected_documents": ["年假制度"]},
    {"id": "R2", "question": "一线城市住宿标准每晚多少钱？", "expected_documents": ["差旅标准"]},
    {"id": "R3", "question": "远程办公怎么连 VPN？", "expected_documents": ["VPN 使用"]},
    {"id": "R4", "question": "打印机卡纸怎么办？", "expected_documents": ["打印机"]},
]


@pytest.fixture
def kb_with_default_set(tmp_path, milvus, run_tasks, media_root):
    """The four-passage corpus published as v1, and a default set naming its documents."""
    call_command("evaluate_retrieval", "--dataset", str(write_dataset(tmp_path)), "--kb", "rel", "--build",
                 "--mode", "sparse", stdout=io.StringIO())
    native = tmp_path / "release.jsonl"
    native.write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in QUESTIONS), encoding="utf-8")
    call_command("import_eval_set", str(native), "--name", "release", "--kb", "rel", "--default", stdout=io.StringIO())
    return KnowledgeBase.objects.get(slug="rel")


def draft_without(kb, title: str, staff_user) -> KnowledgeBaseVersion:
    """A draft of the active version minus one document (READY at once: the rest is indexed)."""
    catalog_services.delete_document(document=Document.objects.get(knowledge_base=kb, title=title), actor=staff_user)
    return KnowledgeBaseVersion.objects.get(knowledge_base=kb, status=VersionStatus.READY)


def test_a_draft_that_loses_a_document_shows_the_loss(kb_with_default_set, staff_user):
    # when: the draft becomes READY (its release check runs in the background: inline here)
    draft = draft_without(kb_with_default_set, "差旅标准", staff_user)

    # then: the draft (first) and the active version were both run on the default set
    runs = EvalRun.objects.filter(config__purpose="release_check").order_by("id")
    assert [(run.version_id, run.status) for run in runs] == [
        (draft.pk, "succeeded"), (kb_with_default_set.active_version_id, "succeeded"),
    ]
    report = ReleaseCheck().report(version=draft)
    assert report.status == "done" and report.lost == ("一线城市住宿标准每晚多少钱？",) and report.gained == ()
    hit = next(m for m in report.metrics if m.name == "hit@5")
    assert (hit.active, hit.draft, hit.delta_points) == (1.0, 0.75, -25.0)
    assert report.worst_drop_points == 25.0


def test_publishing_a_regressed_draft_is_refused_when_the_kb_blocks_and_an_override_is_logged(kb_with_default_set, staff_user):
    # given: the KB refuses drops of more than 10 points
    catalog_services.update_knowledge_base(kb=kb_with_default_set, actor=staff_user, release_max_regression_points=10.0)
    draft = draft_without(kb_with_default_set, "差旅标准", staff_user)

    # when / then: refused with the reason; an override needs a reason too
    with pytest.raises(InvalidTransition) as refused:
        catalog_services.activate_version(version=draft, actor=staff_user, reason="发布")
    assert refused.value.code == "release_check_blocked" and "25.0 个百分点" in str(refused.value.message)
    with pytest.raises(ValidationFailed):
        catalog_services.activate_version(version=draft, actor=staff_user, reason=" ", override_release_check=True)
    kb_with_default_set.refresh_from_db()
    assert kb_with_default_set.active_version.number == 1

    activation = catalog_services.activate_version(version=draft, actor=staff_user, reason="差旅制度已下线",
                                           override_release_check=True)
    assert activation.to_version == draft
    assert activation.release_check["overridden"] is True and activation.release_check["lost"] == ["一线城市住宿标准每晚多少钱？"]


def test_a_draft_that_loses_nothing_is_published_with_its_check_recorded(kb_with_default_set, staff_user, tmp_path):
    # given: a draft that adds a document and keeps every other one
    from django.core.files.uploadedfile import SimpleUploadedFile

    catalog_services.update_knowledge_base(kb=kb_with_default_set, actor=staff_user, release_max_regression_points=0.0)
    document_services.upload_documents(kb=kb_with_default_set, actor=staff_user,
                              files=[SimpleUploadedFile("食堂.txt", "食堂午餐供应时间为 11:30 到 13:00。".encode())])
    draft = KnowledgeBaseVersion.objects.get(knowledge_base=kb_with_default_set, status=VersionStatus.READY)

    # when
    activation = catalog_services.activate_version(version=draft, actor=staff_user, reason="新增食堂制度")

    # then
    assert activation.release_check["status"] == "done" and activation.release_check["worst_drop_points"] == 0.0
    assert "overridden" not in activation.release_check


def test_a_check_still_running_refuses_publishing_when_the_kb_blocks(kb_with_default_set, staff_user):
    # given: the check has not run yet (the worker is busy)
    from evaluation import release
    from knowledge.signals import version_ready

    version_ready.disconnect(dispatch_uid="evaluation-release-check")
    try:
        catalog_services.update_knowledge_base(kb=kb_with_default_set, actor=staff_user, release_max_regression_points=5.0)
        draft = draft_without(kb_with_default_set, "打印机", staff_user)

        # when / then
        assert ReleaseCheck().report(version=draft).status == "pending"
        with pytest.raises(InvalidTransition, match="上线检查尚未完成"):
            catalog_services.activate_version(version=draft, actor=staff_user, reason="发布")
    finally:
        version_ready.connect(release.schedule_release_check, dispatch_uid="evaluation-release-check")


def test_the_publish_page_shows_the_loss_and_offers_the_override(kb_with_default_set, staff_user, client):
    # given
    catalog_services.update_knowledge_base(kb=kb_with_default_set, actor=staff_user, release_max_regression_points=10.0)
    draft = draft_without(kb_with_default_set, "差旅标准", staff_user)
    client.force_login(staff_user)
    url = reverse("admin:knowledge_knowledgebaseversion_changelist")

    # when
    page = client.post(url, {"action": "activate", "_selected_action": [draft.pk]}).content.decode()
    refused = client.post(url, {"action": "activate", "_selected_action": [draft.pk], "confirm": "yes",
                                "reason": "发布"}, follow=True).content.decode()
    forced = client.post(url, {"action": "activate", "_selected_action": [draft.pk], "confirm": "yes",
                               "reason": "差旅制度已下线", "override_release_check": "on"}, follow=True)

    # then
    assert "一线城市住宿标准每晚多少钱？" in page and "-25.0" in page and "override_release_check" in page
    assert '<span class="rag-code" title="hit@5">命中率@5</span>' in page  # the metric in words
    assert "上线检查发现退步" in refused
    kb_with_default_set.refresh_from_db()
    assert forced.status_code == 200 and kb_with_default_set.active_version == draft


def test_the_api_refuses_with_the_code_and_accepts_an_override(kb_with_default_set, staff_user, staff_api):
    # given
    catalog_services.update_knowledge_base(kb=kb_with_default_set, actor=staff_user, release_max_regression_points=10.0)
    draft = draft_without(kb_with_default_set, "差旅标准", staff_user)
    url = f"/api/knowledge-bases/{kb_with_default_set.slug}/versions/{draft.number}/activate/"

    # when
    refused = staff_api.post(url, {"reason": "发布"}, format="json")
    forced = staff_api.post(url, {"reason": "差旅制度已下线", "override_release_check": True}, format="json")

    # then
    assert refused.status_code == 409 and refused.json()["code"] == "release_check_blocked"
    assert forced.status_code == 200 and forced.json()["release_check"]["overridden"] is True


def test_a_check_that_cannot_run_is_reported_failed_with_its_error_not_left_pending(kb_with_default_set, staff_user, settings):
    # given: the vector store is down when the draft's check runs
    from engines.milvus_store import reset_vector_store_cache

    catalog_services.update_knowledge_base(kb=kb_with_default_set, actor=staff_user, release_max_regression_points=5.0)
    good_uri = settings.MILVUS_URI
    settings.MILVUS_URI = "http://127.0.0.1:9"
    reset_vector_store_cache()
    try:
        # when
        draft = draft_without(kb_with_default_set, "打印机", staff_user)
    finally:
        settings.MILVUS_URI = good_uri
        reset_vector_store_cache()

    # then: both runs are recorded as failed; publishing is refused with the reason, not "pending"
    assert set(EvalRun.objects.filter(config__purpose="release_check").values_list("status", flat=True)) == {"failed"}
    report = ReleaseCheck().report(version=draft)
    assert report.status == "failed" and report.error
    with pytest.raises(InvalidTransition, match="上线检查失败"):
        catalog_services.activate_version(version=draft, actor=staff_user, reason="发布")


def test_reimporting_the_same_set_keeps_the_drafts_check_current(kb_with_default_set, staff_user, tmp_path):
    # given: a checked draft
    draft = draft_without(kb_with_default_set, "差旅标准", staff_user)
    assert ReleaseCheck().report(version=draft).status == "done"

    # when: the same file is imported again, then a changed one
    native = tmp_path / "release.jsonl"
    call_command("import_eval_set", str(native), "--name", "release", "--kb", "rel", "--default", stdout=io.StringIO())
    unchanged = ReleaseCheck().report(version=draft).status
    native.write_text(native.read_text(encoding="utf-8") + "\n" + json.dumps(
        {"id": "R5", "question": "VPN 用什么账号登录？", "expected_documents": ["VPN 使用"]}, ensure_ascii=False),
        encoding="utf-8")
    call_command("import_eval_set", str(native), "--name", "release", "--kb", "rel", "--default", stdout=io.StringIO())

    # then: only a real change of the cases makes the old runs stale
    assert unchanged == "done"
    assert ReleaseCheck().report(version=draft).status == "pending"


def test_importing_if_new_keeps_a_default_staff_chose_and_skips_a_missing_base(kb_with_default_set, tmp_path):
    # given: the base's default is the staff's own set "release"
    out = io.StringIO()
    # when: the demo set is offered as it is on every `make run`
    call_command("import_eval_set", "--demo", "--kb", "rel", "--default", "--if-new", stdout=out)
    call_command("import_eval_set", "--demo", "--kb", "rel", "--default", "--if-new", stdout=out)
    call_command("import_eval_set", "--demo", "--kb", "gone", "--default", "--if-new", stdout=out)
    # then: imported once (it did not exist) without taking the default, then skipped; a missing
    # base is not an error
    sets = EvalSet.objects.filter(knowledge_base=kb_with_default_set)
    assert sorted(sets.values_list("name", flat=True)) == ["demo", "release"]
    assert sets.get(is_default=True).name == "release"
    assert "评测集 demo 已存在" in out.getvalue() and "知识库 gone 不存在" in out.getvalue()
