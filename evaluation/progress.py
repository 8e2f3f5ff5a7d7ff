"""A progress bar for the evaluation commands: on a terminal only, silent in files and pipes."""

from __future__ import annotations

from collections.abc import Callable

from django.core.management.base import OutputWrapper


def terminal_progress(stream: OutputWrapper, name: str) -> Callable[[int, int], None] | None:
    if not stream.isatty():
        return None

    def show(done: int, total: int) -> None:
        filled = int(30 * done / total) if total else 30
        stream.write(f"\r{name:<28} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total}",
                     ending="\n" if done >= total else "")
        stream.flush()

    return show
