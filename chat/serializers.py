"""Request bodies of the chat endpoints: the retrieval API's question body plus `conversation_id`, or the AI
SDK's own (`messages` as UI messages, the chat `id`, and `knowledge_base_id` in the body)."""

from __future__ import annotations

from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ragsite.errors import ValidationFailed
from retrieval.serializers import AssetOutput, RetrievalOptionsInput, RetrievalResultOutput

from .contracts import ChatOptions, ChatQuery
from .feedback.serializers import FeedbackOutput
from .models import MessageRole, MessageStatus
from .pipeline.rules import load_rules

MAX_CHOSEN_ITEMS = 5

class UIMessagePartInput(serializers.Serializer):
    type = serializers.CharField(help_text=gettext_lazy("只读取 \"text\" 类型的片段。"))
    text = serializers.CharField(required=False, allow_blank=True, help_text=gettext_lazy("text 片段必填。"))


class UIMessageInput(serializers.Serializer):
    """The schema of one AI SDK UI message; the question is the last user message's text parts
    (or its older `content` string). Other roles and parts are accepted and not read."""

    id = serializers.CharField(required=False, allow_blank=True)
    role = serializers.CharField(help_text=gettext_lazy("\"user\"、\"assistant\" 或 \"system\"；问题取最后一条 user 消息的文本。"))
    parts = UIMessagePartInput(many=True, required=False)
    content = serializers.CharField(required=False, allow_blank=True)


@extend_schema_field(UIMessageInput(many=True))
class UIMessagesField(serializers.ListField):
    """AI SDK UI messages: a body whose `messages` is no list is malformed like a bad message."""

    def to_internal_value(self, data):
        if not isinstance(data, list):
            raise ValidationFailed(_("messages 格式不正确：messages 必须是数组。"), code="invalid_messages")
        most = settings.RAG_MAX_CHAT_MESSAGES
        if len(data) > most:
            raise ValidationFailed(
                _("messages 过多（最多 %(n)s 条），请开始新的对话。") % {"n": most}, code="too_many_messages"
            )
        return super().to_internal_value(data)


class KnowledgeBaseIdsField(serializers.ListField):
    """Slugs of the knowledge bases one question reads: a bounded list, refused whole when over."""

    child = serializers.CharField(max_length=64)

    def to_internal_value(self, data):
        most = settings.RAG_MAX_KNOWLEDGE_BASES_PER_QUESTION
        if isinstance(data, list) and len(data) > most:
            raise ValidationFailed(
                _("一次提问最多可同时检索 %(n)s 个知识库。") % {"n": most}, code="too_many_knowledge_bases"
            )
        return super().to_internal_value(data)


