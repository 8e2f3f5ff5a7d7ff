"""OpenTelemetry tracing (ragsite/telemetry.py) end to end: a real daphne and a real ingestion
worker export OTLP/HTTP to a receiver on loopback, as they would to a collector or Langfuse.

- A chat turn is one trace whose id is its QueryTrace's, a `chat.turn` span with a child span
  per stage the trace timed, carrying ids, outcomes and timings — no question or answer text
  unless RAG_OTEL_CAPTURE_CONTENT is on.
- An ingestion batch is a trace of its stages with document ids and chunk counts.
- Without an endpoint nothing is configured: the provider is the API's no-op one.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect
from django.core.files.uploadedfile import SimpleUploadedFile
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from chat.models import QueryTrace
from knowledge.documents import services as document_services
from knowledge.models import Document, DocumentStatus
from ragsite import telemetry
from ragsite.reporting import SUBSTITUTE, redact
from tests.chat.conftest import (
    FAQ_QUESTION,
    RAG_QUESTION,
    live_chat_server,
    post_stream,
    publish_kb,
    text_of,
    ws_url,
)
from tests.conftest import make_kb
from tests.fakes.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.fakes.provider_server import Answer, Fail
from tests.live import database_url, eventually

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
CREDENTIALS = base64.b64encode(b"pk-lf-test:sk-lf-test").decode()
# The stages a document answer runs through, each timed in QueryTrace.stage_timings.
DOCUMENT_STAGES = {"route", "prepare", "faq_search", "doc_search", "context_build", "llm_generation",
                   "citation_check"}


# --- fixtures, named by state ---------------------------------------------------------------------


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture
def tracing_to_receiver(settings, monkeypatch, otlp_receiver) -> OtlpReceiver:
    """Servers started from now on export their spans to the receiver, with Langfuse's kind of
    Basic credentials; their batch is sent every 50 ms (the test server is stopped, not exited,
    so nothing is flushed at its end)."""
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = otlp_receiver.endpoint
    settings.OTEL_EXPORTER_OTLP_HEADERS = f"Authorization=Basic%20{CREDENTIALS}"
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    return otlp_receiver


@pytest.fixture
def published_kb(milvus, run_tasks, media_root, staff_user):
    return publish_kb(actor=staff_user)


# --- helpers ------------------------------------------------------------------------------------


def turn_spans(receiver: OtlpReceiver, trace_id: uuid.UUID) -> list[ReceivedSpan]:
    """The turn's spans once its root span arrived (children end first, so they came along)."""

    def arrived() -> list[ReceivedSpan]:
        spans = [span for span in receiver.spans() if span.trace_id == trace_id.hex]
        return spans if any(span.name == "chat.turn" for span in spans) else []

    return eventually(arrived)


def strings_of(spans: list[ReceivedSpan]) -> list[str]:
    found = []
    for span in spans:
        for value in [*span.attributes.values(), *span.resource.values(), span.name, span.status_message]:
            found += [str(item) for item in value] if isinstance(value, list) else [str(value)]
    return found


# --- a chat turn --------------------------------------------------------------------------------


