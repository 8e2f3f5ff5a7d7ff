"""make bench-federation: one question over 30 knowledge bases against the same question over one.

The CMRC 2018 dev passages (`../shared/eval/cmrc2018_dev_chunks`, 2,808 passages of 848
articles) are split by article over `--kbs` published knowledge bases, and also loaded whole into
one more ("all"), each passage one chunk, embedded with the deployment's default embedder unless
`--embedding-model` says otherwise. Then, for the same CMRC questions, cache off:

- retrieval: RetrievalService over one of the small bases (`one`), over `all`, over the 30 as one
  scope (`RetrievalRequest.also_kb_ids`, what a chat question over them runs), and the naive
  alternative of one search per base merged afterwards (`per_kb_loop`);
- hit@5 of the passage that answers each question, for `all` and the 30 (one fused list should
  find what one big base finds), and for `one` over its own questions;
- whole chat turns (`RAGService.answer`, the offline provider) over `one` and over the 30.

Latencies are p50 / p95 in ms, and ratios against `one` measured in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections import defaultdict
from pathlib import Path

from .common import ROOT, percentile, print_table, setup_django, write_results

DATASET = ROOT.parent / "shared" / "eval" / "cmrc2018_dev_chunks"


def _load(dataset: Path):
    corpus = [json.loads(line) for line in (dataset / "corpus.jsonl").open(encoding="utf-8")]
    queries = {q["id"]: q for q in map(json.loads, (dataset / "queries.jsonl").open(encoding="utf-8"))}
    qrels = {r["query_id"]: r["doc_id"] for r in map(json.loads, (dataset / "qrels.jsonl").open(encoding="utf-8"))}
    return corpus, queries, qrels


def _publish(slug: str, passages: list[dict], *, embedding_model: str | None):
    """A public knowledge base whose active version holds `passages`, one document per
    article and one chunk per passage; returns (kb, {chunk id: passage id})."""
    from engines.ports import ChunkRecord
    from engines.providers import get_embedder
    from knowledge.catalog import readiness
    from knowledge.catalog import services as catalog_services
    from knowledge.models import Chunk, Document, DocumentStatus, Visibility
    from knowledge.vectors import store_for

    kb = catalog_services.create_knowledge_base(slug=slug, name=f"CMRC {slug}", actor=None, visibility=Visibility.PUBLIC,
                                        embedding_model=embedding_model)
    draft = catalog_services.create_draft_version(kb=kb, actor=None)
    articles: dict[str, list[dict]] = defaultdict(list)
    for passage in passages:
        articles[passage["id"].split("#")[0]].append(passage)
    documents = Document.objects.bulk_create(
        Document(knowledge_base=kb, title=items[0]["title"], file=f"bench/{slug}/{name}", original_name=f"{name}.txt",
                 file_type="txt", mime_type="text/plain", sha256=hashlib.sha256(f"{slug}/{name}".encode()).hexdigest(), size=1,
                 status=DocumentStatus.READY)
        for name, items in articles.items()
    )
    draft.documents.set(documents)
    rows, passage_ids = [], []
    for document, items in zip(documents, articles.values()):
        for ordinal, passage in enumerate(items):
            rows.append(Chunk(document=document, knowledge_base=kb, ordinal=ordinal, parent_id=passage["id"],
                              heading_path=[passage["title"]], content=passage["text"],
                              token_count=len(passage["text"])))
            passage_ids.append(passage["id"])
    chunks = Chunk.objects.bulk_create(rows, batch_size=1000)
    embedder = get_embedder(kb.embedding_model, kb.embedding_dimension)
    texts = [c.content for c in chunks]
    vectors = []
    for start in range(0, len(texts), 64):
        vectors.extend(embedder.embed_documents(texts[start:start + 64]))
    store_for(kb).upsert_chunks([
        ChunkRecord(chunk_id=c.pk, kb_id=kb.pk, document_id=c.document_id, content=c.content,
                    content_type="text", vector=list(v))
        for c, v in zip(chunks, vectors)
    ])
    readiness.mark_version_ready(version=draft)
    catalog_services.activate_version(version=draft, actor=None, reason="benchmark")
    kb.refresh_from_db()
    return kb, {c.pk: pid for c, pid in zip(chunks, passage_ids)}


def _timed(fn, items) -> tuple[list[float], list]:
    timings, outputs = [], []
    for item in items:
        started = time.perf_counter()
        outputs.append(fn(item))
        timings.append((time.perf_counter() - started) * 1000)
    return timings, outputs


def _stats(timings: list[float], baseline: float | None) -> dict:
    p50 = percentile(timings, 50)
    return {"p50": p50, "p95": percentile(timings, 95), "ratio_p50_vs_one": round(p50 / baseline, 2) if baseline else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kbs", type=int, default=30)
    parser.add_argument("--queries", type=int, default=200, help="CMRC questions timed per configuration")
    parser.add_argument("--turns", type=int, default=60, help="chat turns timed per configuration")
    parser.add_argument("--mode", default="hybrid")
    parser.add_argument("--embedding-model", default=None, help="default: the deployment's (RAG_EMBEDDING_MODEL)")
    parser.add_argument("--dataset", type=Path, default=DATASET)
    args = parser.parse_args()
    stop = setup_django()
    try:
        from django.contrib.auth.models import AnonymousUser

        from chat.contracts import ChatQuery, Requester
        from chat.pipeline.rag import RAGService
        from retrieval.contracts import RetrievalRequest
        from retrieval.factory import build_retrieval_service, build_scope_retrieval

        corpus, queries, qrels = _load(args.dataset)
        articles = sorted({p["id"].split("#")[0] for p in corpus})
        shard_of = {article: i % args.kbs for i, article in enumerate(articles)}
        started = time.perf_counter()
        shards, passage_of = [], {}
        for i in range(args.kbs):
            kb, chunks = _publish(f"cmrc-{i:02d}", [p for p in corpus if shard_of[p["id"].split("#")[0]] == i],
                                  embedding_model=args.embedding_model)
            shards.append(kb)
            passage_of.update(chunks)
        everything, chunks = _publish("cmrc-all", corpus, embedding_model=args.embedding_model)
        passage_of.update(chunks)
        build_seconds = round(time.perf_counter() - started, 1)

        one = shards[0]
        asked = [qid for qid in queries if qid in qrels][: args.queries]
        own = [qid for qid in queries if qid in qrels and shard_of[qrels[qid].split("#")[0]] == 0]

        def request(kb, qid, also=()):
            return RetrievalRequest(kb_id=kb.pk, question=queries[qid]["question"], top_k=5, mode=args.mode,
                                    use_cache=False, also_kb_ids=tuple(k.pk for k in also))

        single = build_retrieval_service(one)
        whole = build_retrieval_service(everything)
        scoped = build_scope_retrieval(shards)
        per_kb = [build_retrieval_service(kb) for kb in shards]

        def loop(qid):
            results = [r for kb, service in zip(shards, per_kb) for r in service.retrieve(request(kb, qid)).results]
            return sorted(results, key=lambda r: (-r.relevance, -r.score))[:5]

        configurations = {
            "one": lambda qid: single.retrieve(request(one, qid)).results,
            "all": lambda qid: whole.retrieve(request(everything, qid)).results,
            f"{args.kbs}_kbs": lambda qid: scoped.retrieve(request(one, qid, also=shards[1:])).results,
            "per_kb_loop": loop,
        }
        for fn in configurations.values():  # warm-up: models, collections, connections
            fn(asked[0])
        retrieval, hits = {}, {}
        baseline = None
        for name, fn in configurations.items():
            timings, outputs = _timed(fn, asked)
            retrieval[name] = _stats(timings, baseline)
            baseline = baseline or retrieval[name]["p50"]
            if name != "one":
                found = [qrels[q] in {passage_of[r.chunk_id] for r in out} for q, out in zip(asked, outputs)]
                hits[name] = round(sum(found) / len(found), 4)
        _timings, own_outputs = _timed(configurations["one"], own)
        hits["one_own_questions"] = round(
            sum(qrels[q] in {passage_of[r.chunk_id] for r in out} for q, out in zip(own, own_outputs)) / max(len(own), 1), 4
        )

        service = RAGService()
        requester = Requester(user=AnonymousUser(), session_key="bench-federation")
        turns_of = asked[: args.turns]

        def turn(also):
            return lambda qid: service.answer(
                query=ChatQuery(knowledge_base_id=one.slug, question=queries[qid]["question"],
                                also_knowledge_base_ids=tuple(kb.slug for kb in also)),
                requester=requester,
            )

        turn(shards[1:])(turns_of[0])
        turns = {}
        one_turn, _ = _timed(turn(()), turns_of)
        turns["one"] = _stats(one_turn, None)
        many_turn, _ = _timed(turn(shards[1:]), turns_of)
        turns[f"{args.kbs}_kbs"] = _stats(many_turn, turns["one"]["p50"])

        print_table(
            ["retrieval", "p50 ms", "p95 ms", "p50 / one", "hit@5"],
            [[name, s["p50"], s["p95"], s["ratio_p50_vs_one"] or 1.0, hits.get(name, hits["one_own_questions"])]
             for name, s in retrieval.items()],
        )
        print()
        print_table(["chat turn", "p50 ms", "p95 ms", "p50 / one"],
                    [[name, s["p50"], s["p95"], s["ratio_p50_vs_one"] or 1.0] for name, s in turns.items()])
        path = write_results("federation", {
            "knowledge_bases": args.kbs, "passages": len(corpus), "chunks_per_small_kb": len(
                [p for p in corpus if shard_of[p["id"].split("#")[0]] == 0]),
            "embedding_model": one.embedding_model, "mode": args.mode, "queries": len(asked), "turns": len(turns_of),
            "build_seconds": build_seconds, "retrieval_ms": retrieval, "hit_at_5": hits, "chat_turn_ms": turns,
        })
        print(f"\nwrote {path}")
    finally:
        stop()


if __name__ == "__main__":
    main()
