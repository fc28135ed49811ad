"""Responses: create, retrieve (or stream again from any point), cancel, delete, and the
items a response took as input. A response is a Parley run (engine.response_start)."""

import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.http import StreamingHttpResponse
from rest_framework.request import Request
from rest_framework.response import Response

from config.async_db import db_call
from conversations import selectors, services
from conversations.engine import eventlog, response_start, response_unstored, run_cancel
from conversations.errors import EVENTS_EXPIRED, NotFound
from conversations.models import Run
from conversations.openai_api import ids
from conversations.openai_api.base import (
    OpenAIView,
    body_object,
    choice_param,
    conversation_for,
    limit_param,
)
from conversations.openai_api.errors import OpenAIError, invalid, quoted
from conversations.openai_api.responses_in import ALLOWED, response_request
from conversations.openai_api.responses_out import input_items, response_head, response_object
from conversations.openai_api.stream import ResponseEvents, openai_events, sse_frame
from conversations.throttles import ModelThrottle, UserThrottle

# How long a stream may stay silent (a queued run, a slow model, a long tool) before a
# comment line goes out: idle proxies close connections that send nothing, and SSE
# readers, the SDK's among them, skip comments.
KEEP_ALIVE_SECONDS = 15.0
KEEP_ALIVE = ": keep-alive\n\n"


def response_for(request: Request, raw_id: str) -> Run:
    """The requesting user's response: 404 for unknown, malformed and others' ids alike."""
    key = ids.response_key(raw_id)
    try:
        if key is None:
            raise Run.DoesNotExist
        return selectors.run_get_for_user(user=request.user, run_id=key)  # type: ignore[arg-type]
    except Run.DoesNotExist:
        raise NotFound(f"Response with id '{quoted(raw_id)}' not found.") from None


