"""Conversations and what hangs off them: messages, context events, draft, fork,
export and import."""

import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from conversations import selectors, services
from conversations.api import import_schema
from conversations.api import serializers as s
from conversations.api.base import ApiView, idempotent, int_param, page_response
from conversations.api.errors import ApiError, problems_details
from conversations.api.throttles import ModelThrottle
from conversations.engine import run_start
from conversations.formats import chatgpt, exchange
from conversations.models import Conversation
from conversations.serializers import (
    conversation_payload,
    message_payload,
    message_row_payload,
    run_payload,
)
from conversations.validation import storable_text

CONVERSATION_EXAMPLE = OpenApiExample(
    "Create",
    value={
        "title": "Trip planning",
        "system_prompt": "You are a concise travel assistant.",
        "metadata": {"customer": "42"},
    },
    request_only=True,
)


def _conversation(request: Request, conversation_id: Any) -> Conversation:
    return selectors.conversation_get(user=request.user, conversation_id=conversation_id)  # type: ignore[arg-type]


def _archived(request: Request) -> bool | None:
    raw = request.query_params.get("archived", "false").lower()
    choices: dict[str, bool | None] = {"false": False, "true": True, "all": None}
    if raw not in choices:
        message = "must be false, true or all"
        raise ApiError(
            400,
            "invalid",
            f"Query parameter 'archived' {message}.",
            {"problems": [{"path": "$.query.archived", "message": message}]},
        )
    return choices[raw]


class ConversationListView(ApiView):
    @extend_schema(
        operation_id="conversations_list",
        summary="List your conversations",
        description="Newest activity first, cursor-paginated.",
        parameters=[
            OpenApiParameter("q", str, description="Case-insensitive title search."),
            OpenApiParameter(
                "archived", str, enum=["false", "true", "all"], description="Default false."
            ),
            OpenApiParameter("cursor", str, description="The `next` link's cursor."),
            OpenApiParameter("limit", int, description="1..200, default 50."),
        ],
        responses=s.ConversationPage,
    )
    def get(self, request: Request) -> Response:
        page = selectors.conversation_list(
            user=request.user,  # type: ignore[arg-type]
            archived=_archived(request),
            q=request.query_params.get("q", ""),
            cursor=request.query_params.get("cursor") or None,
            limit=min(int_param(request, "limit", 50, minimum=1), selectors.MAX_PAGE),
        )
        return page_response(
            request,
            [conversation_payload(c) for c in page.items],
            {"cursor": page.next_cursor} if page.next_cursor else None,
        )

    @extend_schema(
        operation_id="conversations_create",
        summary="Create a conversation",
        request=s.ConversationIn,
        responses={201: s.ConversationOut},
        examples=[CONVERSATION_EXAMPLE],
    )
    @idempotent
    def post(self, request: Request) -> Response:
        data = _valid(s.ConversationIn, request)
        conversation = services.conversation_create(owner=request.user, **data)  # type: ignore[arg-type]
        return Response(conversation_payload(conversation), status=201)


def _valid(serializer_class: type, request: Request, *, partial: bool = False) -> dict[str, Any]:
    serializer = serializer_class(data=request.data, partial=partial)
    serializer.is_valid(raise_exception=True)
    data: dict[str, Any] = dict(serializer.validated_data)
    return data


