"""The OpenAPI description of `POST conversations/import/`, which takes Parley's own
import forms or a ChatGPT export and answers a conversation or, for an export, a report."""

from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from conversations.api.serializers import ConversationOut


class ChatGPTImportErrorOut(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField(
        required=False, help_text="`problems`: each with its JSON path in the file."
    )


class ChatGPTImportResultOut(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, help_text="Its position in the file.")
    title = serializers.CharField()
    chatgpt_id = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=["imported", "failed"])
    conversation = ConversationOut(allow_null=True, help_text="The new conversation.")
    error = ChatGPTImportErrorOut(
        allow_null=True, help_text="Why it was not imported (nothing of it was stored)."
    )


class ChatGPTImportReportOut(serializers.Serializer):
    results = ChatGPTImportResultOut(many=True)
    imported = serializers.IntegerField(min_value=0)
    failed = serializers.IntegerField(min_value=0)


DESCRIPTION = (
    "The body is a JSON export (version 1 or 2), a minimal document "
    '(`{"messages": [{"role", "content", "tool_calls"?, "tool_call_id"?, "name"?}], '
    '"title"?, "system_prompt"?, "model"?, "metadata"?}`) or one line of OpenAI chat '
    "fine-tuning JSONL; what the short forms leave out (ids, order, times, the title) is "
    "generated and a leading system message becomes the system prompt. Everything is "
    "checked first; each problem is reported with its JSON path and nothing is stored. "
    "A version 2 document's `conversation` may carry `tags` (names), `pinned` and "
    "`folder` (a name or null): the tags and the folder are found among yours whatever "
    "their case, or made (a new folder last in your order), within the limits on tags "
    "and folders. Answers the new conversation.\n\n"
    "**A ChatGPT export**: the `conversations.json` of ChatGPT's data export (an array of "
    'conversations), or one conversation object of it (with a `"mapping"`). Each '
    "conversation's tree becomes branches (the first child of a node continues its "
    "branch, each further child forks a new one; the branch of `current_node` is "
    "active), custom instructions become the system prompt, and images, audio and files "
    "become placeholders such as `[image not imported: file-abc (1024\u00d7768)]`. Each "
    "conversation is checked and stored on its own, all or nothing. The answer is a "
    "report, `{results: [{index, title, chatgpt_id, status, conversation, error}], "
    "imported, failed}`, with 201 when at least one conversation was imported; when none "
    "was, 400 `invalid_import` with every problem (paths into the file, such as "
    "`$[3].mapping.<node>.message.content`) and the same `results` in `details`.\n\n"
    "**A ZIP export** (`export/?format=zip`), as the raw body with `Content-Type: "
    "application/zip` or as the multipart field `file`: `conversation.json` is imported "
    "as above, and each file its messages list in `attachments` must be in the ZIP as "
    "`files/<sha256>`, its bytes hashing to that name and of the size the document says "
    "(400 naming the entry otherwise). The files are stored as yours as uploads are (the "
    "type decided from the bytes, the size limit, your storage quota; bytes you have "
    "already are not stored twice) and the messages carry them in order. The archive is "
    "bounded before anything is unpacked: its size (413 `request_too_large` past "
    "`PARLEY_IMPORT_ZIP_MAX_BYTES`), its entry count and what it unpacks to (413). A "
    "failed import stores nothing, files included.\n\n"
    "A JSON document whose messages list `attachments` imports only when you have a file "
    "with each `sha256` already (the message is linked to it); otherwise 400 naming the "
    "missing sha256."
)

REQUEST: dict[str, Any] = {
    "application/json": {
        "oneOf": [
            {"type": "object", "additionalProperties": {}},
            {
                "type": "array",
                "items": {"type": "object", "additionalProperties": {}},
                "description": "A ChatGPT conversations.json.",
            },
        ]
    },
    "application/zip": {"type": "string", "format": "binary"},
    "multipart/form-data": {
        "type": "object",
        "properties": {"file": {"type": "string", "format": "binary"}},
        "required": ["file"],
    },
}

CREATED = PolymorphicProxySerializer(
    component_name="ImportOut",
    serializers=[ConversationOut, ChatGPTImportReportOut],
    resource_type_field_name=None,
)
