"""Resource limits every parser honours, so one hostile file cannot exhaust a worker."""

from __future__ import annotations

from dataclasses import dataclass

MB = 1024 * 1024


@dataclass(frozen=True)
class ParseLimits:
    max_pages: int = 2000
    max_sheet_rows: int = 200_000
    max_cells: int = 5_000_000
    max_archive_member_bytes: int = 100 * MB
    max_total_uncompressed: int = 300 * MB
    max_archive_members: int = 20_000
    ocr_enabled: bool = True
    ocr_seconds_per_page: float = 20.0
    max_ocr_pages: int = 50
    max_images: int = 500
    min_image_side: int = 48
    # Stored images are only shown next to citations; larger ones are scaled down to this side.
    max_image_side: int = 2048