class ChatRequestInput(RetrievalOptionsInput):
    COSTLY_FLAGS = (*RetrievalOptionsInput.COSTLY_FLAGS, "enable_hyde")

    # The conversation's knowledge base; with `knowledge_base_ids`, the first of those unless given.
    knowledge_base_id = serializers.CharField(
        max_length=64, required=False,
        help_text=gettext_lazy("提问的知识库标识；与 knowledge_base_ids 至少给出一个。"),
    )
    knowledge_base_ids = KnowledgeBaseIdsField(
        required=False, allow_empty=False,
        help_text=gettext_lazy("一次提问同时检索多个知识库：证据统一排序，每条引用注明所属知识库。"
                               "数量上限为 RAG_MAX_KNOWLEDGE_BASES_PER_QUESTION。"),
    )
    question = serializers.CharField(
        required=False, allow_blank=True, trim_whitespace=False,
        help_text=gettext_lazy("问题文本；不给出时取 AI SDK `messages` 中最后一条用户消息的文本。"),
    )
    conversation_id = serializers.UUIDField(
        required=False, allow_null=True, help_text=gettext_lazy("继续这个对话；不传则新建对话。"),
    )
    # AI SDK (DefaultChatTransport): {id, messages, trigger, messageId, ...body}
    id = serializers.CharField(required=False, allow_blank=True, max_length=100)
    messages = UIMessagesField(
        child=serializers.JSONField(), required=False,
        help_text=gettext_lazy("AI SDK 的 UI 消息（条数上限 RAG_MAX_CHAT_MESSAGES）。"),
    )
    trigger = serializers.CharField(required=False, allow_blank=True, max_length=50)
    messageId = serializers.CharField(required=False, allow_blank=True, allow_null=True, max_length=100)  # noqa: N815
    item_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1), required=False, max_length=MAX_CHOSEN_ITEMS,
        help_text=gettext_lazy("从澄清问题中选出的商品（`clarify.choices[].item_id`）：针对它们重新回答这个问题。"),
    )
    enable_hyde = serializers.BooleanField(
        required=False, allow_null=True, default=None,
        help_text=gettext_lazy("另用聊天模型写出的假设答案检索（HyDE，需要生成式模型服务）；不传则按规则文件的默认值。"),
    )

    def validate(self, data):
        if not data.get("knowledge_base_id"):
            if not data.get("knowledge_base_ids"):
                raise serializers.ValidationError(
                    {"knowledge_base_id": [_("请提供 knowledge_base_id 或 knowledge_base_ids。")]}
                )
            data["knowledge_base_id"] = data["knowledge_base_ids"][0]
        # Emptiness and length are the pipeline's to judge (RAGService.run), for every transport.
        question = data.get("question")
        if question is None:
            if "messages" not in data:
                raise ValidationFailed(_("请提供 question，或 AI SDK 格式的 messages。"), code="question_empty")
            question = last_user_text(data["messages"])
        data["question"] = question.strip()
        # Checked here on the raw text so an oversized body is refused before any work; the
        # pipeline checks again after normalisation (NFKC can lengthen a text), for every caller.
        most = settings.RAG_MAX_QUESTION_CHARS
        if len(data["question"]) > most:
            raise ValidationFailed(_("问题过长（最多 %(n)s 个字符）。") % {"n": most}, code="question_too_long")
        return super().validate(data)

    def anonymous_limits(self) -> dict:
        # Chat's defaults are the rules file's; the reranker's depends on the provider, as in
        # the retrieval plan (pipeline/preparation.build_plan).
        defaults = load_rules().retrieval
        local = getattr(settings, "RAG_PROVIDER", "local") == "local"
        return {
            "enable_query_rewrite": defaults.enable_query_rewrite,
            "enable_rerank": defaults.enable_rerank_local if local else defaults.enable_rerank_remote,
            "enable_hyde": False if local else defaults.enable_hyde_remote,
            "candidate_k": defaults.candidate_k,
        }

    @classmethod
    def query_from(cls, data, *, user) -> ChatQuery:
        """The question a transport received from `user`, or ValidationFailed with the first
        problem (Forbidden for options an anonymous caller may not ask for)."""
        serializer = cls(data=data, context={"user": user})
        if not serializer.is_valid():
            field, errors = next(iter(serializer.errors.items()))
            raise ValidationFailed(f"{field}: {first_error(errors)}", code="invalid_request", errors=serializer.errors)
        return serializer.to_query()

    def to_query(self) -> ChatQuery:
        data = self.validated_data
        return ChatQuery(
            knowledge_base_id=data["knowledge_base_id"],
            also_knowledge_base_ids=tuple(
                slug for slug in data.get("knowledge_base_ids", ()) if slug != data["knowledge_base_id"]
            ),
            question=data["question"],
            conversation_id=data.get("conversation_id"),
            client_id=(data.get("id") or "").strip(),
            item_ids=tuple(dict.fromkeys(data.get("item_ids") or ())),
            options=ChatOptions(
                top_k=data.get("top_k"),
                mode=data.get("mode"),
                candidate_k=data.get("candidate_k"),
                enable_query_rewrite=data.get("enable_query_rewrite"),
                enable_rerank=data.get("enable_rerank"),
                enable_parent_expansion=data.get("enable_parent_expansion"),
                document_ids=data.get("document_ids"),
                filters=data.get("filters") or (),
                enable_hyde=data.get("enable_hyde"),
            ),
        )


def first_error(errors) -> str:
    """The first message of a field's errors: a list, or for a list field a dict by item index."""
    while isinstance(errors, (dict, list)) and errors:
        errors = next(iter(errors.values())) if isinstance(errors, dict) else errors[0]
    return str(errors)


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


# --- response shapes (what `TurnResult.as_dict()` and the conversation selectors produce) --------


class SupportSpanOutput(serializers.Serializer):
    line = serializers.IntegerField(help_text=gettext_lazy("引用它的答案行号（从 0 开始）；-1 表示按问题选出。"))
    chunk_id = serializers.IntegerField(allow_null=True)
    start = serializers.IntegerField()
    end = serializers.IntegerField()
    text_start = serializers.IntegerField()
    text_end = serializers.IntegerField()
    text = serializers.CharField(allow_blank=True)


class CitationOutput(serializers.Serializer):
    number = serializers.IntegerField(help_text=gettext_lazy("答案中 `[来源 N]` 的 N。"))
    kind = serializers.ChoiceField(
        choices=["chunk", "faq", "web"], help_text=gettext_lazy("\"web\"：网页，不是知识库的内容。")
    )
    title = serializers.CharField(allow_blank=True)
    text = serializers.CharField(allow_blank=True)
    score = serializers.FloatField()
    relevance = serializers.FloatField()
    chunk_id = serializers.IntegerField(allow_null=True)
    document_id = serializers.IntegerField(allow_null=True)
    faq_id = serializers.IntegerField(allow_null=True)
    locator = serializers.DictField()
    locator_label = serializers.CharField(allow_blank=True)
    heading_path = serializers.ListField(child=serializers.CharField())
    content_type = serializers.CharField()
    context_chunk_ids = serializers.ListField(child=serializers.IntegerField())
    preview_url = serializers.CharField(allow_null=True)
    assets = AssetOutput(many=True)
    spans = SupportSpanOutput(many=True)
    cited = serializers.BooleanField(help_text=gettext_lazy("答案正文中引用了它。"))
    knowledge_base = serializers.CharField(allow_blank=True, help_text=gettext_lazy("来源所属知识库的标识。"))
    knowledge_base_name = serializers.CharField(allow_blank=True)
    url = serializers.CharField(
        allow_blank=True, help_text=gettext_lazy("网页来源的地址（其他类型为 \"\"）；只由读者自己打开。")
    )
    site = serializers.CharField(allow_blank=True, help_text=gettext_lazy("网页来源的网站（主机名）。"))


