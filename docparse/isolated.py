"""`parse_document` and `ocr_image_text` run in a child process (`engines.sandbox`).

The parsers read files from outside with native libraries (PDFium, lxml, Pillow, the ONNX OCR
runtime). In-process, a file that makes one of them crash would kill the ingestion worker — and
the next worker that picked the document up again. In the sandbox it kills a child: the
document fails with `parser_crashed` and the worker goes on with the next one. A parse that
overruns its deadline kills the child too (a hung library cannot be interrupted otherwise) and
is a transient `parse_timeout`, retried later.

One child per process, one call at a time; it is started on first use and after each death.
"""

from __future__ import annotations

import logging
import threading

from engines.sandbox import Sandbox, SandboxCrashed, SandboxStartFailed, SandboxTimeout

from .limits import ParseLimits
from .types import ParseError, ParseResult

logger = logging.getLogger(__name__)

_sandbox: Sandbox | None = None
_lock = threading.Lock()


def parse_sandbox() -> Sandbox:
    global _sandbox
    with _lock:
        if _sandbox is None:
            _sandbox = Sandbox(name="parser", handler_module="docparse.sandboxed")
        return _sandbox


def parse_document(
    data: bytes,
    *,
    file_type: str,
    filename: str,
    limits: ParseLimits,
    text_encoding: str | None = None,
    timeout: float,
) -> ParseResult:
    """`docparse.parse_document`, in the sandbox; raises `ParseError` only."""
    payload = {"data": data, "file_type": file_type, "filename": filename, "limits": limits,
               "text_encoding": text_encoding}
    sandbox = parse_sandbox()
    try:
        result = sandbox.call("parse", payload, timeout=timeout)
    except ParseError as exc:
        if exc.code == "ocr_timeout":
            _stop_runaway_ocr(sandbox)
        raise
    except SandboxCrashed as exc:
        raise ParseError(
            "parser_crashed",
            f"解析该文件时解析组件异常退出（{exc.signal_name}），文件可能触发了解析库的缺陷，已停止处理该文档。"
            "请用原软件另存文件后重新上传。",
        ) from exc
    except SandboxTimeout as exc:
        raise ParseError(
            "parse_timeout", f"解析该文件超过 {timeout:.0f} 秒仍未完成，已中止。", transient=True
        ) from exc
    except SandboxStartFailed as exc:
        logger.error("the parser process could not start: %s", exc)
        raise ParseError("parser_unavailable", "解析服务暂时不可用。", transient=True) from exc
    if result.ocr_timed_out_pages:
        _stop_runaway_ocr(sandbox)
    return result


def ocr_image_text(jpeg: bytes, *, seconds: float, timeout: float) -> str:
    """`docparse.ocr.ocr_image_text`, in the sandbox: best effort, "" on any failure
    (a caption is an aid to retrieval; the image keeps its nearby text)."""
    sandbox = parse_sandbox()
    try:
        return sandbox.call("ocr_text", {"jpeg": jpeg, "seconds": seconds}, timeout=timeout)
    except (SandboxCrashed, SandboxTimeout, SandboxStartFailed) as exc:
        logger.warning("OCR of an image for its caption failed: %s", exc)
        return ""


def _stop_runaway_ocr(sandbox: Sandbox) -> None:
    # An OCR call that ran out of time keeps running in the child (ONNX inference cannot be
    # interrupted) and would eat the next document's time; a fresh child starts without it.
    sandbox.close()
