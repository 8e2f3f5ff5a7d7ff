"""The models and the migrations agree: no change is left without a migration."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils.module_loading import import_string
from django_tasks_db.models import DBTaskResult, get_date_max


@pytest.mark.django_db
def test_no_missing_migrations():
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exit_:
        pytest.fail(f"models changed without a migration:\n{out.getvalue()}" if exit_.code else "")



@pytest.mark.django_db(transaction=True)
def test_queued_tasks_of_the_old_module_paths_follow_the_move():
    # given: the knowledge schema before the move, an ingestion batch still queued under its old path
    before, after = [("knowledge", "0009_plain_wording")], [("knowledge", "0010_task_paths_by_room")]
    MigrationExecutor(connection).migrate(before)
    row = DBTaskResult.objects.create(
        task_path="knowledge.ingestion.ingest_documents_task", args_kwargs={"args": [], "kwargs": {"document_ids": [1]}},
        queue_name="ingestion", backend_name="default", run_after=get_date_max(),
    )

    # when
    MigrationExecutor(connection).migrate(after)

    # then: the row names the task where it lives now, and that path imports
    moved = DBTaskResult.objects.get(pk=row.pk)
    assert moved.task_path == "knowledge.documents.ingestion.tasks.ingest_documents_task"
    assert import_string(moved.task_path).name == "ingest_documents_task"
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
