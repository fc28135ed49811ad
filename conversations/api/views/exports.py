"""`GET conversations/{id}/export/`: one conversation as a streamed download, in JSON
(version 2 with every branch, or 1), Markdown, JSONL, or a ZIP of the JSON and the bytes
of the files its messages carry."""

import itertools
from collections.abc import AsyncIterator, Iterator
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request

from conversations.api.base import ApiView, choice_param, query_param_invalid
from conversations.api.base import conversation_for as _conversation
from conversations.formats import bundles, exporting
from conversations.models import Conversation
from conversations.validation import storable_text

EXPORTS = {
    "json": ("application/json", "json"),
    "markdown": ("text/markdown; charset=utf-8", "md"),
    "jsonl": ("application/jsonl", "jsonl"),
    "zip": ("application/zip", "zip"),
}
# A batch of ZIP chunks (each about 64 KiB) taken at once under ASGI: a few, as file
# bytes fill every chunk.
ZIP_BATCH = 4

Chunk = TypeVar("Chunk", str, bytes)


EXPORT_VERSIONS = {"1": 1, "2": 2}


def _zip_chunks(conversation: Conversation, version: str) -> Iterator[bytes]:
    if version == "1":
        raise query_param_invalid(
            "version", "must be 2 with format=zip (version 1 documents carry no files)"
        )
    # A download failing part way ends there: a ZIP cut short is unreadable, which says so.
    return exporting.chunks_ended_cleanly(bundles.bundle_chunks(conversation))


def _export_chunks(conversation: Conversation, format: str, version: int) -> Iterator[str]:
    notice = ""
    if format == "json":
        chunks = exporting.export_json_chunks(conversation, version=version)
    elif format == "markdown":
        chunks = exporting.export_markdown_chunks(conversation)
        notice = exporting.MARKDOWN_CUT
    else:
        chunks = exporting.export_jsonl_lines([conversation])
    # A download must not break off because a stored text is not valid text, and one
    # that fails part way ends, saying so where the format can.
    return exporting.chunks_ended_cleanly(map(storable_text, chunks), notice=notice)


async def _in_batches(chunks: Iterator[Chunk], size: int = 100) -> AsyncIterator[Chunk]:
    """A sync chunk iterator served asynchronously: under ASGI Django would otherwise read
    a sync iterator to its end into memory before sending anything."""

    def take() -> list[Chunk]:
        return list(itertools.islice(chunks, size))

    while batch := await sync_to_async(take)():
        for chunk in batch:
            yield chunk


class ExportView(ApiView):
    @extend_schema(
        operation_id="conversations_export",
        summary="Download a conversation",
        description="`json`: the lossless export, importable: version 2 by default (every "
        "branch, each message's branch, the active branch, the tags, pin and folder by "
        "name), or with `version=1` the active "
        "branch's path alone as a version 1 document; `markdown`: for people (the active "
        "path, other versions noted where they branch off, files as links to their "
        "`content`); `jsonl`: one line in OpenAI's chat fine-tuning format (the active "
        "path); `zip`: `conversation.json` (the version 2 document, whose messages list "
        "their `attachments` with each file's `sha256`) and `files/<sha256>`, the bytes of "
        "each distinct file the messages carry, which `POST conversations/import/` takes "
        "back. Streamed.",
        parameters=[
            OpenApiParameter("format", str, enum=list(EXPORTS), description="Default json."),
            OpenApiParameter(
                "version",
                str,
                enum=list(EXPORT_VERSIONS),
                description="The JSON document's version (json only; a zip holds version "
                "2): default 2.",
            ),
        ],
        responses={
            (200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT),
            (200, "text/markdown"): OpenApiResponse(OpenApiTypes.STR),
            (200, "application/jsonl"): OpenApiResponse(OpenApiTypes.STR),
            (200, "application/zip"): OpenApiResponse(OpenApiTypes.BINARY),
        },
    )
    def get(self, request: Request, conversation_id: str) -> StreamingHttpResponse:
        conversation = _conversation(request, conversation_id)
        format = choice_param(request, "format", list(EXPORTS), "json")
        version = choice_param(request, "version", list(EXPORT_VERSIONS), "2")
        content_type, extension = EXPORTS[format]
        asgi = isinstance(request._request, ASGIRequest)
        streamed: Iterator[str] | Iterator[bytes] | AsyncIterator[str] | AsyncIterator[bytes]
        if format == "zip":
            archive = _zip_chunks(conversation, version)
            streamed = _in_batches(archive, ZIP_BATCH) if asgi else archive
        else:
            chunks = _export_chunks(conversation, format, EXPORT_VERSIONS[version])
            streamed = _in_batches(chunks) if asgi else chunks
        response = StreamingHttpResponse(streamed, content_type=content_type)
        response["Content-Disposition"] = (
            f'attachment; filename="conversation-{conversation.pk}.{extension}"'
        )
        return response
