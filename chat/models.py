"""Conversations, messages, the evidence of each answer, and a trace of every question.

- A finished assistant message and its `ChatEvidence` are written in one transaction: an answer
  is never stored without the citations it was shown with, and evidence never points at text
  that was not delivered (failed and cancelled turns keep no evidence).
- `QueryTrace` is written for every question that reached a knowledge base, whatever the route
  or outcome, so staff can review direct, FAQ, insufficient and failed ones alike.
Only `chat.services` writes these tables.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from chat.contracts import Route
from knowledge.models import KnowledgeBase


class Conversation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), on_delete=models.CASCADE, related_name="conversations"
    )
    # Owner: a signed-in user, or for anonymous readers of a public knowledge base the session.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("用户"), null=True, blank=True,
        on_delete=models.CASCADE, related_name="conversations",
    )
    session_key = models.CharField(_("会话密钥"), max_length=64, blank=True, db_index=True)
    # The chat id an AI SDK client (useChat) keeps across turns, so history works unchanged.
    client_id = models.CharField(_("客户端会话 ID"), max_length=100, blank=True)
    title = models.CharField(_("标题"), max_length=200)
    created_at = models.DateTimeField(_("创建时间"), auto_now_add=True)
    updated_at = models.DateTimeField(_("最近活动"), auto_now=True, db_index=True)

    class Meta:
        verbose_name = _("会话")
        verbose_name_plural = _("会话")
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "client_id"], condition=~Q(client_id="") & Q(user__isnull=False),
                name="conversation_unique_client_id_per_user",
            ),
            models.UniqueConstraint(
                fields=["session_key", "client_id"],
                condition=~Q(client_id="") & Q(user__isnull=True) & ~Q(session_key=""),
                name="conversation_unique_client_id_per_session",
            ),
        ]

    def __str__(self) -> str:
        return self.title


class MessageRole(models.TextChoices):
    USER = "user", _("用户")
    ASSISTANT = "assistant", _("助手")


class MessageStatus(models.TextChoices):
    COMPLETE = "complete", _("完成")
    ERROR = "error", _("出错")
    CANCELLED = "cancelled", _("已取消")


class Message(models.Model):
    conversation = models.ForeignKey(
        Conversation, verbose_name=_("会话"), on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(_("角色"), max_length=16, choices=MessageRole.choices)
    content = models.TextField(_("内容"), blank=True)
    status = models.CharField(
        _("状态"), max_length=16, choices=MessageStatus.choices, default=MessageStatus.COMPLETE
    )
    error_code = models.CharField(_("错误码"), max_length=64, blank=True)
    trace_id = models.UUIDField(_("追踪 ID"), null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(_("时间"), auto_now_add=True)

    class Meta:
        verbose_name = _("消息")
        verbose_name_plural = _("消息")
        ordering = ["conversation", "created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(role__in=[r.value for r in MessageRole]), name="message_role_valid"
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in MessageStatus]), name="message_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_role_display()}：{self.content[:40]}"


class ChatEvidence(models.Model):
    """What a finished answer was built from and shown with, frozen at answer time.

    A reload shows these citations, not a new retrieval: the index may have changed since.
    """

    message = models.OneToOneField(
        Message, verbose_name=_("消息"), on_delete=models.CASCADE, related_name="evidence"
    )
    route = models.CharField(_("路由"), max_length=32)
    hit_type = models.CharField(_("命中类型"), max_length=32)
    intent = models.JSONField(_("意图"), default=dict)
    rewritten_query = models.TextField(_("检索问题"), blank=True)
    citations = models.JSONField(_("引用"), default=list)
    retrieval_results = models.JSONField(_("检索结果"), default=list)
    retrieval_trace = models.JSONField(_("检索追踪"), default=dict)
    answer_confidence = models.JSONField(_("答案置信度"), default=dict)
    created_at = models.DateTimeField(_("时间"), auto_now_add=True)

    class Meta:
        verbose_name = _("回答证据")
        verbose_name_plural = _("回答证据")

    def __str__(self) -> str:
        return gettext("消息 %(id)s 的依据") % {"id": self.message_id}


class TraceStatus(models.TextChoices):
    COMPLETED = "completed", _("完成")
    FAILED = "failed", _("失败")
    CANCELLED = "cancelled", _("已取消")


class QueryTrace(models.Model):
    trace_id = models.UUIDField(_("追踪 ID"), unique=True)
    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), on_delete=models.CASCADE, related_name="query_traces"
    )
    kb_version = models.PositiveIntegerField(_("知识库版本"), null=True, blank=True)
    conversation = models.ForeignKey(
        Conversation, verbose_name=_("会话"), null=True, blank=True, on_delete=models.SET_NULL,
        related_name="traces",
    )
    assistant_message = models.OneToOneField(
        Message, verbose_name=_("回答消息"), null=True, blank=True, on_delete=models.SET_NULL,
        related_name="trace",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("用户"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    question = models.TextField(_("问题"))
    rewritten_query = models.TextField(_("检索问题"), blank=True)
    status = models.CharField(_("状态"), max_length=16, choices=TraceStatus.choices)
    route = models.CharField(_("路由"), max_length=32, blank=True, db_index=True)
    intent = models.CharField(_("意图"), max_length=32, blank=True)
    hit_type = models.CharField(_("命中类型"), max_length=32, blank=True, db_index=True)
    confidence_score = models.FloatField(_("置信度"), null=True, blank=True)
    confidence_level = models.CharField(_("置信度等级"), max_length=16, blank=True, db_index=True)
    stage_timings = models.JSONField(_("阶段耗时"), default=list)
    first_token_ms = models.FloatField(_("首字耗时（毫秒）"), null=True, blank=True)
    total_ms = models.FloatField(_("总耗时（毫秒）"), default=0)
    cache = models.JSONField(_("缓存"), default=dict)
    degradations = models.JSONField(_("降级"), default=list)
    insufficient_reason = models.CharField(_("信息不足原因"), max_length=64, blank=True)
    model_name = models.CharField(_("模型"), max_length=100, blank=True)
    error_class = models.CharField(_("错误类型"), max_length=100, blank=True)
    error_code = models.CharField(_("错误码"), max_length=64, blank=True)
    details = models.JSONField(_("详情"), default=dict)
    created_at = models.DateTimeField(_("时间"), auto_now_add=True, db_index=True)

    class Meta:
        verbose_name = _("问答追踪")
        verbose_name_plural = _("问答追踪")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in TraceStatus]), name="querytrace_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.trace_id} · {Route.label_of(self.route)}"

    @property
    def full_details(self) -> dict:
        """The whole retrieval trace: on the answer's evidence when it has one (stored once),
        else here (failed and cancelled turns keep no evidence)."""
        if self.details:
            return self.details
        message = self.assistant_message if self.assistant_message_id else None
        evidence = getattr(message, "evidence", None) if message is not None else None
        return evidence.retrieval_trace if evidence is not None else {}


class FeedbackVerdict(models.TextChoices):
    UP = "up", _("有用")
    DOWN = "down", _("没用")


class AnswerFeedback(models.Model):
    """A reader's 👍 / 👎 on one answer, with an optional reason; they may change it.

    An answer belongs to one conversation and a conversation to one reader (a user, or an
    anonymous reader's session), so one row per answer is one per reader per answer. The
    knowledge base and its version at answer time are copied from the answer's trace: staff
    filter by them, and a version retired later still names what was judged."""

    message = models.OneToOneField(
        Message, verbose_name=_("回答消息"), on_delete=models.CASCADE, related_name="feedback"
    )
    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), on_delete=models.CASCADE, related_name="answer_feedback"
    )
    kb_version = models.PositiveIntegerField(_("知识库版本"), null=True, blank=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("用户"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    session_key = models.CharField(_("会话密钥"), max_length=64, blank=True)
    verdict = models.CharField(_("评价"), max_length=8, choices=FeedbackVerdict.choices, db_index=True)
    reason = models.TextField(_("原因"), blank=True)
    created_at = models.DateTimeField(_("时间"), auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(_("修改时间"), auto_now=True)

    class Meta:
        verbose_name = _("回答反馈")
        verbose_name_plural = _("回答反馈")
        ordering = ["-updated_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(verdict__in=[v.value for v in FeedbackVerdict]), name="answerfeedback_verdict_valid"
            ),
        ]

    def __str__(self) -> str:
        return gettext("%(verdict)s：回答 %(id)s") % {"verdict": self.get_verdict_display(), "id": self.message_id}
