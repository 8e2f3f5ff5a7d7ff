"""manage.py calibrate_confidence REPORT.json [REPORT.json …] [--target 0.95] [--margin 0.015]

Fits the confidence of document answers on `evaluate_answers --output` reports (every set you can
measure: the demo set, CMRC, your own), prints the held-out quality (AUC, reliability per set at
each cut-off) and the `[confidence]` table to put in the rules file."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chat.pipeline.confidence import AnswerFeatures

from ...calibration import auc, cross_validated, fit, lowest_reliable_threshold, reliability, samples_from_cases


class Command(BaseCommand):
    help = "按评测结果拟合文档回答的置信度：输出交叉验证的可靠性表和规则文件的 [confidence] 配置。"

    def add_arguments(self, parser):
        parser.add_argument("reports", nargs="+", help="evaluate_answers --output files")
        parser.add_argument("--target", type=float, default=0.95, help="share right required of high answers")
        parser.add_argument("--margin", type=float, default=0.015,
                            help="added to the target when choosing the cut-off, for sets not measured")
        parser.add_argument("--l2", type=float, default=1.0, help="regularisation strength")

    def handle(self, *args, **options):
        samples = []
        for name in options["reports"]:
            path = Path(name)
            try:
                report = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                raise CommandError(f"无法读取评测报告 {name}：{error}") from error
            if "cases" not in report:
                raise CommandError(f"{name} 没有逐题结果（请用新版 evaluate_answers --output 重新生成）。")
            samples += samples_from_cases(report["cases"], source=path.stem)
        if len({s.right for s in samples}) < 2:
            raise CommandError("需要既有答对也有答错的文档回答才能拟合。")
        held_out = cross_validated(samples, l2=options["l2"])
        labels = [s.right for s in samples]
        self.stdout.write(f"{len(samples)} document answers, {sum(labels) / len(labels):.1%} right, "
                          f"held-out AUC {auc(held_out, labels):.3f}")
        sources = sorted({s.source for s in samples})
        self.stdout.write("  cut-off " + "".join(f" {source[:18]:>24}" for source in sources))
        for threshold in (0.5, 0.6, 0.7, 0.8, 0.85, 0.88, 0.9, 0.92, 0.94, 0.96):
            table = reliability(held_out, samples, threshold)
            cells = "".join(f" {table[s][0]:>8} answers {table[s][1]:>6.1%}" for s in sources)
            self.stdout.write(f"  ≥ {threshold:<5}{cells}")
        target = options["target"] + options["margin"]
        high = lowest_reliable_threshold(held_out, samples, target=target)
        if high is None:
            raise CommandError(f"没有一个阈值能让每个评测集的“高”答对率达到 {target:.1%}。")
        model = fit(samples, l2=options["l2"])
        self.stdout.write("")
        self.stdout.write("[confidence]")
        self.stdout.write(f"bias = {model.bias:.3f}")
        self.stdout.write(f"high = {high:.2f}  # held-out: every set ≥ {target:.1%} right at or above it")
        self.stdout.write("medium = 0.5  # a calibrated probability: below it, more wrong than right")
        self.stdout.write("")
        self.stdout.write("[confidence.weights]")
        for name, weight in zip(AnswerFeatures.NAMES, model.weights, strict=True):
            self.stdout.write(f"{name} = {weight:.3f}")
