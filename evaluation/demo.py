"""The demo knowledge base's evaluation set: every demo question with the file that answers it
and the phrase a right answer contains, plus questions no demo document answers."""

from __future__ import annotations

from knowledge.demo.questions import MORE_QUESTIONS, QUESTIONS, UNANSWERABLE

from .importers import CaseDraft

DEMO_SET = "demo"


def demo_cases() -> list[CaseDraft]:
    answerable = [
        CaseDraft(key=f"D{number:02d}", question=item["question"], expected_documents=(item["file"],),
                  expected_chunks=(), answers=(item["expected_answer"],), answerable=True)
        for number, item in enumerate(QUESTIONS + MORE_QUESTIONS, 1)
    ]
    unanswerable = [
        CaseDraft(key=f"U{number:02d}", question=question, expected_documents=(), expected_chunks=(), answers=(),
                  answerable=False)
        for number, question in enumerate(UNANSWERABLE, 1)
    ]
    return answerable + unanswerable
