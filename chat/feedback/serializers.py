"""The feedback API's request and response shapes."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from ..models import FeedbackVerdict
from .services import REASON_MAX_CHARS


class FeedbackInput(serializers.Serializer):
    verdict = serializers.ChoiceField(
        choices=FeedbackVerdict.choices, help_text=_("up：有用（👍）；down：没用（👎）。"),
    )
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=REASON_MAX_CHARS, default="",
        help_text=_("可选的原因，例如“答非所问”“数字不对”。"),
    )


class FeedbackOutput(serializers.Serializer):
    message_id = serializers.IntegerField(help_text=_("被评价的回答消息 ID。"))
    verdict = serializers.ChoiceField(choices=FeedbackVerdict.choices)
    reason = serializers.CharField(allow_blank=True)
    updated_at = serializers.DateTimeField()