def test_a_chat_turn_is_one_trace_under_its_query_trace_id_with_a_span_per_stage(published_kb, tracing_to_receiver):
    # given: a server exporting to the receiver
    with live_chat_server() as base_url:
        # when: a question answered from the documents
        response = httpx.post(f"{base_url}/api/chat", json={"knowledge_base_id": published_kb.slug,
                                                            "question": RAG_QUESTION}, timeout=60)
        assert response.status_code == 200, response.text
        turn = response.json()
        stored = QueryTrace.objects.get(trace_id=turn["trace_id"])
        spans = turn_spans(tracing_to_receiver, stored.trace_id)

    # then: the trace id is the stored trace's, bit for bit
    roots = [span for span in spans if span.name == "chat.turn"]
    assert len(roots) == 1
    root = roots[0]
    assert root.trace_id == stored.trace_id.hex and root.parent_span_id == ""
    # every stage the trace timed is a child span of the turn, and nothing else is in the trace
    children = [span for span in spans if span is not root]
    assert all(span.parent_span_id == root.span_id for span in children)
    timed = {timing["stage"] for timing in stored.stage_timings}
    assert DOCUMENT_STAGES <= timed
    assert sorted(span.name for span in children) == sorted(f"chat.{stage}" for stage in timed | {"save_history"})
    assert all(span.attributes["rag.stage"] == span.name.removeprefix("chat.") for span in children)
    assert all(span.attributes["rag.elapsed_ms"] >= 0 for span in children)
    # the turn's attributes are what the QueryTrace holds
    attributes = root.attributes
    assert attributes["rag.trace_id"] == str(stored.trace_id)
    assert attributes["rag.kb.slug"] == published_kb.slug and attributes["rag.kb.id"] == published_kb.pk
    assert attributes["rag.kb.version"] == stored.kb_version == 1
    assert attributes["rag.route"] == stored.route and attributes["rag.hit_type"] == stored.hit_type == "rag"
    assert attributes["rag.confidence.level"] == stored.confidence_level
    assert attributes["rag.model"] == stored.model_name and attributes["gen_ai.request.model"] == stored.model_name
    assert attributes["rag.total_ms"] == stored.total_ms
    assert attributes["rag.degradations"] == stored.degradations or (
        "rag.degradations" not in attributes and stored.degradations == [])
    assert {f"rag.stage_ms.{stage}" for stage in timed} <= set(attributes)
    assert attributes["session.id"] == str(turn["conversation_id"])
    assert root.status_code != 2 and "error.type" not in attributes
    assert root.resource["service.name"] == "ragsite"
    # and no text of the question or the answer is anywhere in the trace
    texts = [RAG_QUESTION, turn["answer"], stored.rewritten_query, "保修期"]
    leaked = [value for value in strings_of(spans) for text in texts if text and text in value]
    assert leaked == []
    assert "input.value" not in attributes and "output.value" not in attributes
    # the exporter sent the configured credentials, as Langfuse expects them
    assert {export.headers["authorization"] for export in tracing_to_receiver.exports} == {f"Basic {CREDENTIALS}"}
    assert {export.path for export in tracing_to_receiver.exports} == {"/v1/traces"}


def test_with_content_capture_the_streamed_turn_carries_its_question_and_answer(
    published_kb, tracing_to_receiver, settings
):
    # given: content capture on
    settings.RAG_OTEL_CAPTURE_CONTENT = True
    with live_chat_server() as base_url:
        # when: the question is streamed (worker threads and the event loop)
        response, parts = post_stream(base_url, {"knowledge_base_id": published_kb.slug, "question": RAG_QUESTION})
        assert response.status_code == 200
        answer = text_of(parts)
        trace_id = uuid.UUID(next(p for p in parts if isinstance(p, dict) and p.get("type") == "data-answer")
                             ["data"]["trace_id"])
        spans = turn_spans(tracing_to_receiver, trace_id)

    # then: the turn span holds both texts, as Langfuse reads them (input / output)
    root = next(span for span in spans if span.name == "chat.turn")
    assert root.attributes["input.value"] == RAG_QUESTION
    assert root.attributes["output.value"] == answer and answer
    assert QueryTrace.objects.filter(trace_id=trace_id).exists()
    assert {span.parent_span_id for span in spans if span is not root} == {root.span_id}


