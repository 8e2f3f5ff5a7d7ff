"""OpenTelemetry tracing, owned here: the one place that configures the SDK and starts spans.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set: then each process (web, ingestion worker,
commands) gets, at start (`ragsite.apps.TelemetryConfig.ready`), a `TracerProvider` whose
`BatchSpanProcessor` sends spans over OTLP/HTTP (protobuf) to `<endpoint>/v1/traces`, and flushes
what it holds when the process exits. Without it no provider is set: every span is the API's
no-op (`INVALID_SPAN`), nothing is exported, no thread runs.

Spans carry identifiers, counts, timings and outcomes; never a question's or an answer's text
unless `RAG_OTEL_CAPTURE_CONTENT` says so (`capture_content()`), and never a secret.

Spans are started with their parent passed in, not taken from the current context: a chat turn
moves between worker threads and the event loop, where the context does not follow it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import INVALID_SPAN, Span, Status, StatusCode
from opentelemetry.util.re import parse_env_headers

TRACES_PATH = "v1/traces"

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float]
Attributes = Mapping[str, AttributeValue]

# A proxy: it resolves to the configured provider's tracer once one is set, to the no-op before.
_tracer = trace.get_tracer("ragsite")

# The trace id the next root span takes (a chat turn's, so its spans and its stored QueryTrace
# share one id); unset: a random one. Set only around one `start_span` call in this context.
_chosen_trace_id: ContextVar[int | None] = ContextVar("ragsite_chosen_trace_id", default=None)


class _ChosenTraceIds(RandomIdGenerator):
    """Random ids, except a root span started by `start_root_span(trace_id=…)`, which takes
    that UUID's 128 bits. UUID4 keeps the low 56 bits random, as `is_trace_id_random` says."""

    def generate_trace_id(self) -> int:
        chosen = _chosen_trace_id.get()
        return chosen if chosen is not None else super().generate_trace_id()


def configure() -> TracerProvider | None:
    """Set up this process's tracing from the settings, once: the provider that exports, or
    None when no endpoint is configured (spans stay no-ops). A forked child keeps its parent's
    provider (the SDK restarts the export thread after a fork); one whose parent had none
    configures its own here."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    endpoint = settings.OTEL_EXPORTER_OTLP_ENDPOINT.strip()
    if not endpoint:
        return None
    provider = TracerProvider(
        # Resource.create adds OTEL_RESOURCE_ATTRIBUTES; the service name is the setting's.
        resource=Resource.create({SERVICE_NAME: settings.OTEL_SERVICE_NAME}),
        id_generator=_ChosenTraceIds(),
        # Flushes the batch still waiting at interpreter exit (daphne and the worker end that way).
        shutdown_on_exit=True,
    )
    exporter = OTLPSpanExporter(
        endpoint=traces_endpoint(endpoint),
        # The OTel format ("key=value,key2=value2", values URL-encoded), e.g. Langfuse's
        # "Authorization=Basic …"; the exporter adds OTEL_EXPORTER_OTLP_TRACES_HEADERS itself.
        headers=dict(parse_env_headers(settings.OTEL_EXPORTER_OTLP_HEADERS, liberal=True)),
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def traces_endpoint(endpoint: str) -> str:
    """`OTEL_EXPORTER_OTLP_ENDPOINT` is a base URL: the traces signal is under `v1/traces`."""
    return f"{endpoint.rstrip('/')}/{TRACES_PATH}"


def shutdown() -> None:
    """Export what is buffered and stop the export thread (what process exit does anyway)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()


def capture_content() -> bool:
    """Whether spans may carry questions' and answers' text (`input.value`, `output.value`)."""
    return settings.RAG_OTEL_CAPTURE_CONTENT


def start_root_span(name: str, *, trace_id: uuid.UUID | None = None, start_time: int | None = None,
                    attributes: Attributes | None = None) -> Span:
    """A span that starts a trace of its own (not a child of whatever is current), with
    `trace_id`'s 128 bits as its trace id when given. `start_time`: epoch nanoseconds."""
    token = _chosen_trace_id.set(trace_id.int if trace_id is not None else None)
    try:
        return _tracer.start_span(name, context=Context(), attributes=attributes, start_time=start_time)
    finally:
        _chosen_trace_id.reset(token)


def start_child_span(name: str, *, parent: Span, attributes: Attributes | None = None) -> Span:
    """A span under `parent`, whatever thread or task starts it. A no-op parent (tracing off,
    or the trace not sampled) gives the no-op span without asking the tracer."""
    if not parent.is_recording():
        return INVALID_SPAN
    return _tracer.start_span(name, context=trace.set_span_in_context(parent), attributes=attributes)


@contextmanager
def in_span(name: str, *, attributes: Attributes | None = None) -> Iterator[Span]:
    """A span under the current one (a new trace if there is none), current while the block
    runs: for work that stays in one thread, such as an ingestion batch and its stages. An
    exception ends it as an error naming its class (the message may quote content)."""
    with _tracer.start_as_current_span(name, attributes=attributes, record_exception=False,
                                       set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as exc:
            mark_failed(current, exc)
            raise


def mark_failed(target: Span, error: BaseException | None, *, code: str = "") -> None:
    """Mark `target` failed, by the error's class and code: never its message, which may quote
    a question, a document or a provider's reply."""
    if not target.is_recording():
        return
    kind = type(error).__name__ if error is not None else code
    target.set_attribute("error.type", kind or "error")
    if code:
        target.set_attribute("rag.error_code", code)
    target.set_status(Status(StatusCode.ERROR, kind or code))
