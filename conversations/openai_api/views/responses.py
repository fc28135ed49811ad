"""Responses: create, retrieve (or stream again from any point), cancel, delete, and the
items a response took as input. A response is a Parley run (engine.response_start)."""

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterable, Iterator
from dataclasses import replace
from typing import Any, cast

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.http import StreamingHttpResponse
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import ApiKey, User
from accounts.sockets import SocketCredential
from conversations import selectors, services
from conversations.engine import (
    eventlog,
    response_start,
    response_unstored,
    run_cancel,
    run_follow_as,
    run_follow_as_sync,
)
from conversations.errors import EVENTS_EXPIRED, NotFound
from conversations.limits import model_work
from conversations.models import Run
from conversations.openai_api import ids
from conversations.openai_api.base import (
    InputView,
    OpenAIView,
    body_object,
    body_rest_check,
    choice_param,
    conversation_for,
    limit_param,
)
from conversations.openai_api.errors import OpenAIError, invalid, quoted
from conversations.openai_api.file_parts import inline_chars
from conversations.openai_api.files_in import files_read, files_stored
from conversations.openai_api.responses_in import ALLOWED, response_request
from conversations.openai_api.responses_out import input_items, response_head, response_object
from conversations.openai_api.stream import ResponseEvents, openai_events, sse_frame

KEEP_ALIVE = ": keep-alive\n\n"
# After the terminal event: the stream is over (as OpenAI's streams end).
DONE = "data: [DONE]\n\n"


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
    run ends (engine.run_follow_as: a Redis restart ridden out, keep-alives at silences,
    the end of the run noticed there, the end of the caller's key at once). Under ASGI an
    async stream (no thread held while it waits); under WSGI the same follower, from this
    thread.
    A stream that cannot go on ends without its last event: the client resumes with
    `starting_after`."""
    frames = _Frames(head=response_head(run), after=after)
    api_key = cast(ApiKey, request.auth)  # OpenAIView's only way in
    credential = SocketCredential(user_id=api_key.owner_id, api_key_id=api_key.pk)
    _release_connections()
    if isinstance(request._request, ASGIRequest):
        return _sse(frames.from_async(run_follow_as(run.pk, credential=credential)))
    items = run_follow_as_sync(run.pk, credential=credential, checked=_release_connections)
    return _sse(frames.from_sync(items))


class _Frames:
    """OpenAI's SSE frames for what the follower yields: the events translated from the
    whole log (the translator needs all of it), those numbered past `after`, and a
    keep-alive comment at a silence, or when events with no OpenAI counterpart (draft
    edits, events replayed below `after`) left the connection without a sign for as long;
    `data: [DONE]` once the run's terminal event has passed."""

    def __init__(self, *, head: dict[str, Any], after: int | None) -> None:
        self.translator = ResponseEvents(head=head)
        self.after = after
        self.keepalive = settings.PARLEY_STREAM_KEEPALIVE_SECONDS
        self.sent = time.monotonic()

    def of(self, item: eventlog.Followed) -> list[str]:
        if isinstance(item, eventlog.StreamLost):
            return []
        if isinstance(item, dict):
            translated = self.translator.feed(item)
            frames = [sse_frame(out) for out in translated if self._past(out)]
            if item["type"] in eventlog.TERMINAL_TYPES:
                frames.append(DONE)  # even when the terminal event itself was seen before
        else:
            frames = [KEEP_ALIVE]
        now = time.monotonic()
        if not frames and now - self.sent >= self.keepalive:
            frames = [KEEP_ALIVE]
        if frames:
            self.sent = now
        return frames

    def _past(self, event: dict[str, Any]) -> bool:
        return self.after is None or event["sequence_number"] > self.after

    async def from_async(self, follower: AsyncGenerator[eventlog.Followed]) -> AsyncIterator[str]:
        async with contextlib.aclosing(follower) as items:
            async for item in items:
                for frame in self.of(item):
                    yield frame

    def from_sync(self, follower: Generator[eventlog.Followed]) -> Iterator[str]:
        with contextlib.closing(follower) as items:
            for item in items:
                yield from self.of(item)


def _wait(run: Run) -> dict[str, Any]:
    """The response once its run has ended (or as it stands after the server's wait, or
    when its events cannot be read)."""
    _release_connections()
    for _item in eventlog.run_follow_sync(run.pk, timeout=settings.PARLEY_CHAT_WAIT_SECONDS):
        pass  # the follower ends after the run's terminal event
    return response_object(
        Run.objects.select_related("trigger_message", "conversation").get(pk=run.pk)
    )


class ResponsesView(InputView):
    @model_work
    def post(self, request: Request) -> Any:
        body = body_object(request, allowed=ALLOWED)
        body_rest_check(request, inline_chars=inline_chars(body.get("input")))
        parsed = response_request(body)
        conversation = previous = None
        if parsed.conversation is not None:
            conversation = conversation_for(request, parsed.conversation)
        if parsed.previous_response_id is not None:
            previous = response_for(request, parsed.previous_response_id)
        user = cast(User, request.user)
        if not parsed.store:
            # The files go to the model as a stored message's would in the conversation
            # it reads (images as images unless that conversation says otherwise).
            source = previous.conversation if previous is not None else conversation
            messages = files_read(
                user=user, read=parsed.input, vision=source.vision if source else True
            )
            with parsed.input.named():
                run, events = response_unstored(
                    user=user,
                    ask=replace(parsed.ask, messages=messages),
                    conversation=conversation,
                    previous=previous,
                )
            out = list(openai_events(response_head(run), events))
            if parsed.stream:
                return _sse([*(sse_frame(event) for event in out), DONE])
            return Response(out[-1]["response"])
        with files_stored(user=user, read=parsed.input) as messages, parsed.input.named():
            run = response_start(
                user=user,
                ask=replace(parsed.ask, messages=messages),
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
