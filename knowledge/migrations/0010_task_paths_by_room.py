"""Queued and running task rows name their task by module path: the ingestion, FAQ indexing
and re-analysis tasks moved into the documents and FAQ packages, so rows written before the
move are pointed at the new paths (and back, when the migration is reversed)."""

from django.db import migrations

MOVED = {
    "knowledge.ingestion.ingest_documents_task": "knowledge.documents.ingestion.tasks.ingest_documents_task",
    "knowledge.ingestion.ingest_document_task": "knowledge.documents.ingestion.tasks.ingest_document_task",
    "knowledge.faq_index.index_faqs": "knowledge.faqs.index.index_faqs",
    "knowledge.reanalysis.reanalyse_task": "knowledge.documents.reanalysis.reanalyse_task",
}


def rename(apps, moves: dict[str, str]) -> None:
    DBTaskResult = apps.get_model("django_tasks_database", "DBTaskResult")
    for old, new in moves.items():
        DBTaskResult.objects.filter(task_path=old).update(task_path=new)


def forwards(apps, schema_editor):
    rename(apps, MOVED)


def backwards(apps, schema_editor):
    rename(apps, {new: old for old, new in MOVED.items()})


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0009_plain_wording"),
        ("django_tasks_database", "0021_conditional_partial_index_ordering"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
