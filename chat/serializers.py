"""Request bodies of the chat endpoints: the seed 000 §2 body plus `conversation_id`, or the AI
SDK's own (`messages` as UI messages, the chat `id`, and `knowledge_base_id` in the body)."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework import serializers

from ragsite.errors import ValidationFailed
from retrieval.serializers import RetrievalOptionsInput

from .contracts import ChatOptions, ChatQuery

MAX_UI_MESSAGES = 500


class UIMessagesField(serializers.ListField):
    """AI SDK UI messages: a body whose `messages` is no list is malformed like a bad message."""

    def to_internal_value(self, data):
        if not isinstance(data, list):
            raise ValidationFailed(_("messages 格式不正确：messages 必须是数组。"), code="invalid_messages")
        return super().to_internal_value(data)


class ChatRequestInput(RetrievalOptionsInput):
    knowledge_base_id = serializers.CharField(max_length=64)
    question = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    conversation_id = serializers.UUIDField(required=False, allow_null=True)
    # AI SDK (DefaultChatTransport): {id, messages, trigger, messageId, ...body}
    id = serializers.CharField(required=False, allow_blank=True, max_length=100)
    messages = UIMessagesField(child=serializers.JSONField(), required=False, max_length=MAX_UI_MESSAGES)
    trigger = serializers.CharField(required=False, allow_blank=True, max_length=50)
    messageId = serializers.CharField(required=False, allow_blank=True, allow_null=True, max_length=100)  # noqa: N815

    def validate(self, data):
        # Emptiness and length are the pipeline's to judge (RAGService.run), for every transport.
        question = data.get("question")
        if question is None:
            if "messages" not in data:
                raise ValidationFailed(_("请提供 question，或 AI SDK 格式的 messages。"), code="question_empty")
            question = last_user_text(data["messages"])
        data["question"] = question.strip()
        return super().validate(data)

    @classmethod
    def query_from(cls, data) -> ChatQuery:
        """The question a transport received, or ValidationFailed with the first problem."""
        serializer = cls(data=data)
        if not serializer.is_valid():
            field, errors = next(iter(serializer.errors.items()))
            raise ValidationFailed(f"{field}: {errors[0]}", code="invalid_request", errors=serializer.errors)
        return serializer.to_query()

    def to_query(self) -> ChatQuery:
        data = self.validated_data
        return ChatQuery(
            knowledge_base_id=data["knowledge_base_id"],
            question=data["question"],
            conversation_id=data.get("conversation_id"),
            client_id=(data.get("id") or "").strip(),
            options=ChatOptions(
                top_k=data.get("top_k"),
                mode=data.get("mode"),
                candidate_k=data.get("candidate_k"),
                enable_query_rewrite=data.get("enable_query_rewrite"),
                enable_rerank=data.get("enable_rerank"),
                enable_parent_expansion=data.get("enable_parent_expansion"),
                document_ids=data.get("document_ids"),
            ),
        )


def last_user_text(messages) -> str:
    """The text of the last user message of an AI SDK UI message list (`parts` of type "text";
    the older `content` string is accepted too)."""
    for message in reversed(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValidationFailed(_("messages 格式不正确：每条消息需要 role 与 parts。"), code="invalid_messages")
        if message["role"] != "user":
            continue
        parts = message.get("parts")
        if parts is None and isinstance(message.get("content"), str):
            return message["content"]
        if not isinstance(parts, list):
            raise ValidationFailed(_("messages 格式不正确：parts 必须是数组。"), code="invalid_messages")
        texts = []
        for part in parts:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise ValidationFailed(_("messages 格式不正确：无法识别的 part。"), code="invalid_messages")
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise ValidationFailed(_("messages 格式不正确：text part 缺少 text。"), code="invalid_messages")
                texts.append(part["text"])
        return "\n".join(texts)
    raise ValidationFailed(_("messages 中没有用户消息。"), code="question_empty")
