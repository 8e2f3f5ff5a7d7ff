"""`--filter JSON` of the evaluation commands: metadata filters every question is retrieved with."""

from __future__ import annotations

import json

from django.core.management.base import CommandError

from retrieval.contracts import MetadataFilter
from retrieval.filters import InvalidFilter, parse_filters


def filters_option(texts: list[str]) -> tuple[MetadataFilter, ...]:
    """The --filter options as one list (numbered in order in an error): each the JSON of a
    filter object or of a list of them."""
    given: list = []
    for text in texts:
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise CommandError(f"--filter 不是 JSON：{text}") from exc
        given.extend(value if isinstance(value, list) else [value])
    try:
        return parse_filters(given)
    except InvalidFilter as error:
        raise CommandError(f"--filter: {error.message}") from error
