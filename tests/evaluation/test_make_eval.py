"""`make eval` as the Makefile writes it: the demo set imported as the demo KB's default, the
retrieval ablation and the answer evaluation, each a real `manage.py` in a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation.demo import demo_cases

ROOT = Path(__file__).resolve().parents[2]


def recipe(target: str) -> list[list[str]]:
    """A Makefile target's commands, with $(PY) as this interpreter."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    body = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    return [line.strip().replace("$(PY)", sys.executable).split() for line in body.splitlines() if line.strip()]


def eval_recipe() -> list[list[str]]:
    return recipe("eval")


def test_the_demo_set_has_forty_questions_some_unanswerable_each_naming_its_file():
    cases = demo_cases()
    assert len(cases) >= 40
    assert sum(not case.answerable for case in cases) >= 5
    # asked the way employees ask, too
    asked = {case.category for case in cases}
    assert {"paraphrase", "traditional", "english", "follow_up", "lookalike", "table"} <= asked
    assert all(case.history for case in cases if case.category == "follow_up")
    assert all(case.expected_documents and case.answers for case in cases if case.answerable)
    assert len({case.key for case in cases}) == len(cases)


@pytest.mark.slow
def test_make_eval_prints_the_ablation_and_the_answer_tables(tmp_path):
    # given: a fresh var directory with the demo knowledge base (the fast lexical embedder)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "RAG_", "MILVUS_"))}
    env = {**clean, "DJANGO_SETTINGS_MODULE": "ragsite.settings.local", "RAGSITE_VAR_DIR": str(tmp_path / "var"),
           "RAG_WARM_UP": "false", "RAG_EMBEDDING_MODEL": "local-hash-lexical-v1", "RAG_EMBEDDING_DIMENSION": "512"}

    def run(command: list[str]) -> subprocess.CompletedProcess:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-3000:])
        return result

    run([sys.executable, "manage.py", "migrate", "--noinput"])
    bootstrapped = [run(command) for command in recipe("bootstrap")]
    # the demo's set is its default from the first `make run` on, and a second run leaves it alone
    assert "default of demo" in bootstrapped[-1].stdout
    again = run(recipe("bootstrap")[-1])
    assert "已存在" in again.stdout

    # when
    imported, retrieval, answers = (run(command) for command in eval_recipe())

    # then
    cases = demo_cases()
    unanswerable = sum(not case.answerable for case in cases)
    assert f"demo: {len(cases)} cases ({unanswerable} unanswerable)" in imported.stdout
    assert "default of demo" in imported.stdout
    for name in ("dense", "sparse", "hybrid − rewrite", "hybrid − rerank", "hybrid + parent expansion"):
        assert name in retrieval.stdout
    assert "stage p50/p95 ms" in retrieval.stdout
    assert "containment" in answers.stdout and "insufficient_context_rate" in answers.stdout
    assert "confidence" in answers.stdout and "high" in answers.stdout
    assert "first_line" in answers.stdout and "category" in answers.stdout and "english" in answers.stdout
