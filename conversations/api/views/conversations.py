"""Conversations and what hangs off them: messages, context events, draft and fork
(branches are in branches.py, export in exports.py, import in imports.py)."""

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from conversations import selectors, services
from conversations.api import serializers as s
from conversations.api.base import (
    ApiView,
    choice_param,
    idempotent,
    int_param,
    page_response,
    query_param_invalid,
)
from conversations.api.base import conversation_for as _conversation
from conversations.api.base import valid_body as _valid
from conversations.api.views.branches import message_out
from conversations.engine import run_start
from conversations.limits import model_work
from conversations.serializers import (
    conversation_payload,
    message_payload,
    message_row_payload,
    run_payload,
)

CONVERSATION_EXAMPLE = OpenApiExample(
    "Create",
    value={
        "title": "Trip planning",
        "system_prompt": "You are a concise travel assistant.",
        "metadata": {"customer": "42"},
    },
    request_only=True,
)


def _archived(request: Request) -> bool | None:
    choices: dict[str, bool | None] = {"false": False, "true": True, "all": None}
    raw = request.query_params.get("archived", "false").lower()
    if raw not in choices:
        raise query_param_invalid("archived", "must be false, true or all")
    return choices[raw]


def _pinned(request: Request) -> bool | None:
    raw = request.query_params.get("pinned")
    if raw is None:
        return None
    return choice_param(request, "pinned", ["true", "false"], "") == "true"


class ConversationListView(ApiView):
    @extend_schema(
        operation_id="conversations_list",
        summary="List your conversations",
        description="Pinned ones first, then newest activity first, cursor-paginated.",
        parameters=[
            OpenApiParameter(
                "q",
                str,
                description='Case-insensitive title search; `tag:name` or `tag:"two words"` '
                "in it keeps the conversations under that tag.",
            ),
            OpenApiParameter(
                "archived", str, enum=["false", "true", "all"], description="Default false."
            ),
            OpenApiParameter("tag", str, description="Under this tag (any case)."),
            OpenApiParameter(
                "folder",
                OpenApiTypes.UUID,
                description="In this folder of yours; another's or an unknown id is a 404.",
            ),
            OpenApiParameter(
                "pinned", str, enum=["true", "false"], description="Only pinned ones, or none."
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
            tags=[name for name in request.query_params.getlist("tag") if name.strip()],
            folder_id=request.query_params.get("folder") or None,
            pinned=_pinned(request),
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
        description="Only the fields sent change, all or nothing. `archived` archives or "
        "restores it; `active_branch_id` shows another branch (409 while a reply is being "
        "generated); `pinned`, `folder_id` and `tags` (the whole list) organise it.",
        request=s.ConversationUpdateIn,
        responses=s.ConversationOut,
        examples=[
            OpenApiExample("Rename", value={"title": "Trip to Lisbon"}, request_only=True),
            OpenApiExample(
                "Organise", value={"pinned": True, "tags": ["travel", "2026"]}, request_only=True
            ),
            OpenApiExample(
                "Switch branch",
                value={"active_branch_id": "0b7f3c1e-5d2a-4e8b-9c6f-1a2b3c4d5e6f"},
                request_only=True,
            ),
        ],
    )
    def patch(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        data = _valid(s.ConversationUpdateIn, request, partial=True)
        branch_id = data.pop("active_branch_id", None)
        # All or nothing: a refused switch (404, 409) leaves the other fields unchanged.
        with transaction.atomic():
            if branch_id is not None:
                services.branch_switch(conversation=conversation, branch_id=branch_id)
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
    @extend_schema(
        operation_id="messages_list",
        summary="Read messages in order",
        description="The messages of a branch's path (the active branch's by default) with "
        "seq > `after`; the `next` link continues after the last one returned, so pages "
        "never shift while messages are added. Each message says where other versions of "
        "it exist (`alternatives`).",
        parameters=[
            OpenApiParameter("after", int, description="A seq; default 0 (from the start)."),
            OpenApiParameter("limit", int, description="1..200, default 50."),
            OpenApiParameter(
                "branch_id",
                OpenApiTypes.UUID,
                description="Whose path to read (one of `branches/`); default the active "
                "branch. An unknown id is a 404.",
            ),
        ],
        responses=s.MessagePage,
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        limit = min(int_param(request, "limit", 50, minimum=1), selectors.MAX_PAGE)
        branch = selectors.branch_get(
            conversation=conversation, branch_id=request.query_params.get("branch_id") or None
        )
        page = selectors.message_rows_page(
            conversation=conversation,
            after=int_param(request, "after", 0),
            limit=limit,
            branch=branch,
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
        "reply at `runs/{id}/events/`. 409 while another run of the conversation is active. "
        "With `branch_id` the message goes on that branch, which becomes active.",
        request=s.MessageCreateIn,
        responses={202: s.MessageCreatedOut},
        examples=[
            OpenApiExample("Ask", value={"content": "What is 12*7?"}, request_only=True),
            OpenApiExample(
                "On a branch",
                value={
                    "content": "And in French?",
                    "branch_id": "0b7f3c1e-5d2a-4e8b-9c6f-1a2b3c4d5e6f",
                },
                request_only=True,
            ),
        ],
    )
    @model_work
    @idempotent
    def post(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        data = _valid(s.MessageCreateIn, request)
        message, run = run_start(
            conversation=conversation,
            content=data["content"],
            client_id=data.get("client_id", ""),
            branch_id=data.get("branch_id"),
            attachments=data.get("attachments"),
        )
        shown = message_out(conversation, message, with_files=bool(data.get("attachments")))
        return Response({"message": shown, "run": run_payload(run)}, 202)


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
        description="A new conversation with copies of messages 1..at_seq of a branch's "
        "path (the active branch's by default).",
        request=s.ForkIn,
        responses={201: s.ConversationOut},
        examples=[
            OpenApiExample(
                "From a branch",
                value={"at_seq": 4, "branch_id": "0b7f3c1e-5d2a-4e8b-9c6f-1a2b3c4d5e6f"},
                request_only=True,
            )
        ],
    )
    @idempotent
    def post(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        data = _valid(s.ForkIn, request)
        fork = services.conversation_fork(
            conversation=conversation, at_seq=data["at_seq"], branch_id=data.get("branch_id")
        )
        return Response(conversation_payload(fork), status=201)
