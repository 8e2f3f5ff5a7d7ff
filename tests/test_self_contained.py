"""The repository explains itself: no comment, docstring or document points a reader at design
notes, seed sections or issues that a reader of this repository cannot open."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("chat", "engines", "evaluation", "knowledge", "ragsite", "retrieval", "benchmarks", "scripts", "static",
           "templates", "tests")
SUFFIXES = {".py", ".toml", ".md", ".js", ".html", ".css"}
# Evaluation datasets are read from ../shared/eval by the commands that take them as input; a
# path to data is an argument, not a reference a reader is sent to.
OUTSIDE = re.compile(r"\bseeds? `?0\d\d\b|§\s*\d|DESIGN\.md|\.\./shared/(?!eval\b)|\bissue \d+\b", re.IGNORECASE)


def tracked_files() -> list[Path]:
    # Only what the repository holds: installed packages (tests/js/node_modules) and generated
    # output cite their own standards and are not ours to word.
    listed = subprocess.run(["git", "ls-files", "-z", "--", "README.md", "Makefile", ".env.example", *SOURCES],
                            cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    return [ROOT / name for name in listed
            if name and (Path(name).suffix in SUFFIXES or "/" not in name) and "vendor" not in Path(name).parts]


def test_no_text_cites_documents_outside_the_repository():
    files = tracked_files()
    assert ROOT / "README.md" in files
    offending = []
    for path in files:
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                offending.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert offending == []
