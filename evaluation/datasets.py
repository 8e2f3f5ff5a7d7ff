"""Evaluation sets in the `../shared/eval/*` layout: corpus.jsonl, queries.jsonl, qrels.jsonl."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CorpusEntry:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Query:
    id: str
    question: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class Dataset:
    name: str
    corpus: tuple[CorpusEntry, ...]
    queries: tuple[Query, ...]
    qrels: dict[str, frozenset[str]]


class DatasetError(ValueError):
    pass


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        raise DatasetError(f"缺少文件：{path}")
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}:{number} 不是合法的 JSON：{exc}") from exc
    return rows


def load_dataset(directory: Path, *, limit: int | None = None) -> Dataset:
    directory = Path(directory)
    try:
        corpus = tuple(
            CorpusEntry(str(r["id"]), str(r.get("title", "")), str(r["text"]))
            for r in _read_jsonl(directory / "corpus.jsonl")
        )
        queries = [
            Query(str(r["id"]), str(r["question"]), tuple(r.get("answers") or [r.get("answer", "")]))
            for r in _read_jsonl(directory / "queries.jsonl")
        ]
        qrels: dict[str, set[str]] = {}
        for r in _read_jsonl(directory / "qrels.jsonl"):
            if r.get("relevance", 1):
                qrels.setdefault(str(r["query_id"]), set()).add(str(r["doc_id"]))
    except KeyError as exc:
        raise DatasetError(f"数据集字段缺失：{exc}") from exc
    corpus_ids = {entry.id for entry in corpus}
    missing = {doc for docs in qrels.values() for doc in docs} - corpus_ids
    if missing:
        raise DatasetError(f"qrels 引用了语料中不存在的文档：{sorted(missing)[:5]}")
    queries = [q for q in queries if q.id in qrels]
    if limit is not None:
        queries = queries[:limit]
    return Dataset(
        name=directory.name,
        corpus=corpus,
        queries=tuple(queries),
        qrels={qid: frozenset(docs) for qid, docs in qrels.items()},
    )
