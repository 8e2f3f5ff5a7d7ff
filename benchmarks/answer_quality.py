"""make bench-answers: answer quality of the offline extractive chat model on a QA set.

The dataset (the `../shared/eval/*` layout with reference answers, e.g. cmrc2018_dev) is loaded
as a knowledge base through the same path as `evaluate_retrieval --build`. Each question is
retrieved through the real RetrievalService (hybrid, top-k, Small2Big parent expansion), the
results are written in the request notation (`chat.answering.notation`) and the extractive
answerer (`chat.answering.extractive`) answers each.

Answerable metrics (citation markers stripped, whitespace ignored):
  containment   any reference answer inside the answer text
  first line    any reference answer inside the answer's first line (a table's is its header)
  chars         median / p90 answer length
  refused       share of "根据当前知识库无法确定…" answers
  ceiling       share of prompts whose context holds a reference answer at all

Unanswerable: a second knowledge base is built from the corpus minus the gold passages of N
questions (qrels), and the same questions are asked against it. The model should refuse; the
share of cited answers is reported, split by whether the retrieved context happens to contain a
reference answer anyway (other passages of the same article can).

The same cases also go to a baseline: the extractive answerer at a git revision (`--baseline REF`,
default HEAD; `none` skips it), run in a worktree of its own, or for a revision before the answerer
port `ExtractiveChatModel` of its engines/providers/local.py. Every run shows the delta against
the committed version (18eb48e is the last one with the model that listed up to five sentences in
context order).

`--save-prompts FILE` keeps the retrieved prompts; `--load-prompts FILE` re-scores models on them
in seconds, without Django, Milvus or a knowledge base build.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .common import ROOT, percentile, print_table, setup_django, write_results

INSUFFICIENT = "根据当前知识库无法确定"
SYSTEM_PROMPT = "你是企业知识库助手，只根据资料回答，并在引用处标注来源。"
_MARKER = re.compile(r"\[来源 \d+\]\(citation://\d+\)")
_SOURCE_LINE = re.compile(r"^([ \t]*)\[来源")


@dataclass
class Case:
    query_id: str
    question: str
    answers: list[str]
    prompt: str
    gold_retrieved: bool


# --- prompt -------------------------------------------------------------------------------------


def build_prompt(question: str, results) -> str:
    """The chat pipeline's user message: numbered sources in rank order, then the question."""
    blocks = []
    for number, result in enumerate(results, start=1):
        body = "\n".join(
            _SOURCE_LINE.sub(r"\1［来源", line) for line in result.content.strip().splitlines()
        )
        lines = [f"[来源 {number}] {' '.join(result.document_title.split())}", body]
        for asset in result.assets:
            caption = " ".join(asset.caption.split()).replace("]", "］").replace("[", "［")
            lines.append(f"![{caption}](asset://{asset.id})")
        blocks.append("\n".join(lines))
    return "<knowledge_context>\n" + "\n\n".join(blocks) + "\n</knowledge_context>\n\n问题：" + question


def messages_for(prompt: str):
    from engines.ports import ChatMessage

    return [ChatMessage("system", SYSTEM_PROMPT), ChatMessage("user", prompt)]


# --- metrics ------------------------------------------------------------------------------------


def _squash(text: str) -> str:
    return "".join(text.split())


def strip_markers(answer: str) -> str:
    return _MARKER.sub("", answer)


def contains_any(text: str, answers: list[str]) -> bool:
    squashed = _squash(text)
    return any(_squash(a) and _squash(a) in squashed for a in answers)


def context_of(prompt: str) -> str:
    start, end = prompt.find("<knowledge_context>"), prompt.find("</knowledge_context>")
    return prompt[start:end]


def score_answerable(cases: list[Case], answers: list[str]) -> dict:
    n = len(cases) or 1
    plain = [strip_markers(a).strip() for a in answers]
    lengths = [len(p) for p in plain]
    contained = [contains_any(p, c.answers) for p, c in zip(plain, cases)]
    first_line = [contains_any(p.split("\n", 1)[0], c.answers) for p, c in zip(plain, cases)]
    refused = [a.startswith(INSUFFICIENT) for a in answers]
    ceiling = [contains_any(context_of(c.prompt), c.answers) for c in cases]
    reachable = sum(ceiling) or 1
    return {
        "queries": len(cases),
        "containment": round(sum(contained) / n, 4),
        "first_line": round(sum(first_line) / n, 4),
        "chars_median": percentile(lengths, 50),
        "chars_p90": percentile(lengths, 90),
        "refused": round(sum(refused) / n, 4),
        "ceiling_context_contains_reference": round(sum(ceiling) / n, 4),
        "containment_when_reachable": round(sum(c for c, r in zip(contained, ceiling) if r) / reachable, 4),
        "first_line_when_reachable": round(sum(f for f, r in zip(first_line, ceiling) if r) / reachable, 4),
        "gold_passage_retrieved": round(sum(c.gold_retrieved for c in cases) / n, 4),
    }


