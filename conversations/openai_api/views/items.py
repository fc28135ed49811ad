"""A conversation's items: add (up to 20, all or nothing), list, retrieve, delete."""

from typing import cast

from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from conversations import selectors, services
from conversations.openai_api.base import (
    InputView,
    OpenAIView,
    body_object,
    body_rest_check,
    choice_param,
    conversation_for,
    limit_param,
)
from conversations.openai_api.errors import invalid
from conversations.openai_api.file_parts import inline_chars
from conversations.openai_api.files_in import files_stored
from conversations.openai_api.items_in import new_messages, replacement_for
from conversations.openai_api.objects import (
    conversation_object,
    item_list,
    message_items,
    rows_with_files,
)
from conversations.openai_api.paging import item_find, items_page

# `include` asks for parts of items Parley does not store (search sources, logprobs,
# image urls...): accepted and ignored, so a client that always sends it still works.


class ItemsView(InputView):
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = conversation_for(request, conversation_id)
        items, has_more = items_page(
            conversation=conversation,
            after=request.query_params.get("after") or None,
            limit=limit_param(request, default=20, maximum=100),
            order=choice_param(request, "order", choices=("asc", "desc"), default="desc"),
        )
        return Response(item_list(items, has_more=has_more))

    def post(self, request: Request, conversation_id: str) -> Response:
        conversation = conversation_for(request, conversation_id)
        body = body_object(request, allowed={"items"})
        body_rest_check(request, inline_chars=inline_chars(body.get("items")))
        if "items" not in body:
            raise invalid(
                "Missing required parameter: 'items'.",
                param="items",
                code="missing_required_parameter",
            )
        read = new_messages(body["items"], at_least=1)
        user = cast(User, request.user)
        with files_stored(user=user, read=read) as messages, read.named():
            rows = services.message_batch_append(conversation=conversation, messages=messages)
        shown = rows_with_files([selectors.message_row(row) for row in rows])
        owner = conversation.owner_id
        items = [item for row in shown for item in message_items(row, owner_id=owner)]
        return Response(item_list(items, has_more=False))


class ItemView(OpenAIView):
    def get(self, request: Request, conversation_id: str, item_id: str) -> Response:
        conversation = conversation_for(request, conversation_id)
        return Response(item_find(conversation=conversation, raw_id=item_id).item.body)

    def delete(self, request: Request, conversation_id: str, item_id: str) -> Response:
        """Takes the item out of the active path (see services.message_replace: the path
        is forked without it, and the items after it are copies with new ids)."""
        conversation = conversation_for(request, conversation_id)
        found = item_find(conversation=conversation, raw_id=item_id)
        services.message_replace(
            conversation=conversation,
            message=found.message,
            replacement=replacement_for(found.message, found.item.ref),
        )
        return Response(conversation_object(conversation))
