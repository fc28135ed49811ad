"""`POST chat/` and `POST stateless/chat/`."""

from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from conversations.api import serializers as s
from conversations.api.base import ApiView, AsyncApiView, idempotent
from conversations.engine import (
    RESET_MESSAGES,
    ProviderError,
    chat_start,
    eventlog,
    stateless_chat,
)
from conversations.limits import model_work
from conversations.models import Run
from conversations.serializers import run_payload


def _start(request: Request) -> tuple[Any, Any]:
    serializer = s.ChatIn(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    conversation, _, run = chat_start(
        user=request.user,  # type: ignore[arg-type]
        message=data["message"],
        conversation_id=data.get("conversation_id"),
    )
    return conversation, run


def _release_connections() -> None:
    """Give the database connection back before waiting: a waiting request must not
    hold one. (Inside a transaction, as in some tests, there is nothing to give back.)"""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()


async def _wait(run_id: str, timeout: float) -> tuple[str | None, dict[str, Any] | None]:
    """Follow the run's event log until it ends or `timeout` passes: (reply, final run);
    (None, None) when the wait ends first, or when Redis stays away for long.

    No database connection is held meanwhile."""
    reply: str | None = None
    async for event in eventlog.run_follow(run_id, timeout=timeout):
        if not isinstance(event, dict):
            continue  # the stream was lost: the run is answered as it stands
        if event["type"] == eventlog.MESSAGE_COMPLETED:
            message = event["message"]
            if message.get("role") == "assistant":
                reply = message.get("content", "")
        elif event["type"] in eventlog.TERMINAL_TYPES:
            return reply or "", event["run"]
    return None, None


def _run_now(run: Run) -> dict[str, Any]:
    current = Run.objects.filter(pk=run.pk).first() or run
    _release_connections()
    return run_payload(current)


class ChatView(AsyncApiView):
    @extend_schema(
        operation_id="chat",
        summary="Chat in one call",
        description=(
            "Without `conversation_id`: a new conversation is created and its id returned. "
            "With it: the conversation continues and the model sees its whole history. "
            "Waits for the reply (200). If the run takes longer than the server's wait "
            "(PARLEY_CHAT_WAIT_SECONDS), answers 202 with the run: follow `events_url`."
        ),
        request=s.ChatIn,
        responses={200: s.ChatOut, 202: s.ChatOut},
        examples=[
            OpenApiExample("Start", value={"message": "What is 12*7?"}, request_only=True),
            OpenApiExample(
                "Continue",
                value={
                    "message": "And times 2?",
                    "conversation_id": "6f1c2a7e-3b0f-4a43-9f76-0d4a2c3e9b11",
                },
                request_only=True,
            ),
        ],
    )
    @model_work
    @idempotent
    async def post(self, request: Request) -> Response:
        conversation, run = await sync_to_async(_start)(request)
        await sync_to_async(_release_connections)()
        run_id = str(run.pk)
        reply, final = await _wait(run_id, float(settings.PARLEY_CHAT_WAIT_SECONDS))
        # Past the wait the run is answered as it is now (a worker may have taken it a
        # minute ago), not as it was when the request created it.
        payload = final or await sync_to_async(_run_now)(run)
        body = {
            "conversation_id": str(conversation.pk),
            "run_id": run_id,
            "status": payload["status"],
            "reply": reply,
            "run": payload,
            "events_url": request.build_absolute_uri(
                reverse("run-events", kwargs={"run_id": run.pk})
            ),
        }
        return Response(body, status=200 if final else 202)


class StatelessChatView(ApiView):
    # Stateless chat stores nothing, not even for a repeat: a repeat with the same
    # Idempotency-Key is refused (409) instead of answered, and the model is not called.
    idempotency_keeps_answer = False

    @extend_schema(
        operation_id="stateless_chat",
        summary="Chat without anything stored",
        description=(
            "The history travels in `state`, an opaque signed string: send the previous "
            "answer's `state` back with the next call. Leading system messages (and "
            "`system`) are sent to the model but never kept; system messages after the first "
            "other message are kept in order. A state that cannot be used (altered, not "
            "JSON, another format version, another model provider, broken messages) starts "
            "a fresh conversation and `state_reset` says why. Nothing of the answer is "
            "kept: a repeat with the same `Idempotency-Key` answers 409 "
            "`idempotency_answer_not_kept` (the model is not called again)."
        ),
        request=s.StatelessChatIn,
        responses=s.StatelessChatOut,
        examples=[
            OpenApiExample(
                "First turn",
                value={
                    "system": "You are a helpful assistant.",
                    "messages": [{"role": "user", "content": "Hello"}],
                },
                request_only=True,
            )
        ],
    )
    @model_work
    @idempotent
    def post(self, request: Request) -> Response:
        serializer = s.StatelessChatIn(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            result = stateless_chat(
                user=request.user,  # type: ignore[arg-type]
                state=data.get("state"),
                system=data.get("system", ""),
                messages=[dict(m) for m in data["messages"]],
                tools=data.get("tools"),
            )
        except ProviderError as exc:
            raise exc.for_client() from None
        body: dict[str, Any] = {
            "reply": result.reply,
            "state": result.state,
            "status": result.status,
            "draft": result.draft,
            "usage": result.usage,
            "error": result.error,
        }
        if result.state_reset:
            body["state_reset"] = {
                "reason": result.state_reset,
                "message": RESET_MESSAGES[result.state_reset],
            }
        return Response(body)
