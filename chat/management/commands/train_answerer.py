"""manage.py train_answerer: fit the extractive answerer's scorer and write its weights.

    manage.py train_answerer --data cmrc2018/squad-style-data/cmrc2018_trial.json \
        --data cmrc2018/squad-style-data/cmrc2018_dev.json

The data is CMRC 2018 (github.com/ymcui/cmrc2018, CC BY-SA 4.0) in its SQuAD-style layout; it is
read from where it lies and never copied into the project. Paragraphs the evaluation set's
questions come from (`--held-out`, the qrels of ../shared/eval/cmrc2018_dev by default) are left
out. The run is reproducible: the same seed and data (their digests are printed and stored)
give the same weights.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from chat.answering.extractive import training
from chat.answering.extractive.composer import ExtractiveAnswerer
from chat.answering.extractive.scorer import WEIGHTS_PATH
from chat.answering.factory import default_meaning


class Command(BaseCommand):
    help = "用公开中文阅读理解数据训练离线回答器的打分模型，并写出权重。"

    def add_arguments(self, parser):
        parser.add_argument("--data", action="append", required=True, help="SQuAD-style JSON file (repeatable)")
        parser.add_argument("--held-out", default=str(Path(settings.BASE_DIR).parent / "shared" / "eval"
                                                      / "cmrc2018_dev" / "qrels.jsonl"),
                            help="qrels.jsonl whose paragraphs are never trained on")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--wrong-cost", type=float, default=2.0,
                            help="how many right answers one wrong answer costs when the threshold is chosen")
        parser.add_argument("--no-meaning", action="store_true", help="train without the embedder's similarity")
        parser.add_argument("--out", default=str(WEIGHTS_PATH))

    def handle(self, *args, **options):
        paths = [Path(p) for p in options["data"]]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise CommandError(f"no such file: {', '.join(missing)}")
        held_out = training.held_out_paragraphs(Path(options["held_out"]))
        paragraphs = [p for path in paths for p in training.read_squad(path) if p.id not in held_out]
        digests = {path.name: training.digest(path) for path in paths}
        self.stdout.write(f"data: {json.dumps(digests)}; {len(held_out)} held-out paragraphs left out; "
                          f"{len(paragraphs)} paragraphs, {sum(len(p.questions) for p in paragraphs)} questions")
        meaning = None if options["no_meaning"] else default_meaning()
        self.stdout.write(f"meaning: {meaning.model if meaning is not None else 'none'}")
        # Candidates as the product finds them, ranked by hand (the scorer is what is trained).
        answerer = ExtractiveAnswerer(meaning=meaning, scorer=None)

        def progress(done: int, total: int) -> None:
            if done % 250 == 0 or done == total:
                self.stdout.write(f"  {done}/{total} questions")

        scorer, metrics = training.train(paragraphs, answerer, seed=options["seed"], wrong_cost=options["wrong_cost"],
                                         digests=digests, progress=progress)
        validation = metrics["validation"]
        self.stdout.write(f"training: {json.dumps(metrics['training'])}")
        self.stdout.write(f"validation: {validation['questions']} questions; first unit right: learned "
                          f"{validation['first_unit_right_learned']}, hand-tuned {validation['first_unit_right_hand_tuned']}")
        for name in ("answers_hand_tuned", "answers_learned"):
            self.stdout.write(f"{name}: {json.dumps(validation[name])}")
        self.stdout.write("threshold  right  wrong  unanswerable answered  precision")
        for row in validation["reliability"][::3]:
            self.stdout.write(f"  {row['threshold']:.3f}   {row['right']:5d}  {row['wrong']:5d}  "
                              f"{row['unanswerable_answered']:5d}                  {row['precision']:.3f}")
        self.stdout.write(f"threshold chosen: {metrics['threshold']} (a wrong answer costs {metrics['wrong_cost']} right ones)")
        for name, weight in zip(scorer.features, scorer.coef.tolist(), strict=True):
            self.stdout.write(f"  {name:16s} {weight:+.3f}")
        Path(options["out"]).write_text(json.dumps(scorer.as_dict(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        self.stdout.write(self.style.SUCCESS(f"wrote {options['out']} ({scorer.version})"))
