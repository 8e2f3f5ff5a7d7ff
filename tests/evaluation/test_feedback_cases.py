"""A reader's 👎 becomes a question of the default evaluation set, which the release check then
measures: the service's rules, the admin's review list and case page, and a draft that loses
the document a 👎 pointed at being refused at publish."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat.models import AnswerFeedback, ChatEvidence, Conversation, Message, QueryTrace
from evaluation.feedback import FEEDBACK_SET_NAME, save_feedback_case
from evaluation.models import EvalCase, EvalCaseResult, EvalSet
from evaluation.release import ReleaseCheck
from knowledge.catalog import services as catalog_services
from knowledge.models import AuditEntry, Chunk, Document, KnowledgeBase, KnowledgeBaseVersion, VersionStatus
from ragsite.errors import Forbidden, InvalidTransition, ValidationFailed
from tests.conftest import api_client_for, make_document, make_kb
from tests.evaluation.test_evaluate_retrieval import write_dataset

PRINTER_QUESTION = "打印机卡纸了怎么处理？"


# --- rows, written directly (the service's rules) ------------------------------------------------


def answered_turn(kb, user, *, question: str, verdict: str = "down", earlier: tuple[str, ...] = (),
                  citations: list | None = None) -> AnswerFeedback:
    """A finished answer in `user`'s conversation with its trace (after `earlier` questions), and
    `user`'s verdict on it."""
    conversation = Conversation.objects.create(knowledge_base=kb, user=user, title=question)
    for text in (*earlier, question):
        Message.objects.create(conversation=conversation, role="user", content=text)
        message = Message.objects.create(conversation=conversation, role="assistant", content=f"关于{text}的回答",
                                         status="complete")
        QueryTrace.objects.create(trace_id=uuid.uuid4(), knowledge_base=kb, kb_version=1, conversation=conversation,
                                  assistant_message=message, user=user, question=text, status="completed")
    ChatEvidence.objects.create(message=message, route="rag", hit_type="rag", citations=citations or [])
    return AnswerFeedback.objects.create(message=message, knowledge_base=kb, kb_version=1, user=user, verdict=verdict,
                                         reason="答非所问")


@pytest.fixture
def kb_with_a_document(db):
    kb = make_kb(slug="fb")
    document = make_document(kb, title="打印机手册")
    chunk = Chunk.objects.create(document=document, knowledge_base=kb, ordinal=0, content="打印机卡纸时先关闭电源。",
                                 token_count=8)
    return kb, chunk


@pytest.mark.django_db
def test_a_down_vote_becomes_a_case_of_a_new_default_set(kb_with_a_document, staff_user):
    # given: a knowledge base without a default set, and a 👎 on a follow-up question
    kb, chunk = kb_with_a_document
    feedback = answered_turn(kb, staff_user, question="那卡纸呢？", earlier=("打印机怎么加墨？",))

    # when
    saved = save_feedback_case(feedback=feedback, actor=staff_user, chunk_id=chunk.pk, answers=["关闭电源", " "])

    # then: the default set was made, the case asks the question in its conversation's context
    case = saved.case
    assert saved.set_created and saved.created
    assert (case.eval_set.name, case.eval_set.is_default, case.eval_set.cases_changed_at is not None) == (FEEDBACK_SET_NAME, True, True)
    assert (case.key, case.question, case.history, case.expected_chunks, case.expected_documents, case.answers,
            case.answerable, case.category, case.feedback) == (
        f"feedback-{feedback.pk}", "那卡纸呢？", ["打印机怎么加墨？"], [chunk.pk], ["打印机手册"], ["关闭电源"], True,
        "feedback", feedback)
    assert AuditEntry.objects.filter(knowledge_base=kb, action="feedback_case_saved").count() == 1


@pytest.mark.django_db
def test_saving_again_replaces_the_case_and_unanswerable_needs_no_chunk(kb_with_a_document, staff_user):
    # given
    kb, chunk = kb_with_a_document
    eval_set = EvalSet.objects.create(knowledge_base=kb, name="hr", is_default=True)
    feedback = answered_turn(kb, staff_user, question="食堂几点开门？")
    save_feedback_case(feedback=feedback, actor=staff_user, chunk_id=chunk.pk)

    # when: staff decide the documents cannot answer it
    saved = save_feedback_case(feedback=feedback, actor=staff_user, chunk_id=None)

    # then: the existing default set, one case, now unanswerable
    assert not saved.set_created and not saved.created and saved.case.eval_set == eval_set
    assert list(EvalCase.objects.values_list("answerable", "expected_chunks", "expected_documents")) == [(False, [], [])]