def _release_connections() -> None:
    """A request waiting on a run holds no database connection (inside a transaction, as
    in some tests, there is nothing to give back)."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()


def _sse(frames: Iterable[str] | AsyncIterator[str]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(frames, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _follow(request: Request, run: Run, *, after: int | None) -> StreamingHttpResponse:
    """The run's OpenAI events past `after`, replayed from its log, then live until the
    run ends. Under ASGI an async stream (no thread held while it waits); under WSGI a
    plain one."""
    head = response_head(run)
    run_id = str(run.pk)
    _release_connections()
    if isinstance(request._request, ASGIRequest):
        return _sse(_follow_async(head, run_id, after))
    return _sse(_follow_sync(head, run_id, after))


async def _follow_async(head: dict[str, Any], run_id: str, after: int | None) -> AsyncIterator[str]:
    translator = ResponseEvents(head=head)
    source = eventlog.with_heartbeats(eventlog.events_follow(run_id), KEEP_ALIVE_SECONDS)
    sent = time.monotonic()
    async with contextlib.aclosing(source) as events:
        async for event in events:
            if event is None:
                # A run deleted behind the services' back writes no end to its log:
                # the stream ends rather than keeping a dead run alive forever.
                if not await db_call(selectors.run_exists)(run_id=run_id):
                    return
                frames = [KEEP_ALIVE]
            else:
                frames = [sse_frame(out) for out in _past(translator.feed(event), after)]
            # Events with no OpenAI counterpart (a reasoning model's thoughts) or
            # replayed below `after` send nothing: the connection still needs a sign.
            if not frames and time.monotonic() - sent >= KEEP_ALIVE_SECONDS:
                frames = [KEEP_ALIVE]
            for frame in frames:
                yield frame
            if frames:
                sent = time.monotonic()


def _follow_sync(head: dict[str, Any], run_id: str, after: int | None) -> Iterator[str]:
    """`_follow_async` without an event loop: the log is read in spells of
    KEEP_ALIVE_SECONDS, each going on from the last event read."""
    translator = ResponseEvents(head=head)
    position: int | None = None  # the log's own numbering, not the OpenAI events'
    while True:
        heard = sent = False
        for event in eventlog.events_read(run_id, after=position, timeout=KEEP_ALIVE_SECONDS):
            heard = True
            position = event["sequence_number"]
            for out in _past(translator.feed(event), after):
                sent = True
                yield sse_frame(out)
            if event["type"] in eventlog.TERMINAL_TYPES:
                return
        if not heard and not selectors.run_exists(run_id=run_id):
            return  # deleted without an end to its log, as in _follow_async
        if not sent:
            yield KEEP_ALIVE


def _past(events: list[dict[str, Any]], after: int | None) -> list[dict[str, Any]]:
    return [out for out in events if after is None or out["sequence_number"] > after]


def _wait(run: Run) -> dict[str, Any]:
    """The response once its run has ended (or as it stands after the server's wait)."""
    _release_connections()
    for event in eventlog.events_read(str(run.pk), timeout=settings.PARLEY_CHAT_WAIT_SECONDS):
        if event["type"] in eventlog.TERMINAL_TYPES:
            break
    return response_object(Run.objects.select_related("trigger_message").get(pk=run.pk))


class ResponsesView(OpenAIView):
    throttle_classes = [UserThrottle, ModelThrottle]

    def post(self, request: Request) -> Any:
        parsed = response_request(body_object(request, allowed=ALLOWED))
        conversation = previous = None
        if parsed.conversation is not None:
            conversation = conversation_for(request, parsed.conversation)
        if parsed.previous_response_id is not None:
            previous = response_for(request, parsed.previous_response_id)
        user = request.user
        if not parsed.store:
            run, events = response_unstored(
                user=user,  # type: ignore[arg-type]
                ask=parsed.ask,
                conversation=conversation,
                previous=previous,
            )
            out = list(openai_events(response_head(run), events))
            if parsed.stream:
                return _sse(sse_frame(event) for event in out)
            return Response(out[-1]["response"])
        run = response_start(
            user=user,  # type: ignore[arg-type]
            ask=parsed.ask,
            conversation=conversation,
            previous=previous,
        )
        if parsed.stream:
            return _follow(request, run, after=None)
        if parsed.background:
            return Response(response_object(run))
        return Response(_wait(run))


class ResponseView(OpenAIView):
    def get(self, request: Request, response_id: str) -> Any:
        run = response_for(request, response_id)
        stream = choice_param(request, "stream", choices=("true", "false"), default="false")
        if stream == "false":
            return Response(response_object(run))
        raw = request.query_params.get("starting_after") or ""
        if raw and not raw.isdigit():
            raise invalid(
                f"Invalid 'starting_after': expected a sequence number, got {quoted(raw)!r}.",
                param="starting_after",
            )
        if not run.is_active and not eventlog.event_log_exists(run.pk):
            raise OpenAIError(
                EVENTS_EXPIRED,
                "This response's stream has expired; retrieve it without 'stream'.",
                param="stream",
            )
        return _follow(request, run, after=int(raw) if raw else None)

    def delete(self, request: Request, response_id: str) -> Response:
        run = response_for(request, response_id)
        services.response_delete(run=run)
        return Response({"id": response_id, "object": "response.deleted", "deleted": True})


class ResponseCancelView(OpenAIView):
    def post(self, request: Request, response_id: str) -> Response:
        run = response_for(request, response_id)
        return Response(response_object(run_cancel(run=run)))


class InputItemsView(OpenAIView):
    def get(self, request: Request, response_id: str) -> Response:
        run = response_for(request, response_id)
        limit = limit_param(request, default=20, maximum=100)
        order = choice_param(request, "order", choices=("asc", "desc"), default="desc")
        items = input_items(run)
        if order == "desc":
            items.reverse()
        after = request.query_params.get("after") or None
        if after is not None:
            position = next((n for n, item in enumerate(items) if item["id"] == after), None)
            if position is None:
                raise invalid(
                    f"Invalid 'after': no input item with id '{quoted(after)}'.", param="after"
                )
            items = items[position + 1 :]
        page = items[:limit]
        return Response(
            {
                "object": "list",
                "data": page,
                "first_id": page[0]["id"] if page else "",
                "last_id": page[-1]["id"] if page else "",
                "has_more": len(items) > limit,
            }
        )
