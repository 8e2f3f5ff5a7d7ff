"""`/api/chat/messages/{id}/feedback` — the reader's 👍 / 👎 on one of their answers."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from django.utils.translation import gettext_lazy as _
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ragsite.openapi import error_responses

from ..access import requester_of
from ..selectors import feedback_dict
from . import selectors, services
from .serializers import FeedbackInput, FeedbackOutput

MESSAGE_ID = OpenApiParameter(
    "message_id", str, OpenApiParameter.PATH,
    description=_("回答的消息 ID（/api/chat 返回的 message_id），或 OpenAI 兼容接口返回的 id（chatcmpl-…）。"),
)


class AnswerFeedbackView(APIView):
    """GET / PUT / DELETE the requester's feedback on one of their answers. Another reader's
    answer, an unfinished one and a missing one all answer 404 alike."""

    def _requester(self, request: Request):
        return requester_of(user=request.user, session=request.session, claim_session=False)

    @extend_schema(operation_id="chat_message_feedback_retrieve", parameters=[MESSAGE_ID],
                   summary=_("查看对回答的评价"), responses={200: FeedbackOutput, **error_responses(404)})
    def get(self, request: Request, message_id: str) -> Response:
        answer = selectors.access_answer(requester=self._requester(request), message_id=message_id)
        feedback = selectors.feedback_of(answer=answer)
        if feedback is None:
            return Response({"code": "feedback_not_found", "detail": _("这条回答还没有评价。")}, status=404)
        return Response(feedback_dict(feedback))

    @extend_schema(operation_id="chat_message_feedback_update", parameters=[MESSAGE_ID], request=FeedbackInput,
                   summary=_("评价回答（有用 / 没用）"),
                   description=_("每位读者对每条回答只有一条评价，再次提交即修改。评价为“没用”的回答可由知识库编辑者在后台转为评测问题，进入发布前的上线检查。"),
                   responses={200: FeedbackOutput, **error_responses(400, 404)})
    def put(self, request: Request, message_id: str) -> Response:
        body = FeedbackInput(data=request.data)
        body.is_valid(raise_exception=True)
        feedback = services.give_feedback(
            requester=self._requester(request), message_id=message_id,
            verdict=body.validated_data["verdict"], reason=body.validated_data["reason"],
        )
        return Response(feedback_dict(feedback))

    @extend_schema(operation_id="chat_message_feedback_destroy", parameters=[MESSAGE_ID],
                   summary=_("撤回对回答的评价"), responses={204: None, **error_responses(404)})
    def delete(self, request: Request, message_id: str) -> Response:
        services.withdraw_feedback(requester=self._requester(request), message_id=message_id)
        return Response(status=204)
