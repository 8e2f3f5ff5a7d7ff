"""The evaluation metrics in words: what staff read on run pages and in a draft's release check
(the codes, "recall@5", stay what reports and the command line use)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy

# What each metric measures, by its name before "@k": (name in words, what it means).
METRICS = {
    "recall": (gettext_lazy("召回率"), gettext_lazy("期望文档出现在前 k 个结果中的比例")),
    "hit": (gettext_lazy("命中率"), gettext_lazy("前 k 个结果中至少有一个期望文档的问题比例")),
    "mrr": (gettext_lazy("平均倒数排名"), gettext_lazy("第一个期望文档名次的倒数的平均值，越接近 1 越靠前")),
    "ndcg": (gettext_lazy("排序质量"), gettext_lazy("按名次加权的综合得分，越接近 1 越好")),
    "answerable": (gettext_lazy("可回答问题数"), gettext_lazy("文档中有答案的问题")),
    "unanswerable": (gettext_lazy("不可回答问题数"), gettext_lazy("文档中没有答案的问题")),
    "containment": (gettext_lazy("答对率"), gettext_lazy("回答包含参考答案要点的可回答问题比例")),
    "first_line": (gettext_lazy("首句答对率"), gettext_lazy("回答第一句就包含参考答案要点的比例")),
    "median_chars": (gettext_lazy("回答长度中位数"), gettext_lazy("回答的字数（不含引用标记）")),
    "citation_validity": (gettext_lazy("引用有效率"), gettext_lazy("所引用的来源中确实含有参考答案要点的比例")),
    "answerable_declined": (gettext_lazy("误拒答率"), gettext_lazy("文档中有答案却回答“找不到”的比例，越低越好")),
    "insufficient_context_rate": (gettext_lazy("正确拒答率"), gettext_lazy("文档中没有答案时回答“找不到”的比例")),
}


def metric_name(name: str) -> str:
    """"recall@5" → "召回率@5"; a metric without words keeps its name."""
    prefix, at, k = name.partition("@")
    known = METRICS.get(prefix)
    return f"{known[0]}{at}{k}" if known else name


def metric_meaning(name: str) -> str:
    known = METRICS.get(name.partition("@")[0])
    return str(known[1]) if known else ""