def test_each_turn_of_a_websocket_is_its_own_trace_the_remote_answer_streamed_on_the_loop_included(
    published_kb, tracing_to_receiver, openai_provider
):
    # given: a remote model, whose answer streams on the server's event loop
    openai_provider.enqueue("openai.chat", Answer(text="星河X3 的保修期为 24 个月[来源 1](citation://1)。"))
    with live_chat_server() as base_url, connect(ws_url(base_url), origin=base_url, proxy=None,
                                                 open_timeout=30) as socket:
        # when: two questions on one socket, one answered by the model, one by a FAQ
        ends = []
        for question in (RAG_QUESTION, FAQ_QUESTION):
            socket.send(json.dumps({"type": "question", "knowledge_base_id": published_kb.slug,
                                    "question": question, "enable_query_rewrite": False}))
            while (event := json.loads(socket.recv(timeout=60)))["type"] not in ("end", "error"):
                pass
            assert event["type"] == "end", event
            ends.append(event)
        traces = [turn_spans(tracing_to_receiver, uuid.UUID(end["trace_id"])) for end in ends]

    # then: two traces, each under its own turn's id, every span of it under its turn span
    assert ends[0]["trace_id"] != ends[1]["trace_id"]
    for end, spans in zip(ends, traces, strict=True):
        root = next(span for span in spans if span.name == "chat.turn")
        assert root.trace_id == uuid.UUID(end["trace_id"]).hex
        assert {span.parent_span_id for span in spans if span is not root} == {root.span_id}
        assert root.attributes["rag.hit_type"] == end["hit_type"]
    model_turn, faq_turn = ({span.name for span in spans} for spans in traces)
    assert {"chat.doc_search", "chat.llm_generation", "chat.save_history"} <= model_turn
    assert faq_turn == {"chat.turn", "chat.route", "chat.save_history"}
    model = QueryTrace.objects.get(trace_id=ends[0]["trace_id"]).model_name
    assert "fake-chat" in model
    assert next(span for span in traces[0] if span.name == "chat.turn").attributes["rag.model"] == model


def test_a_failed_turn_ends_its_span_as_an_error_naming_the_class_only(published_kb, tracing_to_receiver,
                                                                         openai_provider, settings):
    # given: a remote model that fails to answer
    openai_provider.enqueue("openai.chat", *[Fail(500)] * 3)
    with live_chat_server() as base_url:
        # when
        response = httpx.post(f"{base_url}/api/chat", json={"knowledge_base_id": published_kb.slug,
                                                            "question": RAG_QUESTION,
                                                            "enable_query_rewrite": False}, timeout=60)
        stored = eventually(lambda: QueryTrace.objects.filter(knowledge_base=published_kb).exclude(
            error_class="").first())
        assert stored is not None, response.text
        spans = turn_spans(tracing_to_receiver, stored.trace_id)

    # then
    root = next(span for span in spans if span.name == "chat.turn")
    assert root.status_code == 2
    assert root.attributes["error.type"] == stored.error_class
    assert root.attributes["rag.error_code"] == stored.error_code
    assert RAG_QUESTION not in strings_of(spans)


# --- ingestion ----------------------------------------------------------------------------------


