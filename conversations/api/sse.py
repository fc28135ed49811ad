"""`GET /api/v1/runs/<id>/events/`: a run's events as Server-Sent Events.

An async view: while it waits for the next event it holds no worker thread and no
database connection, only one Redis connection blocked in XREAD. `id:` is the event's
sequence number, so a browser's EventSource resumes by itself with Last-Event-ID; the
response ends after the run's terminal event. A position at or past the terminal event is a
204, which stops an EventSource reconnecting. A finished run whose log has expired is a 410:
waiting on it would send keep-alives forever, and a 410 also stops EventSource reconnecting.
"""

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from accounts.selectors import user_for_authorization
from config.async_db import db_call
from conversations import selectors
from conversations.api.errors import error_json, method_not_allowed
from conversations.engine import eventlog
from conversations.errors import (
    EVENTS_EXPIRED,
    NOT_AUTHENTICATED,
    NotFound,
    ParleyError,
    Problem,
    ValidationFailed,
)
from conversations.models import Run

HEARTBEAT_SECONDS = 15.0


async def _user(request: HttpRequest) -> Any:
    header = request.headers.get("Authorization")
    if header:
        return await db_call(user_for_authorization)(header=header)
    user = await request.auser()
    return user if user.is_authenticated else None


def _position(raw: str | None) -> int | None:
    if not raw:
        return None
    value = int(raw)  # ValueError is reported by the caller
    if value < -1:
        raise ValueError(raw)
    return value


def _after(request: HttpRequest) -> int | None:
    after = _position(request.GET.get("after"))
    last_seen = _position(request.headers.get("Last-Event-ID"))
    # EventSource reconnects to the same URL, `?after` included, and sends Last-Event-ID:
    # the header is the newer position, so it wins.
    return after if last_seen is None else last_seen


def sse_format(event: dict[str, Any]) -> str:
    data = json.dumps(event, ensure_ascii=False)
    return f"id: {event['sequence_number']}\nevent: {event['type']}\ndata: {data}\n\n"


async def _stream(run_id: str, after: int | None) -> AsyncIterator[str]:
    # Browsers reconnect after this many milliseconds if the connection drops.
    yield "retry: 2000\n\n"
    source = eventlog.with_heartbeats(
        eventlog.events_follow(run_id, after=after), HEARTBEAT_SECONDS
    )
    async with contextlib.aclosing(source) as beats:
        async for event in beats:
            if event is not None:
                yield sse_format(event)
            elif await db_call(selectors.run_exists)(run_id=run_id):
                # A comment line keeps idle proxies from closing the connection.
                yield ": keep-alive\n\n"
            else:
                # Deleted without its log being ended (deleting a conversation ends it):
                # the stream ends, and the browser's reconnect gets a 404 and stops.
                return


# Only GET does anything; exempt from CSRF so that a POST with a session cookie gets the
# API's JSON 405 rather than the HTML page of a CSRF refusal.
@csrf_exempt
async def run_events(request: HttpRequest, run_id: UUID) -> HttpResponseBase:
    if request.method not in ("GET", "HEAD"):
        return method_not_allowed(str(request.method), ("GET", "HEAD"))
    user = await _user(request)
    if user is None:
        return error_json(ParleyError(NOT_AUTHENTICATED))
    try:
        run = await db_call(selectors.run_get_for_user)(user=user, run_id=run_id)
    except Run.DoesNotExist:
        return error_json(NotFound("No such run."))
    try:
        after = _after(request)
    except ValueError:
        message = "must be a sequence number (-1 or more)"
        return error_json(
            ValidationFailed(
                [Problem("$.query.after", message)],
                message="'after' (or Last-Event-ID) must be a sequence number.",
            )
        )
    # An active run may have no log yet (its worker writes run.created on leasing it).
    if not run.is_active and not await eventlog.aevent_log_exists(run.pk):
        message = (
            f"This run's events have expired. Read the run (GET /api/v1/runs/{run.pk}/) and "
            f"its messages (GET /api/v1/conversations/{run.conversation_id}/messages/) instead."
        )
        return error_json(ParleyError(EVENTS_EXPIRED, message))
    if after is not None and await eventlog.aevent_log_ended_by(run.pk, after=after):
        # Nothing will ever follow: 204 is the answer that stops an EventSource from
        # reconnecting (it reconnects after every stream that ends, the complete ones too).
        return HttpResponse(status=204)
    response = StreamingHttpResponse(_stream(str(run.pk), after), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
