"""How reliably `EvidenceCiter` attaches a sentence to the source it rests on: the table its
`min_support` (chat/rules.toml, `generation.attach_min_support`) is chosen from.

Data: the public CMRC 2018 dev set (`../shared/eval/cmrc2018_dev`). For each question, the
sentence a model would write is the question with its asking word replaced by the answer
("战国史模式主打哪两个模式？" → "战国史模式主打「战史演武」&「争霸演武」两个模式。"), and its sources are the
gold passage and the four other passages that share most of the question's words (what
retrieval would put beside it), in a shuffled order. A sentence from another question, against
the same sources, rests on none of them: attaching a source to it is a false citation.

    python -m benchmarks.citation_attachment [--eval-dir ../shared/eval/cmrc2018_dev]

Prints, per threshold: the share of answer sentences given a source, the share of those given
the gold one (precision), and the share of unrelated sentences given any (false citations).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from benchmarks.common import setup_django

DEFAULT_EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval" / "cmrc2018_dev"
THRESHOLDS = (0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9)
DISTRACTORS = 4
# The asking words a statement replaces with its answer, longest first.
_ASKING = re.compile(
    r"哪一年|哪几个|哪两个|哪三个|哪些|哪个|哪位|哪里|哪儿|哪种|哪家|哪国|什么时候|什么|多少|多久|几个|几年|几次|几|谁|何时|何地|如何|怎样|为何|为什么|哪"
)


def statement(question: str, answer: str) -> str:
    """The sentence a model answering `question` with `answer` would write."""
    body = question.strip().rstrip("？?。 ")
    body = re.sub(r"(是|为)?(吗|呢)$", "", body)
    replaced, count = _ASKING.subn(answer, body, count=1)
    return (replaced if count else f"{body}：{answer}") + "。"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    setup_django()

    from chat.pipeline.citations import EvidenceCiter
    from engines.lexical import content_terms, coverage, normalise

    corpus = {row["id"]: row["text"] for row in map(json.loads, (args.eval_dir / "corpus.jsonl").open())}
    gold = {row["query_id"]: row["doc_id"] for row in map(json.loads, (args.eval_dir / "qrels.jsonl").open())}
    queries = [row for row in map(json.loads, (args.eval_dir / "queries.jsonl").open()) if row["id"] in gold]
    normalised = {pid: normalise(text) for pid, text in corpus.items()}
    rng = random.Random(args.seed)

    cases = []
    for query in queries:
        terms = content_terms(query["question"])
        ranked = sorted((pid for pid in corpus if pid != gold[query["id"]]),
                        key=lambda pid: -coverage(terms, "", normalised_text=normalised[pid]).score)
        passages = [gold[query["id"]], *ranked[:DISTRACTORS]]
        rng.shuffle(passages)
        cases.append((statement(query["question"], query["answer"]), passages, gold[query["id"]]))
    unrelated = [cases[(i + len(cases) // 2) % len(cases)][0] for i in range(len(cases))]

    print(f"{len(cases)} answer sentences, each against its gold passage and {DISTRACTORS} others; "
          f"{len(cases)} unrelated sentences against the same sources")
    print("| min_support | given a source | precision (gold) | unrelated given one |")
    print("|---|---|---|---|")
    for threshold in THRESHOLDS:
        given = right = false = 0
        for (sentence, passages, gold_id), other in zip(cases, unrelated, strict=True):
            sources = {n: corpus[pid] for n, pid in enumerate(passages, start=1)}
            for text, is_answer in ((sentence, True), (other, False)):
                citer = EvidenceCiter(sources, min_support=threshold)
                citer.feed(text)
                citer.flush()
                if not citer.attached:
                    continue
                if is_answer:
                    given += 1
                    right += passages[citer.attached[0] - 1] == gold_id
                else:
                    false += 1
        print(f"| {threshold:.2f} | {given / len(cases):.3f} | {right / max(given, 1):.3f} | "
              f"{false / len(cases):.3f} |")


if __name__ == "__main__":
    main()
