from __future__ import annotations

import io

import pytest

from docparse import ParseLimits


@pytest.fixture
def limits() -> ParseLimits:
    return ParseLimits()


@pytest.fixture
def no_ocr() -> ParseLimits:
    return ParseLimits(ocr_enabled=False)


@pytest.fixture
def docx_bytes():
    """Save a python-docx Document to bytes."""

    def save(document) -> bytes:
        buffer = io.BytesIO()
        document.save(buffer)
        return buffer.getvalue()

    return save
