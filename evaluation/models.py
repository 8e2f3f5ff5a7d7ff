"""Evaluation sets (questions with what should be found and said) and the runs measured on them.

A case names its gold evidence by document key — a corpus id (the document's external id, as
the shared sets use it), a document title or an original file name — and optionally by chunk
id; the expected answer is a list of phrases, any of which counts. A case with no gold evidence
and no answer is unanswerable: the right outcome is "not in the documents".
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from chat.models import AnswerFeedback
from knowledge.models import KnowledgeBase, KnowledgeBaseVersion


class EvalSet(models.Model):
    # Unique within its knowledge base: each knowledge base's people name their sets without
    # meeting (or learning) the names of sets in knowledge bases they cannot see.
    name = models.CharField(_("名称"), max_length=120)
    description = models.TextField(_("说明"), blank=True)
    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), null=True, blank=True, on_delete=models.SET_NULL,
        related_name="eval_sets",
    )
    is_default = models.BooleanField(
        _("默认评测集"), default=False, help_text=_("发布前的上线检查使用知识库的默认评测集。")
    )
    source = models.CharField(_("来源"), max_length=300, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("创建人"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    created_at = models.DateTimeField(_("创建时间"), auto_now_add=True)
    updated_at = models.DateTimeField(_("更新时间"), auto_now=True)
    # When a case was last added, changed or removed: runs older than this measured another set
    # (the release check reruns them). Re-importing the same file does not move it.
    cases_changed_at = models.DateTimeField(_("问题变更时间"), null=True, blank=True)

    class Meta:
        verbose_name = _("评测集")
        verbose_name_plural = _("评测集")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["knowledge_base"], condition=Q(is_default=True), name="eval_set_one_default_per_kb"
            ),
            models.UniqueConstraint(fields=["knowledge_base", "name"], name="eval_set_unique_name_per_kb"),
        ]

    def __str__(self) -> str:
        return self.name


class EvalCase(models.Model):
    eval_set = models.ForeignKey(EvalSet, verbose_name=_("评测集"), on_delete=models.CASCADE, related_name="cases")
    key = models.CharField(_("编号"), max_length=200)
    ordinal = models.PositiveIntegerField(_("序号"), default=0)
    question = models.TextField(_("问题"))
    expected_documents = models.JSONField(_("期望文档"), default=list, blank=True)
    expected_chunks = models.JSONField(_("期望分块"), default=list, blank=True)
    answers = models.JSONField(_("参考答案"), default=list, blank=True)
    answerable = models.BooleanField(_("可回答"), default=True)
    # How the question is asked (paraphrase, traditional, english, follow_up…): results per kind.
    category = models.CharField(_("类别"), max_length=40, blank=True, default="")
    # Questions asked before it in the same conversation: a follow-up is judged in its context.
    history = models.JSONField(_("前序问题"), default=list, blank=True)
    # The reader's 👎 this case was made from: staff see which feedback is already in the set.
    feedback = models.ForeignKey(
        AnswerFeedback, verbose_name=_("来自回答反馈"), null=True, blank=True, on_delete=models.SET_NULL,
        related_name="eval_cases",
    )

    class Meta:
        verbose_name = _("评测问题")
        verbose_name_plural = _("评测问题")
        ordering = ["eval_set", "ordinal", "id"]
        constraints = [models.UniqueConstraint(fields=["eval_set", "key"], name="eval_case_unique_key")]

    def __str__(self) -> str:
        return f"{self.key}: {self.question[:40]}"


class RunKind(models.TextChoices):
    RETRIEVAL = "retrieval", _("检索")
    ANSWERS = "answers", _("回答")


class RunStatus(models.TextChoices):
    RUNNING = "running", _("运行中")
    SUCCEEDED = "succeeded", _("完成")
    FAILED = "failed", _("失败")


class EvalRun(models.Model):
    eval_set = models.ForeignKey(EvalSet, verbose_name=_("评测集"), on_delete=models.CASCADE, related_name="runs")
    kind = models.CharField(_("类型"), max_length=16, choices=RunKind.choices, default=RunKind.RETRIEVAL)
    label = models.CharField(_("配置"), max_length=120, help_text=_("例如 hybrid(convex)+rerank。"))
    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    version = models.ForeignKey(
        KnowledgeBaseVersion, verbose_name=_("版本"), null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    version_number = models.PositiveIntegerField(_("版本号"), null=True, blank=True)
    status = models.CharField(_("状态"), max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING)
    error = models.TextField(_("错误"), blank=True)
    config = models.JSONField(_("运行参数"), default=dict, blank=True)
    metrics = models.JSONField(_("指标"), default=dict, blank=True)
    latency_ms = models.JSONField(_("延迟 (ms)"), default=dict, blank=True)
    usage = models.JSONField(
        _("模型调用与费用"), default=dict, blank=True, help_text=_("每 1,000 个问题的调用次数、token 数与估算费用。")
    )
    case_count = models.PositiveIntegerField(_("问题数"), default=0)
    provider = models.CharField(_("模型服务"), max_length=40, blank=True)
    embedding_model = models.CharField(_("向量模型"), max_length=120, blank=True)
    git_revision = models.CharField(_("代码版本"), max_length=40, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("运行人"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    started_at = models.DateTimeField(_("开始时间"), auto_now_add=True)
    finished_at = models.DateTimeField(_("结束时间"), null=True, blank=True)

    class Meta:
        verbose_name = _("评测运行")
        verbose_name_plural = _("评测运行")
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["eval_set", "kind", "started_at"], name="eval_run_set_kind_started")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.eval_set} {self.label}"


class EvalCaseResult(models.Model):
    run = models.ForeignKey(EvalRun, verbose_name=_("评测运行"), on_delete=models.CASCADE, related_name="results")
    # A case re-imported away keeps its past results: the question is copied here.
    case = models.ForeignKey(
        EvalCase, verbose_name=_("评测问题"), null=True, blank=True, on_delete=models.SET_NULL, related_name="results"
    )
    case_key = models.CharField(_("编号"), max_length=200)
    question = models.TextField(_("问题"))
    gold = models.JSONField(_("期望"), default=list, blank=True)
    retrieved = models.JSONField(_("检索结果"), default=list, blank=True)
    gold_rank = models.PositiveIntegerField(_("期望文档名次"), null=True, blank=True)
    metrics = models.JSONField(_("指标"), default=dict, blank=True)
    answer = models.TextField(_("回答"), blank=True)
    citations = models.JSONField(_("引用"), default=list, blank=True)
    details = models.JSONField(_("明细"), default=dict, blank=True)
    latency_ms = models.FloatField(_("延迟 (ms)"), default=0.0)

    class Meta:
        verbose_name = _("评测结果")
        verbose_name_plural = _("评测结果")
        ordering = ["run", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "case_key"], name="eval_result_unique_case")]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.case_key}"
