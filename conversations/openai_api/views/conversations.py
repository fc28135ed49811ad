"""Conversations: create (with initial items), retrieve, update metadata, delete."""

from typing import Any, cast

from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from conversations import services, validation
from conversations.openai_api.base import (
    InputView,
    OpenAIView,
    body_object,
    body_rest_check,
    conversation_for,
)
from conversations.openai_api.errors import invalid, param_of
from conversations.openai_api.file_parts import inline_chars
from conversations.openai_api.files_in import files_stored
from conversations.openai_api.items_in import new_messages
from conversations.openai_api.objects import conversation_deleted, conversation_object
from conversations.validation import type_name


def _metadata(value: Any) -> dict[str, str]:
    """OpenAI's metadata: up to 16 string values under keys of up to 64 characters (the
    rule Parley's own metadata keeps); null means none."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(
            f"Invalid type for 'metadata': expected an object, but got {type_name(value)}.",
            param="metadata",
            code="invalid_type",
        )
    problems = validation.metadata_problems(value, path="metadata")
    if problems:
        first = problems[0]
        raise invalid(f"Invalid '{param_of(first.path)}': {first.message}.", param=first.path)
    return value


class ConversationsView(InputView):
    def post(self, request: Request) -> Response:
        body = body_object(request, allowed={"metadata", "items"})
        body_rest_check(request, inline_chars=inline_chars(body.get("items")))
        metadata = _metadata(body.get("metadata"))
        read = new_messages(body.get("items"))
        user = cast(User, request.user)
        with files_stored(user=user, read=read) as messages, read.named():
            conversation, _ = services.conversation_create_with_messages(
                owner=user,
                metadata=metadata,
                messages=messages,
            )
        return Response(conversation_object(conversation))


class ConversationView(OpenAIView):
    def get(self, request: Request, conversation_id: str) -> Response:
        return Response(conversation_object(conversation_for(request, conversation_id)))

    def post(self, request: Request, conversation_id: str) -> Response:
        conversation = conversation_for(request, conversation_id)
        body = body_object(request, allowed={"metadata"})
        if "metadata" not in body:
            raise invalid(
                "Missing required parameter: 'metadata'.",
                param="metadata",
                code="missing_required_parameter",
            )
        # Replaced as a whole, as OpenAI does: keys left out are dropped.
        conversation = services.conversation_update(
            conversation=conversation, metadata=_metadata(body["metadata"])
        )
        return Response(conversation_object(conversation))

    def delete(self, request: Request, conversation_id: str) -> Response:
        conversation = conversation_for(request, conversation_id)
        key = conversation.pk
        services.conversation_delete(conversation=conversation)
        return Response(conversation_deleted(key))