@pytest.mark.django_db
def test_what_cannot_become_a_case_is_refused(kb_with_a_document, staff_user, member_user):
    # given
    kb, chunk = kb_with_a_document
    other_chunk = Chunk.objects.create(document=make_document(make_kb(slug="other"), title="别处"),
                                       knowledge_base=Document.objects.get(title="别处").knowledge_base, ordinal=0,
                                       content="别处的内容", token_count=4)
    liked = answered_turn(kb, staff_user, question="年假几天？", verdict="up")
    disliked = answered_turn(kb, staff_user, question="报销流程？")

    # then: a 👍, another knowledge base's chunk, a user who does not edit the knowledge base
    with pytest.raises(ValidationFailed) as up:
        save_feedback_case(feedback=liked, actor=staff_user, chunk_id=chunk.pk)
    with pytest.raises(ValidationFailed) as elsewhere:
        save_feedback_case(feedback=disliked, actor=staff_user, chunk_id=other_chunk.pk)
    with pytest.raises(Forbidden):
        save_feedback_case(feedback=disliked, actor=member_user, chunk_id=chunk.pk)
    assert (up.value.code, elsewhere.value.code) == ("feedback_not_down", "chunk_not_in_kb")
    assert not EvalCase.objects.exists() and not EvalSet.objects.exists()


# --- the admin ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_review_list_filters_by_verdict_and_the_case_page_saves_the_chunk_chosen(client, kb_with_a_document, staff_user):
    # given: a 👎 whose answer cited the chunk, and a 👍
    kb, chunk = kb_with_a_document
    down = answered_turn(kb, staff_user, question="卡纸怎么办？", citations=[{"number": 1, "kind": "chunk", "chunk_id": chunk.pk}])
    answered_turn(kb, staff_user, question="几点下班？", verdict="up")
    client.force_login(staff_user)
    changelist = reverse("admin:chat_answerfeedback_changelist")

    # when: the list, filtered to 👎
    page = client.get(changelist, {"verdict__exact": "down"}).content.decode()
    # then: the question, the reason, and the way to turn it into a case
    assert "卡纸怎么办？" in page and "几点下班？" not in page and "答非所问" in page
    case_url = reverse("admin:chat_answerfeedback_case", args=[down.pk])
    assert case_url in page

    # when: the case page, which offers the cited chunk
    form = client.get(case_url).content.decode()
    assert f'value="{chunk.pk}"' in form and "打印机卡纸时先关闭电源。" in form
    response = client.post(case_url, {"right": str(chunk.pk), "answers": "关闭电源"})

    # then: saved, and the list links the case instead of the button
    assert response.status_code == 302
    case = EvalCase.objects.get()
    assert (case.expected_chunks, case.answers, case.feedback_id) == ([chunk.pk], ["关闭电源"], down.pk)
    assert case_url not in client.get(changelist).content.decode()


@pytest.mark.django_db
def test_the_case_page_asks_for_the_other_chunks_id_and_refuses_a_foreign_one(client, kb_with_a_document, staff_user):
    # given
    kb, _chunk = kb_with_a_document
    down = answered_turn(kb, staff_user, question="卡纸怎么办？")
    client.force_login(staff_user)
    case_url = reverse("admin:chat_answerfeedback_case", args=[down.pk])

    # when: "another chunk" without an id, then with an id of no chunk of the knowledge base
    blank = client.post(case_url, {"right": "other"})
    foreign = client.post(case_url, {"right": "other", "other_chunk_id": "999999"}, follow=True)

    # then: the form says what is missing; the service's refusal is shown; nothing saved
    assert blank.status_code == 200 and "请填写分块 ID。" in blank.content.decode()
    assert "不属于知识库" in foreign.content.decode()
    assert not EvalCase.objects.exists()


@pytest.mark.django_db
def test_an_editor_of_another_knowledge_base_sees_no_feedback_of_this_one(client, kb_with_a_document, staff_user, django_user_model):
    # given
    kb, _chunk = kb_with_a_document
    down = answered_turn(kb, staff_user, question="卡纸怎么办？")
    outsider = django_user_model.objects.create_user("outsider", password="pw-outsider-1", is_staff=True)
    client.force_login(outsider)
    # when
    listing = client.get(reverse("admin:chat_answerfeedback_changelist"))
    case_page = client.get(reverse("admin:chat_answerfeedback_case", args=[down.pk]))
    # then
    assert "卡纸怎么办？" not in listing.content.decode()
    assert case_page.status_code in (403, 404)


# --- into the release check (real ingestion and retrieval) -------------------------------------


@pytest.fixture
def published_kb_whose_set_misses_the_printer(tmp_path, milvus, run_tasks, media_root):
    """The four-passage corpus published as v1, blocking any regression, and a default set that
    asks about three of its documents (not the printer's)."""
    call_command("evaluate_retrieval", "--dataset", str(write_dataset(tmp_path)), "--kb", "rel", "--build",
                 "--mode", "sparse", stdout=io.StringIO())
    native = tmp_path / "release.jsonl"
    native.write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in [
        {"id": "R1", "question": "入职满一年的员工每年有几天带薪年假？", "expected_documents": ["年假制度"]},
        {"id": "R2", "question": "一线城市住宿标准每晚多少钱？", "expected_documents": ["差旅标准"]},
        {"id": "R3", "question": "远程办公怎么连 VPN？", "expected_documents": ["VPN 使用"]},
    ]), encoding="utf-8")
    call_command("import_eval_set", str(native), "--name", "release", "--kb", "rel", "--default", stdout=io.StringIO())
    kb = KnowledgeBase.objects.get(slug="rel")
    return catalog_services.update_knowledge_base(kb=kb, actor=None, release_max_regression_points=0.0)


