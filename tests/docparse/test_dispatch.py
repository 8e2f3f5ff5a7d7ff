from __future__ import annotations

import dataclasses

import pytest

from docparse import SUPPORTED_FILE_TYPES, ParseLimits, parse_document
from docparse.types import ParseError


def test_limits_defaults():
    # when
    limits = ParseLimits()

    # then
    assert (limits.max_pages, limits.max_sheet_rows, limits.max_cells) == (2000, 200_000, 5_000_000)
    assert (limits.max_archive_member_bytes, limits.max_total_uncompressed) == (
        100 * 2**20,
        300 * 2**20,
    )
    assert (limits.ocr_enabled, limits.ocr_seconds_per_page, limits.max_ocr_pages) == (
        True,
        20.0,
        50,
    )
    assert (limits.max_images, limits.min_image_side) == (500, 48)
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.max_pages = 1  # type: ignore[misc]


def test_unknown_type_is_refused(limits):
    # when
    with pytest.raises(ParseError) as caught:
        parse_document(b"data", file_type="exe", filename="a.exe", limits=limits)

    # then
    assert caught.value.code == "unsupported_file_type"


@pytest.mark.parametrize("file_type", SUPPORTED_FILE_TYPES)
def test_empty_input_is_refused_for_every_type(limits, file_type):
    # when
    with pytest.raises(ParseError) as caught:
        parse_document(b"", file_type=file_type, filename="empty", limits=limits)

    # then
    assert caught.value.code == "empty_file"
