"""`GET /api/v1/runs/<id>/events/`: a run's events as Server-Sent Events.

An async view: while it waits for the next event it holds no worker thread and no
database connection (eventlog.run_follow). `id:` is the event's sequence number, so a
browser's EventSource resumes by itself with Last-Event-ID; the response ends after the
run's terminal event. A silence sends a `: keep-alive` comment, and the stream checks then
that its credential still holds and the run is still there; it also checks at once when
its credential may have ended (revoked, logged out, expired: engine.run_follow_as). A
Redis restart is ridden out. A stream that cannot go on (Redis away too long, the
credential ended) just ends: EventSource reconnects with Last-Event-ID, and resumes or is
refused. A position at or past the terminal event is a 204, which stops an EventSource
reconnecting. A finished run whose log has expired is a 410: waiting on it would send
keep-alives forever, and a 410 also stops EventSource reconnecting.
"""

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from accounts.scopes import READ, ScopeMissing, scope_require, scopes_held
from accounts.selectors import api_key_for_authorization
from accounts.sockets import SocketCredential
from config.async_db import db_call
from conversations import limits, selectors
from conversations.api.errors import error_json, method_not_allowed
from conversations.engine import eventlog, run_follow_as
from conversations.errors import (
    EVENTS_EXPIRED,
    NOT_AUTHENTICATED,
    NotFound,
    ParleyError,
    Problem,
    ValidationFailed,
    scope_refusal,
)
from conversations.models import Run


async def _caller(request: HttpRequest) -> tuple[Any, SocketCredential] | None:
    """The user and the credential the request came with (an API key, else the session),
    which the stream follows as a websocket follows its own."""
    header = request.headers.get("Authorization")
    if header:
        api_key = await db_call(api_key_for_authorization)(header=header)
        if api_key is None:
            return None
        scopes = scopes_held(api_key=api_key)
        return api_key.owner, SocketCredential(
            user_id=api_key.owner_id, api_key_id=api_key.pk, scopes=scopes
        )
    user = await request.auser()
    if not user.is_authenticated:
        return None
    return user, SocketCredential(user_id=user.pk, session_key=request.session.session_key)


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


async def _stream(
    run_id: str, after: int | None, credential: SocketCredential
) -> AsyncIterator[str]:
    # Browsers reconnect after this many milliseconds if the connection drops.
    yield "retry: 2000\n\n"
    follower = run_follow_as(run_id, credential=credential, after=after)
    async with contextlib.aclosing(follower) as items:
        async for item in items:
            if isinstance(item, dict):
                yield sse_format(item)
            elif item is eventlog.KEEP_ALIVE:
                # A comment line keeps idle proxies from closing the connection.
                yield ": keep-alive\n\n"
    # Ended before the terminal event (Redis stayed away, the credential ended, the run
    # was deleted without its end): the browser reconnects with Last-Event-ID, and resumes
    # or gets the 401/404 that stops it.


# Only GET does anything; exempt from CSRF so that a POST with a session cookie gets the
# API's JSON 405 rather than the HTML page of a CSRF refusal.
@csrf_exempt
async def run_events(request: HttpRequest, run_id: UUID) -> HttpResponseBase:
    if request.method not in ("GET", "HEAD"):
        return method_not_allowed(str(request.method), ("GET", "HEAD"))
    caller = await _caller(request)
    if caller is None:
        return error_json(ParleyError(NOT_AUTHENTICATED))
    user, credential = caller
    try:
        # A request of the API like any other: it spends the user's request budget.
        await limits.abudgets_take(ident=user.pk)
    except ParleyError as refused:
        return error_json(refused)
    try:
        scope_require(held=credential.scopes, required=READ)
    except ScopeMissing as exc:
        return error_json(scope_refusal(exc))
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
    stream = _stream(str(run.pk), after, credential)
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


# A plain view, outside DRF's permission: it checks its scope itself, and names it here
# for the test that every endpoint has one.
run_events.required_scope = READ  # type: ignore[attr-defined]
