"""Reading evaluation cases from files: the shared layout and a knowledge-base-native table.

Shared layout (`../shared/eval/*`): a folder with queries.jsonl {id, question, answers?} and
qrels.jsonl {query_id, doc_id}; the gold documents are corpus ids (the documents' external ids).

Native (JSONL, CSV or XLSX, one case per row): `question` (问题) and any of `id` (编号),
`expected_documents` (期望文档: titles, file names or external ids), `expected_chunks`
(期望分块: chunk ids), `answers` (参考答案: phrases, any of which counts) and `answerable`
(可回答). Several values in one cell are separated by `|`, `；` or new lines. A row with no
expected evidence and no answer is unanswerable unless `answerable` says otherwise.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.utils.translation import gettext as _

from knowledge.intake import IntakeLimits, check_file, read_first_sheet
from ragsite.errors import ValidationFailed

MAX_CASES = 20_000
HEADERS = {
    "id": "id", "编号": "id", "key": "id",
    "question": "question", "问题": "question",
    "expected_documents": "expected_documents", "期望文档": "expected_documents", "documents": "expected_documents",
    "expected_chunks": "expected_chunks", "期望分块": "expected_chunks", "chunks": "expected_chunks",
    "answers": "answers", "参考答案": "answers", "answer": "answers", "答案": "answers",
    "answerable": "answerable", "可回答": "answerable",
    "category": "category", "类别": "category",
    "history": "history", "前序问题": "history",
}
_SEPARATORS = re.compile(r"[|｜；;\n]")
_TRUE = {"1", "true", "yes", "y", "是", "可", "可回答"}
_FALSE = {"0", "false", "no", "n", "否", "不可", "不可回答"}


@dataclass(frozen=True)
class CaseDraft:
    key: str
    question: str
    expected_documents: tuple[str, ...]
    expected_chunks: tuple[int, ...]
    answers: tuple[str, ...]
    answerable: bool
    category: str = ""
    history: tuple[str, ...] = ()  # questions asked before it in the same conversation


def read_shared_dataset(directory: Path) -> list[CaseDraft]:
    directory = Path(directory)
    return read_shared_files(
        queries=_jsonl(directory / "queries.jsonl"), qrels=_jsonl(directory / "qrels.jsonl"),
        queries_name=str(directory / "queries.jsonl"), qrels_name=str(directory / "qrels.jsonl"), source=str(directory),
    )


def read_shared_uploads(*, queries: bytes, qrels: bytes) -> list[CaseDraft]:
    """The shared layout as two uploaded files (the admin cannot take a folder)."""
    for name, data in (("queries.jsonl", queries), ("qrels.jsonl", qrels)):
        check_file(name=name, data=data, limits=IntakeLimits.for_imports())
    return read_shared_files(
        queries=list(_jsonl_lines("queries.jsonl", _text("queries.jsonl", queries))),
        qrels=list(_jsonl_lines("qrels.jsonl", _text("qrels.jsonl", qrels))),
        queries_name="queries.jsonl", qrels_name="qrels.jsonl", source="queries.jsonl",
    )


def read_shared_files(*, queries, qrels, queries_name: str, qrels_name: str, source: str) -> list[CaseDraft]:
    gold: dict[str, list[str]] = {}
    for number, row in qrels:
        if "query_id" not in row or "doc_id" not in row:
            raise _invalid(qrels_name, number, _("每行需要 query_id 和 doc_id。"))
        if row.get("relevance", 1):
            gold.setdefault(str(row["query_id"]), []).append(str(row["doc_id"]))
    cases = []
    for number, row in queries:
        if "id" not in row or not str(row.get("question", "")).strip():
            raise _invalid(queries_name, number, _("每行需要 id 和 question。"))
        answers = row.get("answers") or ([row["answer"]] if row.get("answer") else [])
        documents = tuple(dict.fromkeys(gold.get(str(row["id"]), [])))
        cases.append(CaseDraft(
            key=str(row["id"]), question=str(row["question"]).strip(), expected_documents=documents,
            expected_chunks=(), answers=tuple(str(a) for a in answers if str(a).strip()),
            answerable=bool(documents or answers),
        ))
    return _checked(cases, source)


def read_native_file(name: str, data: bytes) -> list[CaseDraft]:
    """Cases from an uploaded or local file, chosen by its extension."""
    check_file(name=name, data=data, limits=IntakeLimits.for_imports())
    suffix = Path(name).suffix.lower()
    if suffix == ".jsonl":
        rows = list(_jsonl_lines(name, _text(name, data)))
    elif suffix == ".csv":
        reader = csv.DictReader(io.StringIO(_text(name, data)))
        try:
            rows = list(enumerate(reader, start=2))
        except csv.Error as exc:  # a field over the csv module's limit, a stray quote at the end
            raise ValidationFailed(_("%(name)s 不是可读取的 CSV 文件：%(error)s") % {"name": name, "error": exc},
                                   code="invalid_eval_file") from exc
    elif suffix == ".xlsx":
        rows = _xlsx_rows(name, data)
    else:
        raise ValidationFailed(
            _("不支持的评测文件类型 %(suffix)s：请使用 JSONL、CSV 或 XLSX。") % {"suffix": suffix or name},
            code="unsupported_eval_file",
        )
    return _checked([_native_case(name, number, row, index) for index, (number, row) in enumerate(rows)], name)


def _native_case(name: str, number: int, raw: dict, index: int) -> CaseDraft:
    row = {HEADERS[str(k).strip().lower()]: v for k, v in raw.items() if k and str(k).strip().lower() in HEADERS}
    question = str(row.get("question") or "").strip()
    if not question:
        raise _invalid(name, number, _("缺少问题（question / 问题）。"))
    documents = _values(row.get("expected_documents"))
    try:
        chunks = tuple(int(value) for value in _values(row.get("expected_chunks")))
    except ValueError:
        raise _invalid(name, number, _("期望分块必须是分块 ID（整数）。")) from None
    answers = _values(row.get("answers"))
    answerable = bool(documents or chunks or answers)
    flag = row.get("answerable")
    if flag not in (None, ""):
        text = str(flag).strip().lower()
        if text not in _TRUE | _FALSE:
            raise _invalid(name, number, _("可回答一栏只能填 是/否 或 true/false。"))
        answerable = text in _TRUE
    key = str(row.get("id") or "").strip() or f"{index + 1}"
    return CaseDraft(key=key[:200], question=question, expected_documents=documents, expected_chunks=chunks,
                     answers=answers, answerable=answerable, category=str(row.get("category") or "").strip()[:40],
                     history=_values(row.get("history")))


def _values(cell) -> tuple:
    if cell is None:
        return ()
    if isinstance(cell, list):
        items = cell
    elif isinstance(cell, (int, float)) and not isinstance(cell, bool):
        items = [str(int(cell)) if float(cell).is_integer() else str(cell)]
    else:
        items = _SEPARATORS.split(str(cell))
    return tuple(dict.fromkeys(str(item).strip() for item in items if str(item).strip()))


def _xlsx_rows(name: str, data: bytes) -> list[tuple[int, dict]]:
    rows = read_first_sheet(data, name=name, max_rows=MAX_CASES + 2, code="invalid_eval_file")
    header = [str(h).strip() if h is not None else "" for h in (rows[0] if rows else ())]
    found = []
    for number, values in enumerate(rows[1:], start=2):
        if all(v is None or str(v).strip() == "" for v in values):
            continue
        found.append((number, dict(zip(header, values))))
    return found


def _text(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationFailed(_("%(name)s 须为 UTF-8 编码。") % {"name": name}, code="invalid_eval_file") from exc


def _jsonl(path: Path) -> list[tuple[int, dict]]:
    if not path.exists():
        raise ValidationFailed(_("缺少文件：%(path)s") % {"path": path}, code="invalid_eval_file")
    return list(_jsonl_lines(str(path), path.read_text(encoding="utf-8-sig")))


def _jsonl_lines(name: str, text: str) -> Iterable[tuple[int, dict]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _invalid(name, number, _("不是合法的 JSON：%(error)s") % {"error": exc}) from exc
        if not isinstance(row, dict):
            raise _invalid(name, number, _("每行必须是一个 JSON 对象。"))
        yield number, row


def _checked(cases: list[CaseDraft], source: str) -> list[CaseDraft]:
    if not cases:
        raise ValidationFailed(_("%(source)s 中没有评测问题。") % {"source": source}, code="empty_eval_set")
    if len(cases) > MAX_CASES:
        raise ValidationFailed(_("一个评测集最多 %(n)d 个问题。") % {"n": MAX_CASES}, code="eval_set_too_large")
    seen: set[str] = set()
    for case in cases:
        if case.key in seen:
            raise ValidationFailed(_("%(source)s 中编号 %(key)s 重复。") % {"source": source, "key": case.key},
                                   code="duplicate_eval_case")
        seen.add(case.key)
    return cases


def _invalid(source, number: int, message: str) -> ValidationFailed:
    return ValidationFailed(
        _("%(source)s 第 %(n)d 行：%(message)s") % {"source": source, "n": number, "message": message},
        code="invalid_eval_file",
    )
