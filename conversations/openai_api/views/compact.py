"""`POST /responses/compact`: a conversation's context compacted (engine.context_compact),
answered as the specification's `response.compaction` object. Nothing is stored: its id
names no response, and the client carries the output into its next request.

The output is the user messages of the compacted history as they were (as `message`
items), then one `compaction` item holding the summary (compaction_items.py).
"""

import time
import uuid
from typing import Any, cast

from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from conversations.engine import Compacted, ProviderError, context_compact
from conversations.limits import model_work
from conversations.openai_api import ids
from conversations.openai_api.base import InputView, body_object, body_rest_check
from conversations.openai_api.compaction_items import compaction_token
from conversations.openai_api.errors import invalid
from conversations.openai_api.file_parts import inline_chars
from conversations.openai_api.files_in import files_read
from conversations.openai_api.items_in import InputMessages
from conversations.openai_api.objects import COMPLETED
from conversations.openai_api.response_params import string
from conversations.openai_api.responses_in import input_read, instructions_read, model_read
from conversations.openai_api.responses_out import usage_object
from conversations.openai_api.views.responses import response_for

ALLOWED = {"model", "input", "previous_response_id", "instructions", "prompt_cache_key"}
PROMPT_CACHE_KEY_MAX = 64
ID_MAX = 100
# The usage of a call the upstream reported nothing of: the object requires one.
_NO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0}


def _input(value: Any) -> InputMessages:
    return InputMessages() if value is None else input_read(value)


class CompactView(InputView):
    @model_work
    def post(self, request: Request) -> Response:
        body = body_object(request, allowed=ALLOWED)
        body_rest_check(request, inline_chars=inline_chars(body.get("input")))
        model = model_read(body)
        read = _input(body.get("input"))
        previous_id = string(body, "previous_response_id", most=ID_MAX)
        if not read.messages and not previous_id:
            raise invalid(
                "Give 'input', 'previous_response_id' or both: there is nothing to compact.",
                param="input",
                code="missing_required_parameter",
            )
        instructions = instructions_read(body)
        # Accepted for the client's sake: the call goes upstream as a chat completion.
        string(body, "prompt_cache_key", most=PROMPT_CACHE_KEY_MAX)
        previous = response_for(request, previous_id) if previous_id else None
        user = cast(User, request.user)
        # The files go to the model as a `store: false` response's would.
        vision = previous.conversation.vision if previous is not None else True
        messages = files_read(user=user, read=read, vision=vision)
        with read.named():
            try:
                compacted = context_compact(
                    user=user,
                    model=model,
                    previous=previous,
                    messages=messages,
                    instructions=instructions,
                )
            except ProviderError as exc:
                raise exc.for_client() from None
        return Response(_compaction_object(compacted, user_id=user.pk))


def _compaction_object(compacted: Compacted, *, user_id: Any) -> dict[str, Any]:
    kept = [
        {
            "id": ids.item_id(ids.ItemRef(ids.ItemType.MESSAGE, uuid.uuid4())),
            "type": "message",
            "status": COMPLETED,
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }
        for text in compacted.kept
    ]
    summary = {
        "id": ids.item_id(ids.ItemRef(ids.ItemType.COMPACTION, uuid.uuid4())),
        "type": "compaction",
        "encrypted_content": compaction_token(
            user_id=user_id, summary=compacted.summary, covers=compacted.covers
        ),
    }
    return {
        "id": ids.response_id(uuid.uuid4()),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*kept, summary],
        "usage": usage_object(compacted.usage or _NO_USAGE),
    }
