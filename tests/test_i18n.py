"""Every Chinese user-facing string has an English translation (Chinese is the source language).

Strings are collected the way `makemessages` would find them: literal first arguments of
gettext calls in Python, `{% translate "…" %}` in templates, and the answers of the chat rules
file (translated at run time with gettext).
"""

from __future__ import annotations

import ast
import itertools
import re
import runpy
import tomllib
from pathlib import Path

from django.utils import translation

ROOT = Path(__file__).resolve().parent.parent
APPS = ("engines", "knowledge", "retrieval", "chat", "evaluation", "integrations", "ragsite")
GETTEXT = {"_", "gettext", "gettext_lazy", "pgettext", "pgettext_lazy", "ngettext", "ngettext_lazy", "gettext_noop"}
CJK = re.compile(r"[\u4e00-\u9fff]")
TEMPLATE_TAG = re.compile(r"""{%\s*(?:translate|trans)\s+(["'])(.+?)\1""")


def python_msgids() -> set[str]:
    found = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if name not in GETTEXT:
                    continue
                literals = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                if name.startswith("pgettext") and len(literals) >= 2:
                    found.add(f"{literals[0]}\x04{literals[1]}")  # the catalog key of a context entry
                elif literals and isinstance(node.args[0], ast.Constant):
                    found.add(literals[0])
    return found


def template_msgids() -> set[str]:
    found = set()
    for path in list((ROOT / "templates").rglob("*.html")) + list(ROOT.glob("*/templates/**/*.html")):
        found.update(match.group(2) for match in TEMPLATE_TAG.finditer(path.read_text(encoding="utf-8")))
    return found


def rules_msgids() -> set[str]:
    rules = tomllib.loads((ROOT / "chat" / "rules.toml").read_text(encoding="utf-8"))
    return {item["answer"] for item in rules["direct"]}


def catalog() -> dict[str, str]:
    parse_po = runpy.run_path(str(ROOT / "scripts" / "compile_messages.py"), run_name="catalog")["parse_po"]
    # Plural entries are keyed "singular\0plural" as in a .mo file.
    return {key.split("\0")[0]: value for key, value in parse_po(ROOT / "locale" / "en" / "LC_MESSAGES" / "django.po").items()}


def test_every_chinese_msgid_has_an_english_translation():
    # given: every Chinese string the code and templates show to users
    wanted = {m for m in python_msgids() | template_msgids() | rules_msgids() if CJK.search(m)}
    # when: compared with the English catalog
    missing = sorted(m for m in wanted if not catalog().get(m))
    # then
    assert missing == []


def test_english_is_served_from_the_compiled_catalog():
    with translation.override("en"):
        assert translation.gettext("知识库") != "知识库"


def test_no_catalog_defines_a_message_twice_or_leaves_a_fragment():
    # given: every catalog of the project, read block by block as gettext reads it
    for po in sorted((ROOT / "locale").glob("*/LC_MESSAGES/*.po")):
        seen, problems = set(), []
        for number, block in enumerate(po.read_text(encoding="utf-8").split("\n\n")):
            lines = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
            if not lines:
                continue
            # when: its key is the context and the message id
            if not any(line.startswith("msgid ") for line in lines):
                problems.append(f"block {number}: text without a msgid: {lines[0][:60]}")
                continue
            # The context and id with their continuation lines, up to the first msgid_plural/msgstr.
            key = tuple(itertools.takewhile(lambda line: not line.startswith(("msgid_plural", "msgstr")), lines))
            if key in seen:
                problems.append(f"block {number}: {key[-1][:60]} defined again")
            seen.add(key)
        # then: msgfmt --check would accept it
        assert problems == [], po