def draft_without_the_printer(kb, actor) -> KnowledgeBaseVersion:
    catalog_services.delete_document(document=Document.objects.get(knowledge_base=kb, title="打印机"), actor=actor)
    return KnowledgeBaseVersion.objects.get(knowledge_base=kb, status=VersionStatus.READY)


@pytest.mark.django_db(transaction=True)
def test_a_down_vote_made_a_case_blocks_the_draft_that_loses_its_answer(published_kb_whose_set_misses_the_printer, staff_user):
    # given: a reader asked about the printer through the API and gave the answer a 👎; staff
    # marked the printer chunk as the right answer
    kb = published_kb_whose_set_misses_the_printer
    reader = api_client_for(staff_user)
    answer = reader.post("/api/chat", {"knowledge_base_id": kb.slug, "question": PRINTER_QUESTION}, format="json").json()
    assert reader.put(f"/api/chat/messages/{answer['message_id']}/feedback", {"verdict": "down", "reason": "没说关电源"},
                      format="json").status_code == 200
    printer_chunk = Chunk.objects.get(document__knowledge_base=kb, document__title="打印机")
    save_feedback_case(feedback=AnswerFeedback.objects.get(), actor=staff_user, chunk_id=printer_chunk.pk)

    # when: a draft drops the printer's document (its release check runs: inline here)
    draft = draft_without_the_printer(kb, staff_user)

    # then: the check measured the case, lost it, and publishing is refused
    report = ReleaseCheck().report(version=draft)
    assert report.status == "done" and report.lost == (PRINTER_QUESTION,)
    assert EvalCaseResult.objects.filter(run__version=draft, case_key__startswith="feedback-").count() == 1
    with pytest.raises(InvalidTransition) as refused:
        catalog_services.activate_version(version=draft, actor=staff_user, reason="发布")
    assert refused.value.code == "release_check_blocked"


@pytest.mark.django_db(transaction=True)
def test_a_case_added_while_a_draft_waits_runs_its_check_again(published_kb_whose_set_misses_the_printer, staff_user):
    # given: the draft without the printer passed its check (the set never asks about it)
    kb = published_kb_whose_set_misses_the_printer
    draft = draft_without_the_printer(kb, staff_user)
    assert ReleaseCheck().report(version=draft).lost == ()
    conversation = Conversation.objects.create(knowledge_base=kb, user=staff_user, title="t")
    message = Message.objects.create(conversation=conversation, role="assistant", content="不知道", status="complete")
    QueryTrace.objects.create(trace_id=uuid.uuid4(), knowledge_base=kb, conversation=conversation, assistant_message=message,
                              user=staff_user, question=PRINTER_QUESTION, status="completed")
    feedback = AnswerFeedback.objects.create(message=message, knowledge_base=kb, user=staff_user, verdict="down")

    # when: the 👎 becomes a case
    printer_chunk = Chunk.objects.get(document__knowledge_base=kb, document__title="打印机")
    save_feedback_case(feedback=feedback, actor=staff_user, chunk_id=printer_chunk.pk)

    # then: the waiting draft was checked again, with the case, and now shows the loss
    report = ReleaseCheck().report(version=draft)
    assert report.status == "done" and report.lost == (PRINTER_QUESTION,)


@pytest.mark.django_db
def test_the_trace_page_shows_the_readers_verdict(client, kb_with_a_document, staff_user):
    # given
    kb, _chunk = kb_with_a_document
    down = answered_turn(kb, staff_user, question="卡纸怎么办？")
    trace = QueryTrace.objects.get(assistant_message_id=down.message_id)
    client.force_login(staff_user)
    # when
    page = client.get(reverse("admin:chat_querytrace_change", args=[trace.pk])).content.decode()
    # then: the verdict and its reason, linked to the feedback
    assert 'data-verdict="down">没用：答非所问</a>' in page
    assert reverse("admin:chat_answerfeedback_change", args=[down.pk]) in page


@pytest.mark.django_db
def test_the_review_list_costs_the_same_queries_for_many_rows(client, kb_with_a_document, staff_user, django_assert_max_num_queries):
    # given: one row, then twenty more (some already made cases)
    kb, chunk = kb_with_a_document
    client.force_login(staff_user)
    changelist = reverse("admin:chat_answerfeedback_changelist")
    answered_turn(kb, staff_user, question="问题 0")
    client.get(changelist)
    with CaptureQueriesContext(connection) as one_row:
        client.get(changelist)
    for n in range(1, 21):
        feedback = answered_turn(kb, staff_user, question=f"问题 {n}")
        if n % 2:
            save_feedback_case(feedback=feedback, actor=staff_user, chunk_id=chunk.pk)
    # when / then: the page's queries do not grow with its rows
    with django_assert_max_num_queries(len(one_row.captured_queries) + 2):
        page = client.get(changelist)
    assert page.status_code == 200 and "问题 20" in page.content.decode()
