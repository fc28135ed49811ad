"""Branches: regenerate a reply, edit a user message (each a new branch and a run answering
on it) and list a conversation's branches. Switching is `PATCH conversations/{id}/`
(`active_branch_id`); reading a branch's path is `messages/?branch_id=`."""

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from conversations import selectors
from conversations.api import serializers as s
from conversations.api.base import (
    ApiView,
    conversation_for,
    idempotent,
    int_param,
    page_response,
    valid_body,
)
from conversations.engine import message_edit, reply_regenerate
from conversations.limits import model_work
from conversations.models import Branch, Conversation, Message, Run
from conversations.serializers import branch_payload, message_payload, run_payload

MESSAGE_ID = OpenApiParameter(
    "message_id",
    str,
    OpenApiParameter.PATH,
    description="A message of this conversation, on any branch (a UUID).",
)
ROOT_ID, NEW_ID = "9fd4761e-8ccc-4846-8ffe-57f86f799da1", "bdaec2f7-4712-46ac-8565-2abffc7c2e38"
NEW_BRANCH = {
    "id": NEW_ID,
    "parent_id": ROOT_ID,
    "fork_seq": 3,
    "created_at": "2026-05-04T09:30:00.123456+00:00",
    "message_count": 3,
}
# The answers' shapes at a glance (the run's other fields as in `runs/{id}/`).
REGENERATED_EXAMPLE = OpenApiExample(
    "Regenerated",
    value={
        "branch": NEW_BRANCH,
        "message": None,
        "run": {
            "id": "5c0e6a4e-2f0b-4a57-9e43-7d2d8f1b6a10",
            "branch_id": NEW_ID,
            "status": "queued",
        },
    },
    response_only=True,
    status_codes=["202"],
)
EDITED_EXAMPLE = OpenApiExample(
    "Edited",
    value={
        "branch": {**NEW_BRANCH, "fork_seq": 2},
        "message": {
            "id": "e8f56f10-6784-4522-8a3f-d97a4435c5f6",
            "branch_id": NEW_ID,
            "seq": 3,
            "role": "user",
            "content": "What is 12*8?",
            "alternatives": {"index": 1, "count": 2, "branch_ids": [ROOT_ID, NEW_ID]},
        },
        "run": {
            "id": "5c0e6a4e-2f0b-4a57-9e43-7d2d8f1b6a10",
            "branch_id": NEW_ID,
            "status": "queued",
        },
    },
    response_only=True,
    status_codes=["202"],
)
STARTED_DESCRIPTION = (
    " The new branch becomes active; the old messages stay, unchanged, on their branch, "
    "and each version lists the others in its `alternatives`. Follow the reply at "
    "`runs/{id}/events/`. 409 while another run of the conversation is active (nothing is "
    "stored); `client_id` or `Idempotency-Key` make a repeat answer the first run."
)


def _branch_row(branch: Branch) -> dict[str, Any]:
    return {
        "id": branch.pk,
        "parent_id": branch.parent_id,
        "fork_seq": branch.fork_seq,
        "created_at": branch.created_at,
        "message_count": branch.message_count,
    }


def message_out(
    conversation: Conversation,
    message: Message,
    *,
    branch: Branch | None = None,
    with_files: bool = False,
) -> dict[str, Any]:
    """A message just stored, with the versions it sits among (`alternatives`). A
    conversation of one branch has none, which costs no query. `with_files`: the request
    attached files, so they are read (a message sent without any has none)."""
    files = (
        selectors.attachment_payloads(message_ids=[message.pk]).get(message.pk, [])
        if with_files
        else []
    )
    if conversation.branch_count <= 1:
        return message_payload(message, attachments=files)
    if branch is None:
        branch = selectors.branch_get(conversation=conversation, branch_id=message.branch_id)
    choices = selectors.alternatives_at(
        branch, [message.seq], branch_count=conversation.branch_count
    )
    return message_payload(message, alternatives=choices.get(message.seq), attachments=files)