def test_an_ingestion_batch_is_a_trace_of_its_stages(milvus, media_root, database_tasks, settings, tmp_path,
                                                     otlp_receiver):
    # given: a queued document, and a worker process configured to export
    kb = make_kb()
    text = "# 差旅制度\n\n一线城市住宿标准为每晚 600 元，其他城市每晚 400 元。\n\n报销需在返回后三十日内提交。"
    document_services.upload_documents(kb=kb, actor=None, files=[SimpleUploadedFile("差旅制度.md", text.encode())])
    document = Document.objects.get(knowledge_base=kb)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "RAG_", "MILVUS_", "DATABASE_URL",
                                                                    "OTEL_"))},
        "DJANGO_SETTINGS_MODULE": "ragsite.settings.local",
        "DATABASE_URL": database_url(),
        "RAGSITE_VAR_DIR": str(tmp_path / "var"), "MEDIA_ROOT": str(media_root),
        "MILVUS_URI": settings.MILVUS_URI, "MILVUS_COLLECTION_PREFIX": settings.MILVUS_COLLECTION_PREFIX,
        "RAG_EMBEDDING_MODEL": kb.embedding_model, "RAG_EMBEDDING_DIMENSION": str(kb.embedding_dimension),
        "RAG_WARM_UP": "false", "RAG_OCR_ENABLED": "false",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.endpoint, "OTEL_SERVICE_NAME": "ragsite-worker",
    }

    # when: the worker runs the queue and exits (its last batch of spans is flushed at exit)
    worker = subprocess.run([sys.executable, "manage.py", "ingestion_worker", "--batch"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)

    # then
    assert worker.returncode == 0, worker.stderr[-3000:]
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY, (document.error_code, worker.stderr[-3000:])
    spans = otlp_receiver.spans()
    batch = next(span for span in spans if span.name == "ingestion.batch")
    in_trace = {span.span_id: span for span in spans if span.trace_id == batch.trace_id}
    names = sorted(span.name for span in in_trace.values())
    assert names == sorted(["ingestion.batch", "ingestion.knowledge_base", "ingestion.parse", "ingestion.chunk",
                            "ingestion.assets", "ingestion.embed", "ingestion.store", "ingestion.upsert",
                            "ingestion.ready"])
    group = next(span for span in in_trace.values() if span.name == "ingestion.knowledge_base")
    assert group.parent_span_id == batch.span_id
    assert all(span.parent_span_id == group.span_id for span in in_trace.values() if span not in (batch, group))
    assert batch.attributes["rag.documents.ready"] == 1 and batch.attributes["rag.chunks"] == document.chunk_count
    assert group.attributes["rag.kb.slug"] == kb.slug
    parse = next(span for span in in_trace.values() if span.name == "ingestion.parse")
    assert parse.attributes["rag.document.id"] == document.pk and parse.attributes["rag.kb.id"] == kb.pk
    chunk = next(span for span in in_trace.values() if span.name == "ingestion.chunk")
    assert chunk.attributes["rag.chunks"] == document.chunk_count > 0
    embed = next(span for span in in_trace.values() if span.name == "ingestion.embed")
    assert embed.attributes["rag.chunks"] == document.chunk_count and embed.attributes["rag.documents"] == 1
    assert batch.resource["service.name"] == "ragsite-worker"
    # nothing of the document's text or name
    assert [value for value in strings_of(spans) if "住宿" in value or "差旅" in value] == []


# --- off ----------------------------------------------------------------------------------------


def test_without_an_endpoint_nothing_is_configured_and_spans_are_no_ops(settings):
    # given: no endpoint (the test settings' default)
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = ""
    # when
    provider = telemetry.configure()
    span = telemetry.start_root_span("chat.turn", trace_id=uuid.uuid4())
    # then: the API's proxy provider, no exporter thread, and a span that records nothing
    assert provider is None
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    assert not any(thread.name.startswith("OtelBatch") for thread in threading.enumerate())
    assert not span.is_recording() and telemetry.start_child_span("chat.route", parent=span) is span


def test_the_tracing_module_imports_only_django_settings_and_opentelemetry():
    # given
    tree = ast.parse((ROOT / "ragsite" / "telemetry.py").read_text(encoding="utf-8"))
    # when
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    modules |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    # then: the standard library aside
    ours = {m for m in modules if m.split(".")[0] not in sys.stdlib_module_names and m != "__future__"}
    assert {m for m in ours if not m.startswith("opentelemetry")} == {"django.conf"}


def test_the_exporters_credentials_are_redacted_from_error_reports(settings):
    # given: Langfuse's kind of header
    settings.OTEL_EXPORTER_OTLP_HEADERS = f"Authorization=Basic%20{CREDENTIALS},x-langfuse-ingestion-version=4"
    # when: a report quotes the header, or the credential alone
    report = redact(f"headers={{'authorization': 'Basic {CREDENTIALS}'}} token={CREDENTIALS}")
    # then
    assert CREDENTIALS not in report and report.count(SUBSTITUTE) == 2
