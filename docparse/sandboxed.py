"""Parsing and OCR as the parse sandbox's child runs them (see `engines.sandbox`).

PDFium, lxml, Pillow and the ONNX OCR runtime are native code reading files from outside; in
the child, a file that crashes one of them kills the child, not the ingestion worker. Plain
data in and out: `ParseResult` and `ParseError` travel back pickled.
"""

from __future__ import annotations

from typing import Any

from . import parse_document
from .ocr import ocr_image_text


def handle(operation: str, payload: dict[str, Any]) -> Any:
    if operation == "parse":
        return parse_document(
            payload["data"],
            file_type=payload["file_type"],
            filename=payload["filename"],
            limits=payload["limits"],
            text_encoding=payload["text_encoding"],
        )
    if operation == "ocr_text":
        return ocr_image_text(payload["jpeg"], seconds=payload["seconds"])
    raise ValueError(f"unknown operation {operation!r}")
