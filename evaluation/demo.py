"""The demo knowledge base's evaluation set: every demo question with the file that answers it
and the phrase a right answer contains, the same kind asked as employees ask them (reworded,
traditional, English, follow-ups, look-alike products, table cells), and questions no demo
document answers."""

from __future__ import annotations

from demo.questions import ASKED, ASKED_UNANSWERABLE, MORE_QUESTIONS, QUESTIONS, UNANSWERABLE

from .importers import CaseDraft

DEMO_SET = "demo"
# What an imported set records as its source when it is the demo's own questions; sets imported
# before the demo content left the knowledge app recorded its old module path.
DEMO_SOURCE = "demo.questions"
DEMO_SOURCES = frozenset({DEMO_SOURCE, "knowledge.demo.questions"})


def demo_cases() -> list[CaseDraft]:
    answerable = [
        CaseDraft(key=f"D{number:02d}", question=item["question"], expected_documents=(item["file"],),
                  expected_chunks=(), answers=(item["expected_answer"],), answerable=True, category="plain")
        for number, item in enumerate(QUESTIONS + MORE_QUESTIONS, 1)
    ]
    asked = [
        CaseDraft(key=f"E{number:02d}", question=item["question"], expected_documents=(item["file"],), expected_chunks=(),
                  answers=(item["expected_answer"],), answerable=True, category=item["category"],
                  history=tuple(item.get("history", ())))
        for number, item in enumerate(ASKED, 1)
    ]
    asked_unanswerable = [
        CaseDraft(key=f"EU{number:02d}", question=question, expected_documents=(), expected_chunks=(), answers=(),
                  answerable=False, category="unanswerable")
        for number, question in enumerate(ASKED_UNANSWERABLE, 1)
    ]
    unanswerable = [
        CaseDraft(key=f"U{number:02d}", question=question, expected_documents=(), expected_chunks=(), answers=(),
                  answerable=False, category="unanswerable")
        for number, question in enumerate(UNANSWERABLE, 1)
    ]
    return answerable + unanswerable + asked + asked_unanswerable
