"""OpenAPI shapes of the OpenAI-compatible endpoints. The request is read by
`requests.parse_completion_request` (OpenAI's own error messages and `param`s); these describe
it and the answers for `/api/schema/`."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from chat.serializers import AnswerConfidenceOutput, CitationOutput, ClarifyOutput


class ContentPartInput(serializers.Serializer):
    type = serializers.ChoiceField(choices=["text"], help_text=_("只接受 \"text\" 类型的片段，其他类型返回 400。"))
    text = serializers.CharField(allow_blank=True)


class MessageInput(serializers.Serializer):
    role = serializers.ChoiceField(
        choices=["system", "developer", "user", "assistant"],
        help_text=_("最后一条消息是用户的问题；system 与 developer 消息不使用。"),
    )
    content = serializers.CharField(
        allow_blank=True, help_text=_("字符串，或 text 片段组成的数组（{type: text, text}）。")
    )
    name = serializers.CharField(required=False)


class StreamOptionsInput(serializers.Serializer):
    include_usage = serializers.BooleanField(required=False, help_text=_("最后多发一个只含 `usage`、不含 choices 的片段。"))


class RagsiteOptionsInput(serializers.Serializer):
    """ragsite's own options (`extra_body={"ragsite": {...}}` in the SDKs), as `/api/chat` takes them."""

    conversation_id = serializers.UUIDField(
        required=False, help_text=_("接着这个已保存的对话提问（它的前几轮用于追问理解）；不填时每个请求都是新对话。"),
    )
    knowledge_base_ids = serializers.ListField(child=serializers.CharField(), required=False,
                                               help_text=_("同一问题同时检索的其他知识库。"))
    filters = serializers.ListField(child=serializers.JSONField(), required=False,
                                    help_text=_("元数据过滤条件，与 /api/chat 相同。"))
    document_ids = serializers.ListField(child=serializers.IntegerField(), required=False)
    item_ids = serializers.ListField(child=serializers.IntegerField(), required=False,
                                     help_text=_("在反问确认（`ragsite.clarify`）中选定的商品/型号。"))
    top_k = serializers.IntegerField(required=False)
    mode = serializers.CharField(required=False)
    candidate_k = serializers.IntegerField(required=False)
    enable_query_rewrite = serializers.BooleanField(required=False)
    enable_rerank = serializers.BooleanField(required=False)
    enable_parent_expansion = serializers.BooleanField(required=False)
    enable_hyde = serializers.BooleanField(required=False)


class ChatCompletionInput(serializers.Serializer):
    model = serializers.CharField(help_text=_("知识库标识（见 `GET /v1/models`）。"))
    messages = MessageInput(many=True)
    stream = serializers.BooleanField(required=False, default=False)
    stream_options = StreamOptionsInput(required=False, allow_null=True)
    user = serializers.CharField(required=False, max_length=256, help_text=_("接受但不保存。"))
    n = serializers.IntegerField(required=False, help_text=_("只能为 1。"))
    temperature = serializers.FloatField(required=False, help_text=_("接受但忽略（top_p、max_tokens、max_completion_tokens、stop、seed 与各惩罚参数同样如此）。"))
    ragsite = RagsiteOptionsInput(required=False)


class AssistantMessageOutput(serializers.Serializer):
    role = serializers.ChoiceField(choices=["assistant"])
    content = serializers.CharField(allow_blank=True, help_text=_("回答正文，以 `[来源 N]` 标注引用。"))
    refusal = serializers.CharField(allow_null=True)


class ChoiceOutput(serializers.Serializer):
    index = serializers.IntegerField()
    message = AssistantMessageOutput()
    finish_reason = serializers.ChoiceField(choices=["stop"])
    logprobs = serializers.JSONField(allow_null=True)


class UsageOutput(serializers.Serializer):
    prompt_tokens = serializers.IntegerField(help_text=_("按 Qwen 分词器计算的消息文本词元数。"))
    completion_tokens = serializers.IntegerField(help_text=_("按 Qwen 分词器计算的回答词元数。"))
    total_tokens = serializers.IntegerField()


class RagsiteAnswerOutput(serializers.Serializer):
    message_id = serializers.IntegerField(help_text=_("已保存的回答消息 ID（评价：/api/chat/messages/{id}/feedback）。"))
    conversation_id = serializers.UUIDField(help_text=_("作为 `ragsite.conversation_id` 传回即可继续这个对话。"))
    trace_id = serializers.UUIDField()
    hit_type = serializers.CharField()
    answer_confidence = AnswerConfidenceOutput()
    citations = CitationOutput(many=True)
    clarify = ClarifyOutput(allow_null=True)


class ChatCompletionOutput(serializers.Serializer):
    id = serializers.CharField(help_text=_("`chatcmpl-<消息 ID>`（流式回答的片段为 `chatcmpl-<追踪 ID>`）。"))
    object = serializers.ChoiceField(choices=["chat.completion"])
    created = serializers.IntegerField()
    model = serializers.CharField()
    choices = ChoiceOutput(many=True)
    usage = UsageOutput()
    ragsite = RagsiteAnswerOutput()


class ModelOutput(serializers.Serializer):
    id = serializers.CharField(help_text=_("知识库标识。"))
    object = serializers.ChoiceField(choices=["model"])
    created = serializers.IntegerField(help_text=_("知识库的创建时间（Unix 秒）。"))
    owned_by = serializers.CharField()


class ModelListOutput(serializers.Serializer):
    object = serializers.ChoiceField(choices=["list"])
    data = ModelOutput(many=True)


class OpenAIErrorDetailOutput(serializers.Serializer):
    message = serializers.CharField()
    type = serializers.CharField(help_text=_("invalid_request_error、authentication_error、rate_limit_error、server_error 等。"))
    code = serializers.CharField(allow_null=True, help_text=_("ragsite 的稳定错误码（model_not_found、invalid_api_key、throttled、server_busy 等）。"))
    param = serializers.CharField(allow_null=True, help_text=_("出错的请求参数。"))
    retry_after = serializers.IntegerField(required=False, help_text=_("仅 429 与 503：需等待的秒数（同 Retry-After）。"))


class OpenAIErrorOutput(serializers.Serializer):
    error = OpenAIErrorDetailOutput()

    class Meta:
        ref_name = "OpenAIError"
