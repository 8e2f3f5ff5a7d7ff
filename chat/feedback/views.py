"""`/api/chat/messages/{id}/feedback` — the reader's 👍 / 👎 on one of their answers."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from django.utils.translation import gettext_lazy as _
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ragsite.openapi import error_responses

from ..access import requester_of
from ..selectors import feedback_dict
from . import selectors, services
from .serializers import FeedbackInput, FeedbackOutput

# The path parameter is described once, by name, in ragsite.openapi.PATH_PARAMETERS; declared
# here for its type (a string: "chatcmpl-…" is accepted too).
MESSAGE_ID = OpenApiParameter("message_id", str, OpenApiParameter.PATH)


class AnswerFeedbackView(APIView):
    """GET / PUT / DELETE the requester's feedback on one of their answers. Another reader's
    answer, an unfinished one and a missing one all answer 404 alike."""

    def _requester(self, request: Request):
        return requester_of(user=request.user, session=request.session, claim_session=False)

    @extend_schema(operation_id="chat_message_feedback_retrieve", parameters=[MESSAGE_ID],
                   summary=_("查看对回答的评价"),
                   description=_("读取当前读者对自己某条回答的评价；还没有评价时返回 404 `feedback_not_found`。别人的回答、未完成的回答与不存在的回答一样返回 404 `message_not_found`。"),
                   responses={200: FeedbackOutput, **error_responses(404)})
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
                   summary=_("撤回对回答的评价"),
                   description=_("删除当前读者对这条回答的评价（没有评价也返回 204）。"),
                   responses={204: OpenApiResponse(description=_("已撤回，无响应体。")), **error_responses(404)})
    def delete(self, request: Request, message_id: str) -> Response:
        services.withdraw_feedback(requester=self._requester(request), message_id=message_id)
        return Response(status=204)
