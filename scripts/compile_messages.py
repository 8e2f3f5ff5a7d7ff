"""Compile locale/*/LC_MESSAGES/django.po to .mo without GNU gettext.

Chinese is the source language of user-facing text; the English catalog is optional. Compiled
.mo files are build output and are not committed.
"""

from __future__ import annotations

import ast
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_po(path: Path) -> dict[str, str]:
    """msgid → msgstr for every translated, non-fuzzy entry (entries are blank-line separated)."""
    messages: dict[str, str] = {}
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        fuzzy = False
        parts: dict[str, list[str]] = {}
        current: list[str] | None = None
        for raw in block.splitlines():
            line = raw.strip()
            if line.startswith("#,") and "fuzzy" in line:
                fuzzy = True
            elif line.startswith("msgctxt "):
                current = parts.setdefault("msgctxt", [])
                current.append(ast.literal_eval(line[8:]))
            elif line.startswith("msgid "):
                current = parts.setdefault("msgid", [])
                current.append(ast.literal_eval(line[6:]))
            elif line.startswith("msgid_plural "):
                current = parts.setdefault("msgid_plural", [])
                current.append(ast.literal_eval(line[13:]))
            elif line.startswith("msgstr["):
                index, _, rest = line[7:].partition("]")
                current = parts.setdefault(f"msgstr[{int(index)}]", [])
                current.append(ast.literal_eval(rest.strip()))
            elif line.startswith("msgstr "):
                current = parts.setdefault("msgstr", [])
                current.append(ast.literal_eval(line[7:]))
            elif line.startswith('"') and current is not None:
                current.append(ast.literal_eval(line))
        if "msgid" not in parts or fuzzy:
            continue
        msgid = "".join(parts["msgid"])
        if "msgctxt" in parts:
            # .mo keys of entries with a context (pgettext): "context\x04msgid"
            msgid = "".join(parts["msgctxt"]) + "\x04" + msgid
        if "msgid_plural" in parts:
            # .mo plural entries: "singular\0plural" → "form0\0form1…"
            forms = ["".join(parts[key]) for key in sorted(k for k in parts if k.startswith("msgstr["))]
            if forms and all(forms):
                messages[msgid + "\0" + "".join(parts["msgid_plural"])] = "\0".join(forms)
        else:
            msgstr = "".join(parts.get("msgstr", []))
            if msgstr:
                messages[msgid] = msgstr
    return messages


def write_mo(messages: dict[str, str], path: Path) -> None:
    keys = sorted(messages)
    ids = b"".join(k.encode() + b"\0" for k in keys)
    strs = b"".join(messages[k].encode() + b"\0" for k in keys)
    count = len(keys)
    header_size = 7 * 4
    ids_table = header_size
    strs_table = ids_table + count * 8
    data_start = strs_table + count * 8
    id_offsets, str_offsets = [], []
    offset = data_start
    for k in keys:
        length = len(k.encode())
        id_offsets += [length, offset]
        offset += length + 1
    for k in keys:
        length = len(messages[k].encode())
        str_offsets += [length, offset]
        offset += length + 1
    output = struct.pack("Iiiiiii", 0x950412DE, 0, count, ids_table, strs_table, 0, 0)
    output += struct.pack(f"{2 * count}i", *id_offsets) if count else b""
    output += struct.pack(f"{2 * count}i", *str_offsets) if count else b""
    path.write_bytes(output + ids + strs)


def main() -> int:
    for po in sorted((ROOT / "locale").glob("*/LC_MESSAGES/*.po")):
        mo = po.with_suffix(".mo")
        if mo.exists() and mo.stat().st_mtime >= po.stat().st_mtime:
            continue
        write_mo(parse_po(po), mo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