def _started(
    conversation: Conversation,
    branch: Branch,
    run: Run,
    message: Message | None = None,
    *,
    with_files: bool = False,
) -> Response:
    """202 `{branch, message, run}`; the message with the versions it now sits among."""
    shown = (
        None
        if message is None
        else message_out(conversation, message, branch=branch, with_files=with_files)
    )
    return Response(
        {"branch": branch_payload(_branch_row(branch)), "message": shown, "run": run_payload(run)},
        status=202,
    )


class RegenerateView(ApiView):
    @extend_schema(
        operation_id="messages_regenerate",
        summary="Regenerate an assistant reply (starts a run on a new branch)",
        description="Answers again the user message that produced this reply, on a new "
        "branch forked right after that message. Only an assistant reply can be "
        "regenerated (400 otherwise)." + STARTED_DESCRIPTION,
        parameters=[MESSAGE_ID],
        request=s.RegenerateIn,
        responses={202: s.BranchStartedOut},
        examples=[
            OpenApiExample("Regenerate", value={}, request_only=True),
            OpenApiExample("With a client id", value={"client_id": "r-42"}, request_only=True),
            REGENERATED_EXAMPLE,
        ],
    )
    @model_work
    @idempotent
    def post(self, request: Request, conversation_id: str, message_id: str) -> Response:
        conversation = conversation_for(request, conversation_id)
        data = valid_body(s.RegenerateIn, request)
        branch, run = reply_regenerate(
            conversation=conversation,
            message_id=message_id,
            client_id=data.get("client_id", ""),
        )
        return _started(conversation, branch, run)


class EditView(ApiView):
    @extend_schema(
        operation_id="messages_edit",
        summary="Edit a user message (starts a run on a new branch)",
        description="Asks again with new text: a new branch forks just before this message, "
        "the edited text is its first message (checked like any message: same limits, same "
        "errors) and a run answers it. Only a user message can be edited (400 otherwise)."
        + STARTED_DESCRIPTION,
        parameters=[MESSAGE_ID],
        request=s.MessageIn,
        responses={202: s.BranchStartedOut},
        examples=[
            OpenApiExample(
                "Edit",
                value={"content": "What is 12*8?", "client_id": "e-7"},
                request_only=True,
            ),
            EDITED_EXAMPLE,
        ],
    )
    @model_work
    @idempotent
    def post(self, request: Request, conversation_id: str, message_id: str) -> Response:
        conversation = conversation_for(request, conversation_id)
        data = valid_body(s.MessageIn, request)
        branch, message, run = message_edit(
            conversation=conversation,
            message_id=message_id,
            content=data["content"],
            client_id=data.get("client_id", ""),
            attachments=data.get("attachments"),
        )
        return _started(
            conversation, branch, run, message, with_files=bool(data.get("attachments"))
        )


class BranchListView(ApiView):
    @extend_schema(
        operation_id="branches_list",
        summary="List a conversation's branches",
        description="The root branch first, then the others oldest first, cursor-paginated. "
        "`message_count` is the length of the branch's path (its shared messages "
        "included); `fork_seq` is where it leaves its parent's path. Read a branch's "
        "messages with `messages/?branch_id=`, show it with `PATCH` `active_branch_id`.",
        parameters=[
            OpenApiParameter("cursor", str, description="The `next` link's cursor."),
            OpenApiParameter("limit", int, description="1..200, default 50."),
        ],
        responses=s.BranchPage,
        examples=[
            OpenApiExample(
                "Two branches",
                value={
                    "results": [
                        {
                            "id": ROOT_ID,
                            "parent_id": None,
                            "fork_seq": 0,
                            "created_at": "2026-05-04T09:00:00.000001+00:00",
                            "message_count": 4,
                        },
                        NEW_BRANCH,
                    ],
                    "next": None,
                },
                response_only=True,
            )
        ],
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = conversation_for(request, conversation_id)
        page = selectors.branch_page(
            conversation=conversation,
            cursor=request.query_params.get("cursor") or None,
            limit=min(int_param(request, "limit", 50, minimum=1), selectors.MAX_PAGE),
        )
        return page_response(
            request,
            [branch_payload(row) for row in page.items],
            {"cursor": page.next_cursor} if page.next_cursor else None,
        )
