"""An OTLP/HTTP trace receiver on loopback: what a collector or Langfuse's `/api/public/otel`
endpoint is to the exporter. It accepts `POST /v1/traces` (protobuf, optionally gzip), decodes
each `ExportTraceServiceRequest` with opentelemetry-proto and keeps the spans and headers."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.fakes.ports import LoopbackHTTPServer


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # 32 hex digits
    span_id: str
    parent_span_id: str  # "" for a root span
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str


@dataclass(frozen=True)
class ReceivedExport:
    path: str
    headers: dict[str, str]
    spans: tuple[ReceivedSpan, ...]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(pairs) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def decode(body: bytes) -> tuple[ReceivedSpan, ...]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(), attributes=_attributes(span.attributes),
                    resource=resource, status_code=span.status.code, status_message=span.status.message,
                ))
    return tuple(spans)


class OtlpReceiver:
    def __init__(self) -> None:
        self.exports: list[ReceivedExport] = []
        self._lock = threading.Lock()
        self._server: LoopbackHTTPServer | None = None

    def start(self) -> OtlpReceiver:
        handler = type("Handler", (_Handler,), {"receiver": self})
        self._server = LoopbackHTTPServer(handler, name="fake-otlp")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    @property
    def endpoint(self) -> str:
        """The base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it (the exporter adds /v1/traces)."""
        assert self._server is not None, "receiver not started"
        return self._server.base_url

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return [span for export in self.exports for span in export.spans]

    def _record(self, export: ReceivedExport) -> None:
        with self._lock:
            self.exports.append(export)


class _Handler(BaseHTTPRequestHandler):
    receiver: OtlpReceiver

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self._send(404, b"")
            return
        self.receiver._record(ReceivedExport(
            path=self.path, headers={k.lower(): v for k, v in self.headers.items()}, spans=decode(body),
        ))
        self._send(200, ExportTraceServiceResponse().SerializeToString())

    def _send(self, status: int, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
