"""What the codes of a retrieval trace mean, in words staff read (the codes stay in the JSON)."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

STAGES = {
    "facts": gettext_lazy("就绪文档"),
    "cache_lookup": gettext_lazy("缓存查找"),
    "rewrite": gettext_lazy("查询改写"),
    "recall": gettext_lazy("召回（各通道并行）"),
    "fusion": gettext_lazy("融合"),
    "rerank": gettext_lazy("重排"),
    "parent_expansion": gettext_lazy("上下文扩展"),
    "assets": gettext_lazy("图片"),
}
CHANNELS = {"dense": gettext_lazy("向量通道"), "sparse": gettext_lazy("关键词通道")}
VARIANTS = {"original": gettext_lazy("原问题"), "rewrite": gettext_lazy("改写"), "hyde": gettext_lazy("假设答案")}
NOTES = {
    "rerank_unavailable": gettext_lazy("本地模型没有能提升效果的重排模型，未重排"),
    "hyde_unavailable": gettext_lazy("当前模型不能生成假设答案，未使用 HyDE"),
    "dynamic_top_k_needs_rerank": gettext_lazy("动态 top-k 需要重排分数，未启用"),
}


COUNTS = {"fused": gettext_lazy("融合后"), "reranked": gettext_lazy("已重排")}


def count_label(name: str) -> str:
    return str(COUNTS[name]) if name in COUNTS else channel_label(name)


def stage_label(stage: str) -> str:
    if stage.startswith("channel:"):
        return channel_label(stage.removeprefix("channel:"))
    return str(STAGES.get(stage, stage))


def channel_label(name: str) -> str:
    """"dense:original" → "向量通道（原问题）"; unknown parts stay as they are."""
    kind, _sep, variant = name.partition(":")
    label = str(CHANNELS.get(kind, kind))
    return f"{label}（{VARIANTS.get(variant, variant)}）" if variant else label


def note_label(note: str) -> str:
    if note.startswith("dynamic_top_k:"):
        return _("动态 top-k 保留 %(n)s 条") % {"n": note.partition(":")[2]}
    return str(NOTES.get(note, note))
