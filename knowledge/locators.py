"""Where a chunk sits in its document, as a reader would say it."""

from __future__ import annotations

from django.utils.translation import gettext as _


def locator_label(locator: dict) -> str:
    """Where the chunk sits, as a reader would say it (the chunker's locator keys:
    page_start/page_end, sheet + range, slide/slide_end, line_start/line_end)."""
    first, last = locator.get("page_start", locator.get("page")), locator.get("page_end")
    if first:
        if last and last != first:
            return _("第 %(first)s–%(last)s 页") % {"first": first, "last": last}
        return _("第 %(page)s 页") % {"page": first}
    cells = locator.get("range") or locator.get("cell_range") or ""
    if locator.get("sheet"):
        return (_("工作表 %(sheet)s %(cells)s") % {"sheet": locator["sheet"], "cells": cells}).strip()
    if cells:
        return _("单元格 %(cells)s") % {"cells": cells}
    if locator.get("slide"):
        if locator.get("slide_end") and locator["slide_end"] != locator["slide"]:
            return _("第 %(first)s–%(last)s 张幻灯片") % {"first": locator["slide"], "last": locator["slide_end"]}
        return _("第 %(slide)s 张幻灯片") % {"slide": locator["slide"]}
    first, last = locator.get("line_start", locator.get("line")), locator.get("line_end")
    if first:
        if last and last != first:
            return _("第 %(first)s–%(last)s 行") % {"first": first, "last": last}
        return _("第 %(line)s 行") % {"line": first}
    return ""