class ConversationDetailView(ApiView):
    @extend_schema(
        operation_id="conversations_read",
        summary="Read a conversation",
        responses=s.ConversationDetailOut,
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        active = selectors.run_active(conversation=conversation)
        return Response(
            {
                **conversation_payload(conversation),
                "active_run": run_payload(active) if active else None,
            }
        )

    @extend_schema(
        operation_id="conversations_update",
        summary="Change a conversation's settings",
        description="Only the fields sent change. `archived` archives or restores it.",
        request=s.ConversationUpdateIn,
        responses=s.ConversationOut,
    )
    def patch(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        data = _valid(s.ConversationUpdateIn, request, partial=True)
        conversation = services.conversation_update(conversation=conversation, **data)
        return Response(conversation_payload(conversation))

    @extend_schema(
        operation_id="conversations_delete",
        summary="Delete a conversation and all its messages",
        responses={204: None},
    )
    def delete(self, request: Request, conversation_id: str) -> Response:
        services.conversation_delete(conversation=_conversation(request, conversation_id))
        return Response(status=204)


class MessageListView(ApiView):
    def get_throttles(self) -> list[BaseThrottle]:
        throttles = super().get_throttles()
        return [*throttles, ModelThrottle()] if self.request.method == "POST" else throttles

    @extend_schema(
        operation_id="messages_list",
        summary="Read messages in order",
        description="Messages with seq > `after`; the `next` link continues after the last "
        "one returned, so pages never shift while messages are added.",
        parameters=[
            OpenApiParameter("after", int, description="A seq; default 0 (from the start)."),
            OpenApiParameter("limit", int, description="1..200, default 50."),
        ],
        responses=s.MessagePage,
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        limit = min(int_param(request, "limit", 50, minimum=1), selectors.MAX_PAGE)
        page = selectors.message_rows_page(
            conversation=conversation, after=int_param(request, "after", 0), limit=limit
        )
        return page_response(
            request,
            [message_row_payload(row) for row in page.items],
            {"after": page.next_cursor, "limit": limit} if page.next_cursor else None,
        )

    @extend_schema(
        operation_id="messages_create",
        summary="Send a message (starts a run)",
        description="Stores the message and a queued run, then answers at once; follow the "
        "reply at `runs/{id}/events/`. 409 while another run of the conversation is active.",
        request=s.MessageIn,
        responses={202: s.MessageCreatedOut},
        examples=[OpenApiExample("Ask", value={"content": "What is 12*7?"}, request_only=True)],
    )
    @idempotent
    def post(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        data = _valid(s.MessageIn, request)
        message, run = run_start(
            conversation=conversation,
            content=data["content"],
            client_id=data.get("client_id", ""),
        )
        return Response({"message": message_payload(message), "run": run_payload(run)}, 202)


class ContextEventView(ApiView):
    @extend_schema(
        operation_id="context_events_create",
        summary="Add a context event",
        description="A system message stored in order (the model sees it next turn); "
        "starts no run.",
        request=s.ContentIn,
        responses={201: s.MessageOut},
        examples=[
            OpenApiExample(
                "Check-in", value={"content": "User checked in at the hotel."}, request_only=True
            )
        ],
    )
    @idempotent
    def post(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        data = _valid(s.ContentIn, request)
        event = services.context_event_add(conversation=conversation, content=data["content"])
        return Response(message_payload(event), status=201)


class DraftView(ApiView):
    @extend_schema(
        operation_id="draft_update",
        summary="Replace the draft",
        description="A changed draft makes the next turn tell the model what the user "
        "changed; saving the same text changes nothing.",
        request=s.DraftIn,
        responses=s.DraftOut,
    )
    def put(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        data = _valid(s.DraftIn, request)
        changed = services.conversation_draft_update(conversation=conversation, draft=data["draft"])
        return Response(
            {
                "draft": conversation.draft,
                "draft_edited": conversation.draft_edited,
                "changed": changed,
            }
        )


class ForkView(ApiView):
    @extend_schema(
        operation_id="conversations_fork",
        summary="Fork a conversation",
        description="A new conversation with copies of messages 1..at_seq.",
        request=s.ForkIn,
        responses={201: s.ConversationOut},
    )
    @idempotent
    def post(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        data = _valid(s.ForkIn, request)
        fork = services.conversation_fork(conversation=conversation, at_seq=data["at_seq"])
        return Response(conversation_payload(fork), status=201)


EXPORTS = {
    "json": ("application/json", "json"),
    "markdown": ("text/markdown; charset=utf-8", "md"),
    "jsonl": ("application/jsonl", "jsonl"),
}


def _export_chunks(conversation: Conversation, format: str) -> Iterator[str]:
    if format == "json":
        chunks = exchange.export_json_chunks(conversation)
    elif format == "markdown":
        chunks = exchange.export_markdown_chunks(conversation)
    else:
        chunks = exchange.export_jsonl_lines([conversation])
    # A download must not break off because a stored text is not valid text.
    return map(storable_text, chunks)


async def _in_batches(chunks: Iterator[str], size: int = 100) -> AsyncIterator[str]:
    """A sync chunk iterator served asynchronously: under ASGI Django would otherwise read
    a sync iterator to its end into memory before sending anything."""

    def take() -> list[str]:
        return list(itertools.islice(chunks, size))

    while batch := await sync_to_async(take)():
        for chunk in batch:
            yield chunk


class ExportView(ApiView):
    @extend_schema(
        operation_id="conversations_export",
        summary="Download a conversation",
        description="`json`: the lossless export (version 1), importable; `markdown`: for "
        "people; `jsonl`: one line in OpenAI's chat fine-tuning format. Streamed.",
        parameters=[OpenApiParameter("format", str, enum=list(EXPORTS), description="json")],
        responses={
            (200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT),
            (200, "text/markdown"): OpenApiResponse(OpenApiTypes.STR),
            (200, "application/jsonl"): OpenApiResponse(OpenApiTypes.STR),
        },
    )
    def get(self, request: Request, conversation_id: str) -> StreamingHttpResponse:
        conversation = _conversation(request, conversation_id)
        format = request.query_params.get("format", "json")
        if format not in EXPORTS:
            message = "must be json, markdown or jsonl"
            raise ApiError(
                400,
                "invalid",
                f"Query parameter 'format' {message}.",
                {"problems": [{"path": "$.query.format", "message": message}]},
            )
        content_type, extension = EXPORTS[format]
        chunks = _export_chunks(conversation, format)
        streamed = _in_batches(chunks) if isinstance(request._request, ASGIRequest) else chunks
        response = StreamingHttpResponse(streamed, content_type=content_type)
        response["Content-Disposition"] = (
            f'attachment; filename="conversation-{conversation.pk}.{extension}"'
        )
        return response


class ImportView(ApiView):
    def body_limit(self) -> int:
        limit: int = settings.PARLEY_IMPORT_MAX_BYTES
        return limit

    @extend_schema(
        operation_id="conversations_import",
        summary="Import a conversation (or a ChatGPT export)",
        description=import_schema.DESCRIPTION,
        request=import_schema.REQUEST,
        responses={201: import_schema.CREATED},
    )
    @idempotent
    def post(self, request: Request) -> Response:
        owner = request.user
        if chatgpt.chatgpt_export_detect(request.body):
            report = services.conversations_import_chatgpt(owner=owner, document=request.body)  # type: ignore[arg-type]
            if not report.imported:
                details = {**problems_details(report.problems()), **report.payload()}
                raise ApiError(400, "invalid_import", report.summary(), details)
            return Response(report.payload(), status=201)
        conversation = services.conversation_import(owner=owner, document=request.body)  # type: ignore[arg-type]
        return Response(conversation_payload(conversation), status=201)