def score_unanswerable(cases: list[Case], answers: list[str]) -> dict:
    leaked = [contains_any(context_of(c.prompt), c.answers) for c in cases]
    cited = ["citation://" in a for a in answers]
    refused = [a.startswith(INSUFFICIENT) for a in answers]
    clean = [i for i, leak in enumerate(leaked) if not leak]
    return {
        "queries": len(cases),
        "refused": round(sum(refused) / (len(cases) or 1), 4),
        "cited_answer": round(sum(cited) / (len(cases) or 1), 4),
        "context_holds_reference_anyway": sum(leaked),
        "refused_when_reference_absent": round(sum(refused[i] for i in clean) / (len(clean) or 1), 4),
        "cited_when_reference_absent": round(sum(cited[i] for i in clean) / (len(clean) or 1), 4),
    }


# --- models -------------------------------------------------------------------------------------


class CurrentAnswerer:
    """The working tree's extractive answerer, reading each saved case's notation: with its
    learned scorer (weights.json) or the hand-tuned ranking and gates (the ablation), with or
    without the local e5 embedder's meaning."""

    def __init__(self, *, learned: bool, meaning: bool) -> None:
        self.learned = learned
        self.meaning = meaning

    def answers(self, prompts: list[str]) -> list[str]:
        from chat.answering.extractive import ExtractiveAnswerer
        from chat.answering.notation import parse

        embedder = None
        if self.meaning:
            from engines.providers.e5 import LocalE5Embedder

            embedder = LocalE5Embedder(batch_size=16)
        answerer = ExtractiveAnswerer(meaning=embedder, scorer="default" if self.learned else None)
        return [answerer.answer(parse(prompt)) for prompt in prompts]


