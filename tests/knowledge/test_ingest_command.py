"""`manage.py ingest` and the demo corpus: every demo file ends READY with sensible chunks."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from demo.build import build_demo_corpus
from knowledge.models import Chunk, Document, DocumentAsset, DocumentStatus, KnowledgeBase, VersionStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    return build_demo_corpus(tmp_path_factory.mktemp("demo"))[0].parent


def test_ingest_demo_corpus_creates_activates_and_reports(demo_dir, milvus, database_tasks, media_root):
    # when
    out = io.StringIO()
    call_command("ingest", str(demo_dir), "--kb", "demo", "--create", "--activate", stdout=out)
    # then
    report = out.getvalue()
    kb = KnowledgeBase.objects.get(slug="demo")
    documents = Document.objects.filter(knowledge_base=kb)
    assert documents.count() == len(list(demo_dir.iterdir()))
    assert set(documents.values_list("status", flat=True)) == {DocumentStatus.READY}
    assert kb.active_version.status == VersionStatus.ACTIVE
    assert "已发布 demo v1" in report
    for document in documents:
        assert document.original_name in report
    # sensible chunks per format
    xlsx_table = Chunk.objects.filter(document__file_type="xlsx", content_type="table").first()
    assert xlsx_table.content.startswith("| 型号 |") and xlsx_table.locator["sheet"]
    assert Chunk.objects.filter(document__file_type="docx").exclude(heading_path=[]).exists()
    scanned = Chunk.objects.filter(document__original_name="scanned_safety_notice.pdf")
    assert any("安全检查" in c.content for c in scanned)  # OCR of the page without a text layer
    manual_asset = DocumentAsset.objects.get(document__original_name="product_manual.pdf")
    assert manual_asset.page and manual_asset.width > 0 and manual_asset.file.size > 0
    image_chunk = Chunk.objects.get(content_type="image", document__original_name="product_manual.pdf")
    assert image_chunk.asset_ids == [manual_asset.pk]


def test_ingest_is_harmless_to_repeat(demo_dir, milvus, database_tasks, media_root):
    call_command("ingest", str(demo_dir / "employee_handbook.md"), "--kb", "hr", "--create", "--wait", stdout=io.StringIO())
    out = io.StringIO()
    call_command("ingest", str(demo_dir / "employee_handbook.md"), "--kb", "hr", "--create", "--wait", stdout=out)
    assert Document.objects.filter(knowledge_base__slug="hr").count() == 1
    assert "duplicate" in out.getvalue()


def test_ingest_exits_non_zero_when_a_file_fails(tmp_path, milvus, database_tasks, media_root):
    # given
    (tmp_path / "good.md").write_text("# 标题\n\n正文内容。", encoding="utf-8")
    (tmp_path / "fake.pdf").write_bytes(b"not a pdf")
    (tmp_path / "blank.txt").write_text("   \n\n", encoding="utf-8")
    out = io.StringIO()
    # when
    with pytest.raises(CommandError) as error:
        call_command("ingest", str(tmp_path), "--kb", "mixed", "--create", "--activate", stdout=out, stderr=io.StringIO())
    # then
    assert "2 个文件失败" in str(error.value)
    report = out.getvalue()
    assert "type_mismatch" in report and "no_text" in report
    assert Document.objects.get(original_name="good.md").status == DocumentStatus.READY
    assert KnowledgeBase.objects.get(slug="mixed").active_version is None  # nothing published


def test_ingest_unknown_kb_without_create(tmp_path, milvus):
    (tmp_path / "a.md").write_text("# A", encoding="utf-8")
    with pytest.raises(CommandError, match="不存在"):
        call_command("ingest", str(tmp_path), "--kb", "nope")


def test_ingest_missing_path(milvus):
    with pytest.raises(CommandError, match="找不到路径"):
        call_command("ingest", "/nonexistent/file.md", "--kb", "x", "--create")


def test_ingest_create_with_an_invalid_slug_is_a_clear_error(tmp_path, milvus):
    (tmp_path / "a.md").write_text("# A", encoding="utf-8")
    with pytest.raises(CommandError, match="slug"):
        call_command("ingest", str(tmp_path), "--kb", "Not A Slug", "--create")
    assert not KnowledgeBase.objects.exists()


def test_ingest_create_takes_the_embedding_model(tmp_path, milvus, database_tasks, media_root):
    # given
    (tmp_path / "a.txt").write_text("星河云盘为每位员工提供 2TB 存储空间。", encoding="utf-8")

    # when
    call_command("ingest", str(tmp_path), "--kb", "e5-kb", "--create", "--embedding-model", "local-e5-small-v1",
                 "--activate", stdout=io.StringIO())

    # then
    kb = KnowledgeBase.objects.get(slug="e5-kb")
    assert (kb.embedding_model, kb.embedding_dimension) == ("local-e5-small-v1", 384)
    assert kb.active_version is not None


def test_ingest_refuses_another_embedding_model_for_an_existing_kb(tmp_path, milvus, database_tasks, media_root):
    # given
    (tmp_path / "a.txt").write_text("内容", encoding="utf-8")
    call_command("ingest", str(tmp_path), "--kb", "hash-kb", "--create", stdout=io.StringIO())

    # when / then
    with pytest.raises(CommandError, match="创建后不能更改"):
        call_command("ingest", str(tmp_path), "--kb", "hash-kb", "--embedding-model", "local-e5-small-v1",
                     stdout=io.StringIO())


def test_ingest_create_with_an_unknown_remote_model_names_the_problem(tmp_path, milvus):
    # given
    (tmp_path / "a.txt").write_text("内容", encoding="utf-8")

    # when / then: a remote model with no dimension cannot make an embedding space
    with pytest.raises(CommandError, match="dimension"):
        call_command("ingest", str(tmp_path), "--kb", "remote-kb", "--create", "--embedding-model", "bge-m3",
                     stdout=io.StringIO())
    assert not KnowledgeBase.objects.filter(slug="remote-kb").exists()


def test_milvus_uri_set_to_a_lite_file_in_the_environment_works_as_documented(tmp_path):
    # given: .env.example documents MILVUS_URI=/path/to/file.db (Milvus Lite in-process), which
    # pymilvus used to read at import and refuse
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("入职满一年的员工每年享有 15 天带薪年假。", encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "RAG_", "MILVUS_"))}
    env = {
        **clean, "DJANGO_SETTINGS_MODULE": "ragsite.settings.local", "RAGSITE_VAR_DIR": str(tmp_path / "var"),
        "MILVUS_URI": str(tmp_path / "milvus.db"), "RAG_WARM_UP": "false",
        "RAG_EMBEDDING_MODEL": "local-hash-lexical-v1", "RAG_EMBEDDING_DIMENSION": "512",
    }

    def manage(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=240)

    # when
    migrated = manage("migrate", "--noinput")
    ingested = manage("ingest", str(tmp_path / "docs"), "--kb", "lite", "--create", "--activate")
    checked = manage("check_index", "--kb", "lite")

    # then
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    assert ingested.returncode == 0, ingested.stderr[-2000:]
    assert "ready" in ingested.stdout and "已发布 lite v1" in ingested.stdout
    assert (tmp_path / "milvus.db").exists()
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert "lite: ok — 1 documents, 1 chunks" in checked.stdout


def test_ingest_works_the_queue_with_several_processes(tmp_path, milvus_server):
    # given: 100 one-passage files, batches of 2, two processes (the command and one helper).
    # Enough batches that the command cannot finish them all while the helper is still starting
    # (with 10 batches of 4 it sometimes did, and the helper found the queue empty).
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(100):
        (docs / f"{n:02d}.txt").write_text(f"第 {n} 条：员工每年享有 {n + 5} 天年假。", encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "RAG_", "MILVUS_"))}
    env = {
        **clean, "DJANGO_SETTINGS_MODULE": "ragsite.settings.local", "RAGSITE_VAR_DIR": str(tmp_path / "var"),
        "MILVUS_URI": milvus_server, "MILVUS_COLLECTION_PREFIX": f"multi{os.getpid()}", "RAG_WARM_UP": "false",
        "RAG_INGESTION_BATCH_DOCUMENTS": "2",
    }

    def manage(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=300)

    assert manage("migrate", "--noinput").returncode == 0

    # when
    ingested = manage("ingest", str(docs), "--kb", "multi", "--create", "--activate", "--workers", "2",
                      "--embedding-model", "local-hash-lexical-v1")
    checked = manage("check_index", "--kb", "multi")
    workers = manage("shell", "-c", "from django_tasks_db.models import DBTaskResult as R; "
                     "print(sorted({w for ws in R.objects.values_list('worker_ids', flat=True) for w in ws}))")

    # then: every file READY and published, Milvus agrees, and both processes took batches
    assert ingested.returncode == 0, ingested.stderr[-2000:]
    assert ingested.stdout.count(" ready ") == 100 and "已发布 multi v1" in ingested.stdout
    assert "multi: ok — 100 documents, 100 chunks" in checked.stdout, checked.stdout + checked.stderr
    assert len(eval(workers.stdout.strip().splitlines()[-1])) == 2, workers.stdout


def test_ingest_refuses_zero_workers(tmp_path, milvus):
    (tmp_path / "a.txt").write_text("内容。", encoding="utf-8")
    with pytest.raises(CommandError, match="--workers"):
        call_command("ingest", str(tmp_path), "--kb", "w", "--create", "--wait", "--workers", "0", stdout=io.StringIO())


def test_a_refused_file_is_reported_and_the_rest_of_its_upload_group_lands(tmp_path, milvus, database_tasks, media_root, settings):
    # given: more files than one upload group takes, one of them empty
    settings.RAG_MAX_FILES_PER_UPLOAD = 3
    settings.RAG_INGESTION_BATCH_DOCUMENTS = 3
    for n in range(7):
        (tmp_path / f"{n}.txt").write_text(f"第 {n} 段内容。", encoding="utf-8")
    (tmp_path / "4.txt").write_bytes(b"")
    out = io.StringIO()

    # when
    with pytest.raises(CommandError):
        call_command("ingest", str(tmp_path), "--kb", "groups", "--create", "--wait", stdout=out, stderr=io.StringIO())

    # then
    report = out.getvalue()
    assert "empty_file" in report
    assert sorted(Document.objects.values_list("original_name", flat=True)) == ["0.txt", "1.txt", "2.txt", "3.txt", "5.txt", "6.txt"]
    assert set(Document.objects.values_list("status", flat=True)) == {DocumentStatus.READY}


def test_ingest_into_a_kb_whose_model_the_deployment_cannot_serve_reports_each_file(tmp_path, milvus, database_tasks, media_root, settings):
    # given: a knowledge base on a remote model while the deployment runs the local provider
    from knowledge.models import KnowledgeBase

    settings.RAG_INGEST_WORKERS = 0
    (tmp_path / "a.txt").write_text("年假十五天。", encoding="utf-8")
    kb = KnowledgeBase.objects.create(slug="remote", name="remote", embedding_model="text-embedding-v3",
                                      embedding_dimension=1024)
    out = io.StringIO()

    # when: no traceback while choosing the number of processes; the file fails with the reason
    with pytest.raises(CommandError, match="1 个文件失败"):
        call_command("ingest", str(tmp_path), "--kb", kb.slug, "--wait", stdout=out, stderr=io.StringIO())

    # then
    assert "embedding_mismatch" in out.getvalue()
