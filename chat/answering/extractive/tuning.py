"""The extractive answerer's numbers, kept as data in `tuning.toml` beside this module."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

PATH = Path(__file__).with_name("tuning.toml")


@dataclass(frozen=True)
class Tuning:
    shape_bonus: float
    shape_miss: dict[str, float]
    caption_factor: float
    off_topic_factor: float
    max_lines: int
    min_meaning: float
    min_coverage: float
    close_call: float
    close_call_units: int
    meaning_lift: float
    meaning_units: int
    sentence_cache: int
    title_credit: float
    synonym_credit: float
    nearby_credit: float
    keep_ratio: float
    close_ratio: float
    min_gain: float
    range_models: int
    range_factor: float
    range_fit_factor: float
    range_miss_factor: float
    asks_factor: float
    lead_factor: float
    list_lines: int
    max_table_rows: int
    row_ratio: float
    max_images: int
    caption_chars: int
    delta_chars: int
    common_word_freq: int
    learned_min_support: float
    meaning_candidates: int
    scored_candidates: int


def load(path: Path = PATH) -> Tuning:
    """The numbers of `path`; a missing or unknown key is a TypeError at import, not a silent default."""
    return Tuning(**tomllib.loads(path.read_text(encoding="utf-8")))


TUNING = load()
