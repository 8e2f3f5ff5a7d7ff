"""`ws/chat/` — the turn's events over a WebSocket: `start`, `status`, `token`, `clarify` (a
clarifying question's choices, before its `end`), `end`, `error`; and `feedback`, the answer to
a reader's 👍 / 👎 (`{"type": "feedback", "message_id": …, "verdict": …, "reason"?: …}`).

One socket serves many turns, one at a time. The client sends
`{"type": "question", "knowledge_base_id": …, "question": …, "conversation_id"?: …, options…}`
(a bare object without `type` is a question too; `knowledge_base_ids` asks several at once; the
options are the JSON API's, `filters` included) and may send `{"type": "cancel"}` to stop the
turn in progress. An error ends the turn with an `error` event, never the socket. Access rules
are those of HTTP: the session's user (anonymous readers: public knowledge bases, conversations
owned by their session).
"""

from __future__ import annotations

import asyncio
import logging

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.utils.translation import gettext as _

from ragsite.api import error_payload
from ragsite.db import releasing
from ragsite.errors import ValidationFailed
from ragsite.executors import CHAT_TURN, pool, run_admitted
from ragsite.jsontext import InvalidJson, parse_json
from ragsite.throttles import caller_from_scope

from .access import requester_of
from .admission import Refused, admit_question
from .feedback import services as feedback_services
from .feedback.serializers import FeedbackInput
from .selectors import feedback_dict
from .serializers import first_error
from .contracts import TurnCancelled
from .pipeline.events import Delta, Evidence, Finished, Started, Status
from .pipeline.rag import GENERATION_FAILED
from .streaming import TurnRunner

logger = logging.getLogger(__name__)


class ChatConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.turn: asyncio.Task | None = None
        self.runner: TurnRunner | None = None
        await self.accept()

    async def disconnect(self, code) -> None:
        await self._cancel_turn()

    async def receive_json(self, content, **kwargs) -> None:
        if not isinstance(content, dict):
            await self._error(_("消息必须是 JSON 对象。"), code="invalid_json")
            return
        kind = content.get("type", "question")
        if kind == "cancel":
            await self._cancel_turn()
            return
        if kind == "feedback":
            await self._feedback(content)
            return
        if kind != "question":
            await self._error(_("未知的消息类型：%(type)s") % {"type": kind}, code="invalid_request")
            return
        if self.turn is not None and not self.turn.done():
            await self._error(_("上一个问题还在回答中，请稍候或先取消。"), code="turn_in_progress")
            return
        body = {k: v for k, v in content.items() if k != "type"}
        self.turn = asyncio.create_task(self._run_turn(body))

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        if text_data is None:
            # The base class raises on a binary frame, which closes the socket with a 1011.
            await self._error(_("消息必须是 JSON 文本。"), code="invalid_json")
            return
        await self.receive_json(await self.decode_json(text_data), **kwargs)

    @classmethod
    async def decode_json(cls, text_data):
        """The frame as the HTTP entry points read a body (`ragsite.jsontext`); None when it is
        not such JSON, which `receive_json` answers with an `invalid_json` error event."""
        try:
            return parse_json(text_data)
        except InvalidJson:
            return None

    # --- one turn ---------------------------------------------------------------------------

    async def _run_turn(self, body: dict) -> None:
        try:
            # Behind the bounded wait of the turn's workers, as the SSE view's admission.
            prepared = await run_admitted(pool(CHAT_TURN), releasing(lambda: self._validate(body)),
                                          wait=settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS, discard=_give_back)
        except Exception as exc:  # noqa: BLE001 — the turn ends with an error event, the socket stays
            await self._turn_error(exc, session_id="", trace_id="")
            return
        if isinstance(prepared, dict):
            await self._error(prepared.pop("detail"), **prepared)
            return
        query, requester, slot = prepared
        runner = TurnRunner(query=query, requester=requester).start_holding(slot)
        self.runner = runner
        session_id = ""
        trace_id = ""
        try:
            while True:
                outcome = await runner.next_coalesced()
                if outcome.kind == "done":
                    return
                if outcome.kind == "error":
                    await self._turn_error(outcome.value, session_id=session_id, trace_id=trace_id)
                    return
                event = outcome.value
                if isinstance(event, Started):
                    session_id, trace_id = str(event.conversation_id), str(event.trace_id)
                    await self.send_json({
                        "type": "start", "session_id": session_id, "trace_id": trace_id,
                        "knowledge_base_id": event.kb_id, "knowledge_base_name": event.kb_name,
                        "data_scope": event.data_scope, "kb_version": event.kb_version,
                    })
                elif isinstance(event, Status):
                    await self.send_json({"type": "status", "session_id": session_id, "stage": event.stage,
                                          "message": event.message})
                elif isinstance(event, Evidence) and event.citations:
                    await self.send_json({"type": "status", "session_id": session_id, "stage": "evidence",
                                          "message": _("已找到 %(n)s 条依据。") % {"n": len(event.citations)}})
                elif isinstance(event, Delta):
                    await self.send_json({"type": "token", "session_id": session_id, "token": event.text})
                elif isinstance(event, Finished):
                    if event.result.clarify is not None:
                        await self.send_json({"type": "clarify", "session_id": session_id,
                                              **event.result.clarify.as_dict()})
                    await self.send_json(_end_event(event, session_id=session_id))
                    # The turn is over for the client, which may ask again at once: do not wait
                    # for the worker thread to wind down, or that question is `turn_in_progress`.
                    return
        except asyncio.CancelledError:
            runner.cancel()
            raise
        finally:
            slot.release()
            if self.runner is runner:
                self.runner = None

    def _validate(self, body: dict):
        """(query, requester, stream slot), or the error event's fields: each question is
        admitted like an SSE request (rate limits, validation, a stream slot)."""
        caller = caller_from_scope({**self.scope, "user": self.scope.get("user") or AnonymousUser()})
        admission = admit_question(caller=caller, body=body, session=self.scope.get("session"))
        if isinstance(admission, Refused):
            return dict(admission.body)
        return admission.query, admission.requester, admission.slot

    # --- feedback on an answer -----------------------------------------------------------------

    async def _feedback(self, content: dict) -> None:
        """`{"type": "feedback", "message_id": …, "verdict": "up" | "down" | null, "reason"?: …}`
        (null withdraws it), answered by a `feedback` event, or an `error` event: the same rules
        and errors as `PUT /api/chat/messages/{id}/feedback`. Allowed while a turn streams."""
        try:
            event = await run_admitted(pool(CHAT_TURN), releasing(lambda: self._write_feedback(content)),
                                       wait=settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS)
        except Exception as exc:  # noqa: BLE001 — an error event, the socket stays
            await self._turn_error(exc, session_id="", trace_id="")
            return
        await self.send_json(event)

    def _write_feedback(self, content: dict) -> dict:
        requester = requester_of(user=self.scope.get("user") or AnonymousUser(), session=self.scope.get("session"),
                                 claim_session=False)
        message_id = content.get("message_id")
        if content.get("verdict") is None:
            feedback_services.withdraw_feedback(requester=requester, message_id=str(message_id))
            return {"type": "feedback", "message_id": message_id, "verdict": None, "reason": ""}
        body = FeedbackInput(data={k: v for k, v in content.items() if k in ("verdict", "reason")})
        if not body.is_valid():
            raise ValidationFailed(first_error(body.errors), code="invalid_request")
        feedback = feedback_services.give_feedback(
            requester=requester, message_id=str(message_id), verdict=body.validated_data["verdict"],
            reason=body.validated_data["reason"],
        )
        return {"type": "feedback", **feedback_dict(feedback)}

    async def _cancel_turn(self) -> None:
        if self.runner is not None:
            self.runner.cancel()
        if self.turn is not None and not self.turn.done():
            try:
                await asyncio.wait_for(asyncio.shield(self.turn), timeout=5)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self.turn.cancel()

    async def _turn_error(self, exc: BaseException, *, session_id: str, trace_id: str) -> None:
        if isinstance(exc, TurnCancelled):
            await self.send_json({"type": "error", "session_id": session_id, "trace_id": trace_id,
                                  "code": "cancelled", "error": _("已停止回答。")})
            return
        known = error_payload(exc)
        extra = {}
        if known is not None:
            _status, body = known
            message, code = body["detail"], body["code"]
            if "retry_after" in body:  # too busy: when to ask again
                extra["retry_after"] = body["retry_after"]
        else:
            logger.error("chat turn failed: %s", type(exc).__name__, exc_info=exc)
            message, code = _(GENERATION_FAILED), "internal_error"
        await self.send_json({"type": "error", "session_id": session_id, "trace_id": trace_id,
                              "code": code, "error": message, **extra})

    async def _error(self, message: str, *, code: str, **extra) -> None:
        await self.send_json({"type": "error", "session_id": "", "trace_id": "", "code": code, "error": message, **extra})


def _give_back(prepared) -> None:
    """An admission whose socket is gone (closed while it ran): free its stream slot."""
    if not isinstance(prepared, dict):
        prepared[2].release()


def _end_event(event: Finished, *, session_id: str) -> dict:
    result = event.result
    retrieval = result.retrieval
    return {
        "type": "end",
        "session_id": session_id,
        "hit_type": str(result.hit_type),
        "route": str(result.route),
        "answer": result.answer,
        "sources": retrieval.get("sources", []),
        "citations": [c.as_dict() for c in result.citations],
        "answer_confidence": result.answer_confidence.as_dict(),
        "intent": result.intent.as_dict(),
        "retrieval": retrieval,
        "processing_time": round((retrieval.get("total_elapsed_ms") or 0) / 1000, 3),
        "trace_id": str(result.trace_id),
        "message_id": result.assistant_message_id,
        "clarify": result.clarify.as_dict() if result.clarify else None,
    }
