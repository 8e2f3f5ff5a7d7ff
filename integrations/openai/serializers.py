"""OpenAPI shapes of the OpenAI-compatible endpoints. The request is read by
`requests.parse_completion_request` (OpenAI's own error messages and `param`s); these describe
it and the answers for `/api/schema/`."""

from __future__ import annotations

from rest_framework import serializers

from chat.serializers import AnswerConfidenceOutput, CitationOutput, ClarifyOutput


class ContentPartInput(serializers.Serializer):
    type = serializers.ChoiceField(choices=["text"], help_text='Only "text" parts; others are refused (400).')
    text = serializers.CharField(allow_blank=True)


class MessageInput(serializers.Serializer):
    role = serializers.ChoiceField(
        choices=["system", "developer", "user", "assistant"],
        help_text="The last message is the user's question. System and developer messages are not used.",
    )
    content = serializers.CharField(
        allow_blank=True, help_text="A string, or an array of text content parts ({type: text, text})."
    )
    name = serializers.CharField(required=False)


class StreamOptionsInput(serializers.Serializer):
    include_usage = serializers.BooleanField(required=False, help_text="A last chunk with `usage` and no choices.")


class RagsiteOptionsInput(serializers.Serializer):
    """ragsite's own options (`extra_body={"ragsite": {...}}` in the SDKs), as `/api/chat` takes them."""

    conversation_id = serializers.UUIDField(
        required=False, help_text="Continue this stored conversation (its turns feed follow-up handling); "
                                  "without it every request is a new conversation.",
    )
    knowledge_base_ids = serializers.ListField(child=serializers.CharField(), required=False,
                                               help_text="More knowledge bases read by the same question.")
    filters = serializers.ListField(child=serializers.JSONField(), required=False,
                                    help_text="Metadata filters, as on /api/chat.")
    document_ids = serializers.ListField(child=serializers.IntegerField(), required=False)
    item_ids = serializers.ListField(child=serializers.IntegerField(), required=False,
                                     help_text="Items chosen from a clarifying question (`ragsite.clarify`).")
    top_k = serializers.IntegerField(required=False)
    mode = serializers.CharField(required=False)
    candidate_k = serializers.IntegerField(required=False)
    enable_query_rewrite = serializers.BooleanField(required=False)
    enable_rerank = serializers.BooleanField(required=False)
    enable_parent_expansion = serializers.BooleanField(required=False)
    enable_hyde = serializers.BooleanField(required=False)


class ChatCompletionInput(serializers.Serializer):
    model = serializers.CharField(help_text="The knowledge base's slug (`GET /v1/models`).")
    messages = MessageInput(many=True)
    stream = serializers.BooleanField(required=False, default=False)
    stream_options = StreamOptionsInput(required=False, allow_null=True)
    user = serializers.CharField(required=False, max_length=256, help_text="Accepted, not stored.")
    n = serializers.IntegerField(required=False, help_text="1 only.")
    temperature = serializers.FloatField(required=False, help_text="Accepted and ignored (as are top_p, "
                                         "max_tokens, max_completion_tokens, stop, seed, penalties).")
    ragsite = RagsiteOptionsInput(required=False)


class AssistantMessageOutput(serializers.Serializer):
    role = serializers.ChoiceField(choices=["assistant"])
    content = serializers.CharField(allow_blank=True, help_text="The answer, citing `[来源 N](citation://N)`.")
    refusal = serializers.CharField(allow_null=True)


class ChoiceOutput(serializers.Serializer):
    index = serializers.IntegerField()
    message = AssistantMessageOutput()
    finish_reason = serializers.ChoiceField(choices=["stop"])
    logprobs = serializers.JSONField(allow_null=True)


class UsageOutput(serializers.Serializer):
    prompt_tokens = serializers.IntegerField(help_text="Qwen tokenizer tokens of the messages' text.")
    completion_tokens = serializers.IntegerField(help_text="Qwen tokenizer tokens of the answer.")
    total_tokens = serializers.IntegerField()


class RagsiteAnswerOutput(serializers.Serializer):
    message_id = serializers.IntegerField(help_text="The stored answer (feedback: /api/chat/messages/{id}/feedback).")
    conversation_id = serializers.UUIDField(help_text="Pass as `ragsite.conversation_id` to continue it.")
    trace_id = serializers.UUIDField()
    hit_type = serializers.CharField()
    answer_confidence = AnswerConfidenceOutput()
    citations = CitationOutput(many=True)
    clarify = ClarifyOutput(allow_null=True)


class ChatCompletionOutput(serializers.Serializer):
    id = serializers.CharField(help_text="`chatcmpl-<message id>` (a stream's chunks: `chatcmpl-<trace id>`).")
    object = serializers.ChoiceField(choices=["chat.completion"])
    created = serializers.IntegerField()
    model = serializers.CharField()
    choices = ChoiceOutput(many=True)
    usage = UsageOutput()
    ragsite = RagsiteAnswerOutput()


class ModelOutput(serializers.Serializer):
    id = serializers.CharField(help_text="The knowledge base's slug.")
    object = serializers.ChoiceField(choices=["model"])
    created = serializers.IntegerField(help_text="The knowledge base's creation, Unix seconds.")
    owned_by = serializers.CharField()


class ModelListOutput(serializers.Serializer):
    object = serializers.ChoiceField(choices=["list"])
    data = ModelOutput(many=True)


class OpenAIErrorDetailOutput(serializers.Serializer):
    message = serializers.CharField()
    type = serializers.CharField(help_text="invalid_request_error, authentication_error, rate_limit_error, "
                                           "server_error, ...")
    code = serializers.CharField(allow_null=True, help_text="ragsite's stable code (model_not_found, "
                                                            "invalid_api_key, throttled, server_busy, ...).")
    param = serializers.CharField(allow_null=True, help_text="The request parameter at fault.")
    retry_after = serializers.IntegerField(required=False, help_text="429 and 503: seconds, as Retry-After.")


class OpenAIErrorOutput(serializers.Serializer):
    error = OpenAIErrorDetailOutput()

    class Meta:
        ref_name = "OpenAIError"