class IntentOutput(serializers.Serializer):
    intent = serializers.CharField()
    rule_score = serializers.FloatField()
    confidence = serializers.FloatField()
    reason = serializers.CharField(allow_blank=True)


class AnswerConfidenceOutput(serializers.Serializer):
    score = serializers.FloatField()
    level = serializers.CharField()
    label = serializers.CharField()
    reasons = serializers.ListField(child=serializers.CharField())
    # Diagnostics whose keys follow the confidence model (chat.pipeline.confidence).
    evidence_confidence = serializers.DictField()
    generation_verification = serializers.DictField()
    signals = serializers.DictField()


class ClarifyChoiceOutput(serializers.Serializer):
    item_id = serializers.IntegerField()
    name = serializers.CharField()


class ClarifyOutput(serializers.Serializer):
    """A clarifying question: ask `question` again with `item_ids` set to the chosen choice."""

    question = serializers.CharField()
    mention = serializers.CharField(allow_blank=True, help_text=gettext_lazy("问题中同时符合多个商品的词。"))
    choices = ClarifyChoiceOutput(many=True)


class ChatTurnOutput(serializers.Serializer):
    trace_id = serializers.UUIDField(help_text=gettext_lazy("本轮问答的追踪 ID，排查问题时提供。"))
    conversation_id = serializers.UUIDField(help_text=gettext_lazy("所属对话；继续提问时作为 conversation_id 传回。"))
    user_message_id = serializers.IntegerField(help_text=gettext_lazy("问题消息的 ID。"))
    message_id = serializers.IntegerField(help_text=gettext_lazy("答案消息的 ID。"))
    answer = serializers.CharField(
        allow_blank=True, help_text=gettext_lazy("答案（Markdown），以 `[来源 N]` 标注引用。"),
    )
    route = serializers.CharField(help_text=gettext_lazy("问题被路由到的处理方式。"))
    hit_type = serializers.CharField(
        allow_blank=True,
        help_text=gettext_lazy("答案的来源：direct_answer（直接回答）、faq_exact / faq_direct（FAQ）、"
                               "rag（检索生成）、insufficient_context（资料不足）、clarify（反问澄清）。"),
    )
    intent = IntentOutput()
    citations = CitationOutput(many=True, help_text=gettext_lazy("答案引用的来源，按编号排列。"))
    answer_confidence = AnswerConfidenceOutput(allow_null=True, help_text=gettext_lazy("答案的可信度评估。"))
    retrieval = serializers.DictField(help_text=gettext_lazy("诊断信息：检索计划、查询变体、耗时、缓存、降级。"))
    kb_version = serializers.IntegerField(allow_null=True, help_text=gettext_lazy("回答时使用的知识库版本号。"))
    clarify = ClarifyOutput(allow_null=True, help_text=gettext_lazy("hit_type 为 \"clarify\" 时：需要用户选择的商品。"))


class ConversationOutput(serializers.Serializer):
    id = serializers.UUIDField()
    knowledge_base_id = serializers.CharField()
    title = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class EvidenceOutput(serializers.Serializer):
    """What an answer was shown with, as stored at the time."""

    route = serializers.CharField()
    hit_type = serializers.CharField(allow_blank=True)
    intent = serializers.DictField()
    rewritten_query = serializers.CharField(allow_blank=True)
    citations = CitationOutput(many=True)
    retrieval_results = RetrievalResultOutput(many=True)
    retrieval_trace = serializers.DictField()
    answer_confidence = AnswerConfidenceOutput(allow_null=True)
    clarify = ClarifyOutput(allow_null=True, required=False)


class MessageOutput(serializers.Serializer):
    id = serializers.IntegerField()
    role = serializers.ChoiceField(choices=MessageRole.choices)
    content = serializers.CharField(allow_blank=True)
    status = serializers.ChoiceField(choices=MessageStatus.choices)
    error_code = serializers.CharField(allow_blank=True)
    trace_id = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()
    evidence = EvidenceOutput(allow_null=True, help_text=gettext_lazy("答案当时展示的证据；仅完整的答案有。"))
    feedback = FeedbackOutput(allow_null=True, help_text=gettext_lazy("读者对这条回答的评价（有用 / 没用），没有评价时为 null。"))


class ConversationDetailOutput(ConversationOutput):
    messages = MessageOutput(many=True)