class PromptModelBaseline:
    """A revision before the answerer port: `ExtractiveChatModel` of engines/providers/local.py,
    which read the same notation as its prompt."""

    def __init__(self, ref: str) -> None:
        source = _show(ref, "engines/providers/local.py")
        path = Path(tempfile.mkdtemp(prefix="ragsite-baseline-")) / "local_baseline.py"
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("engines.providers._local_baseline", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        self.model = module.ExtractiveChatModel()

    def answers(self, prompts: list[str]) -> list[str]:
        return [self.model.complete(messages_for(prompt)) for prompt in prompts]


class WorktreeBaseline:
    """A revision with the answerer port: its own tree, checked out apart and run in a process of
    its own (its modules share our names)."""

    SCRIPT = (
        "import json, sys\n"
        "from chat.answering.extractive import ExtractiveAnswerer\n"
        "from chat.answering.notation import parse\n"
        "answerer = ExtractiveAnswerer()\n"
        "print(json.dumps([answerer.answer(parse(p)) for p in json.load(sys.stdin)], ensure_ascii=False))\n"
    )

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def answers(self, prompts: list[str]) -> list[str]:
        tree = Path(tempfile.mkdtemp(prefix="ragsite-baseline-")) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), self.ref], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            done = subprocess.run([sys.executable, "-c", self.SCRIPT], cwd=tree, input=json.dumps(prompts),
                                  capture_output=True, text=True, check=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        return json.loads(done.stdout)


def load_baseline(ref: str):
    """The extractive answerer at git revision `ref`, whichever shape it had then."""
    if subprocess.run(["git", "cat-file", "-e", f"{ref}:chat/answering/extractive/composer.py"], cwd=ROOT,
                      capture_output=True).returncode == 0:
        return WorktreeBaseline(ref)
    return PromptModelBaseline(ref)


def _show(ref: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def run_model(model, cases: list[Case]) -> tuple[list[str], float]:
    started = time.perf_counter()
    answers = model.answers([c.prompt for c in cases])
    return answers, (time.perf_counter() - started) * 1000 / (len(cases) or 1)


# --- knowledge bases ----------------------------------------------------------------------------


def build_kb(slug: str, dataset) -> tuple[object, dict]:
    from evaluation.runner import build_knowledge_base
    from knowledge.catalog import services as catalog_services
    from knowledge.models import Visibility

    kb = catalog_services.create_knowledge_base(
        slug=slug, name=f"评测：{dataset.name}", visibility=Visibility.INTERNAL, actor=None
    )
    report = build_knowledge_base(kb=kb, dataset=dataset)
    kb.refresh_from_db()
    if kb.active_version_id is None:
        # Every question would get an empty context and "refuse": that would measure nothing.
        raise SystemExit(f"{slug}: no version was published ({report.failed} documents failed to ingest)")
    if report.failed:
        print(f"warning: {slug}: {report.failed} documents failed to ingest", file=sys.stderr)
    return kb, report.__dict__


def retrieve_cases(kb, dataset, queries, top_k: int) -> list[Case]:
    from knowledge.models import Document
    from retrieval.contracts import RetrievalRequest
    from retrieval.factory import build_retrieval_service

    service = build_retrieval_service(kb)
    external = dict(Document.objects.filter(knowledge_base=kb).values_list("pk", "external_id"))
    cases = []
    for query in queries:
        response = service.retrieve(
            RetrievalRequest(
                kb_id=kb.pk, question=query.question, top_k=top_k, mode="hybrid",
                enable_parent_expansion=True, use_cache=False,
            )
        )
        retrieved = {external.get(r.document_id, "") for r in response.results}
        cases.append(
            Case(query.id, query.question, list(query.answers), build_prompt(query.question, response.results),
                 bool(retrieved & dataset.qrels[query.id]))
        )
    return cases


def pipeline_answers(kb, queries) -> tuple[list[str], dict[str, int], float]:
    """Each question through RAGService: the code behind POST /api/chat, relevance floor,
    routing and context budgets included."""
    from collections import Counter

    from django.contrib.auth.models import User

    from chat.contracts import ChatQuery, Requester
    from chat.pipeline.rag import RAGService

    staff, _ = User.objects.get_or_create(username="bench-answers", defaults={"is_staff": True, "is_superuser": True})
    service = RAGService()
    answers, hit_types = [], Counter()
    started = time.perf_counter()
    for query in queries:
        result = service.answer(
            query=ChatQuery(knowledge_base_id=kb.slug, question=query.question), requester=Requester(staff)
        )
        answers.append(result.answer)
        hit_types[str(result.hit_type)] += 1
    return answers, dict(hit_types), (time.perf_counter() - started) * 1000 / (len(queries) or 1)


def spread(items, count: int):
    """`count` items evenly spread over the list (deterministic, covers every article range)."""
    if count >= len(items):
        return list(items)
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


def collect(args) -> dict:
    from dataclasses import replace

    from evaluation.datasets import load_dataset

    dataset = load_dataset(Path(args.dataset), limit=args.limit)
    kb, build = build_kb("bench-answers", dataset)
    started = time.perf_counter()
    answerable = retrieve_cases(kb, dataset, dataset.queries, args.top_k)
    retrieve_seconds = time.perf_counter() - started
    pipeline = {}
    if args.pipeline:
        pipeline["answerable"] = pipeline_answers(kb, dataset.queries)
    unanswerable: list[Case] = []
    build_unanswerable = None
    if args.unanswerable:
        held_out = spread(list(dataset.queries), args.unanswerable)
        gold = set().union(*(dataset.qrels[q.id] for q in held_out))
        reduced = replace(dataset, corpus=tuple(e for e in dataset.corpus if e.id not in gold))
        kb_reduced, build_unanswerable = build_kb("bench-answers-unanswerable", reduced)
        unanswerable = retrieve_cases(kb_reduced, dataset, held_out, args.top_k)
        if args.pipeline:
            pipeline["unanswerable"] = pipeline_answers(kb_reduced, held_out)
    return {
        "pipeline": pipeline,
        "dataset": dataset.name,
        "corpus": len(dataset.corpus),
        "build": build,
        "build_unanswerable": build_unanswerable,
        "retrieve_seconds": round(retrieve_seconds, 1),
        "answerable": [c.__dict__ for c in answerable],
        "unanswerable": [c.__dict__ for c in unanswerable],
    }


# --- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=str(ROOT.parent / "shared" / "eval" / "cmrc2018_dev"))
    parser.add_argument("--limit", type=int, default=None, help="first N queries")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--unanswerable", type=int, default=100, help="questions asked without their gold passage (0: skip)")
    parser.add_argument("--baseline", default="HEAD", help="git revision whose extractive answerer to compare with, or 'none'")
    parser.add_argument("--meaning", action="store_true",
                        help="give the answerers the local e5 embedder, as the product does (slower)")
    parser.add_argument("--save-prompts", help="write the retrieved prompts to this JSON file")
    parser.add_argument("--load-prompts", help="reuse prompts from --save-prompts (no Django, no KB build)")
    parser.add_argument("--show-failures", type=int, default=0, help="print N answerable cases the new model misses")
    parser.add_argument("--pipeline", action="store_true",
                        help="also answer through RAGService (what POST /api/chat runs: relevance floor, routes, budgets)")
    args = parser.parse_args()
    os.environ["RAG_PROVIDER"] = "local"  # retrieval and the chat model under test are the offline ones

    stop = None
    if args.load_prompts:
        collected = json.loads(Path(args.load_prompts).read_text(encoding="utf-8"))
        if args.meaning:
            stop = setup_django()  # the embedder reads the deployment's settings (its cache)
    else:
        stop = setup_django()
    try:
        if not args.load_prompts:
            collected = collect(args)
            if args.save_prompts:
                Path(args.save_prompts).write_text(json.dumps(collected, ensure_ascii=False), encoding="utf-8")
        answerable = [Case(**c) for c in collected["answerable"]]
        unanswerable = [Case(**c) for c in collected["unanswerable"]]

        models = {"current": CurrentAnswerer(learned=True, meaning=args.meaning),
                  "hand-tuned": CurrentAnswerer(learned=False, meaning=args.meaning)}
        if args.baseline.lower() != "none":
            models[f"baseline@{args.baseline}"] = load_baseline(args.baseline)
        runs = {}
        outputs = {}
        for name, model in models.items():
            answers, ms = run_model(model, answerable)
            refusals, _ = run_model(model, unanswerable)
            outputs[name] = answers
            runs[name] = {
                "answerable": score_answerable(answerable, answers),
                "unanswerable": score_unanswerable(unanswerable, refusals) if unanswerable else None,
                "ms_per_answer": round(ms, 2),
            }

        pipeline = collected.get("pipeline") or {}
        if pipeline.get("answerable"):
            answers, hit_types, ms = pipeline["answerable"]
            run = {"answerable": score_answerable(answerable, answers), "hit_types": hit_types, "ms_per_answer": round(ms, 2)}
            if pipeline.get("unanswerable"):
                refusals, unanswerable_hits, _ = pipeline["unanswerable"]
                run["unanswerable"] = score_unanswerable(unanswerable, refusals)
                run["unanswerable_hit_types"] = unanswerable_hits
            else:
                run["unanswerable"] = None
            runs["pipeline (POST /api/chat)"] = run

        rows = []
        for name, run in runs.items():
            a, u = run["answerable"], run["unanswerable"] or {}
            rows.append([
                name, a["queries"], a["containment"], a["first_line"], a["chars_median"], a["chars_p90"], a["refused"],
                u.get("refused", ""), u.get("cited_when_reference_absent", ""), run["ms_per_answer"],
            ])
        print(f"{collected['dataset']}: {len(answerable)} answerable, {len(unanswerable)} unanswerable, top-{args.top_k} hybrid + parent expansion")
        print(f"context holds a reference: {runs['current']['answerable']['ceiling_context_contains_reference']}, "
              f"gold passage retrieved: {runs['current']['answerable']['gold_passage_retrieved']}\n")
        print_table(["model", "queries", "containment", "first line", "median chars", "p90 chars", "refused",
                     "unans. refused", "unans. cited (ref absent)", "ms/answer"], rows)
        if args.show_failures:
            shown = 0
            for case, answer in zip(answerable, outputs["current"]):
                plain = strip_markers(answer)
                if contains_any(context_of(case.prompt), case.answers) and not contains_any(plain.split("\n", 1)[0], case.answers):
                    print(f"\n--- {case.query_id} {case.question}  ref={case.answers[0]!r}\n{answer}")
                    shown += 1
                    if shown == args.show_failures:
                        break
        payload = {
            "dataset": collected["dataset"], "corpus": collected["corpus"], "top_k": args.top_k,
            "build": collected["build"], "build_unanswerable": collected["build_unanswerable"],
            "retrieve_seconds": collected["retrieve_seconds"], "runs": runs,
        }
        path = write_results("answer_quality", payload)
        print(f"\nwrote {path}")
    finally:
        if stop is not None:
            stop()


if __name__ == "__main__":
    main()
