"""Following a run for the holder of a credential, as the HTTP streams do (the REST SSE
stream, the OpenAI door's streamed responses): eventlog.run_follow, asking whether the
holder may still follow at its regular checks, at once when a credential notice reaches
the user (accounts.stream_notices, one listener per event loop), and when the session
expires. So a revoked key, a deactivated or deleted user, a changed password, a log-out
or a flushed session ends the stream within a moment, with no query per event.
"""

import contextlib
from collections.abc import AsyncGenerator, Callable, Generator
from uuid import UUID

from django.conf import settings

from accounts.sockets import SocketCredential
from accounts.stream_notices import credential_notices_listen
from config.async_db import db_call
from conversations import selectors
from conversations.engine import eventlog
from conversations.engine.eventlog.follow import Allowed


def run_follow_as(
    run_id: UUID | str, *, credential: SocketCredential, after: int | None = None
) -> AsyncGenerator[eventlog.Followed]:
    """The run's events after `after`, for as long as `credential` may follow them, with
    keep-alives every PARLEY_STREAM_KEEPALIVE_SECONDS of silence."""
    run = str(run_id)

    async def still_allowed() -> Allowed:
        left = await db_call(selectors.run_follow_seconds_left)(run_id=run, credential=credential)
        return False if left is None else left

    return eventlog.run_follow(
        run,
        after=after,
        keepalive=settings.PARLEY_STREAM_KEEPALIVE_SECONDS,
        still_allowed=still_allowed,
        recheck=_notices(credential),
    )


def run_follow_as_sync(
    run_id: UUID | str,
    *,
    credential: SocketCredential,
    after: int | None = None,
    checked: Callable[[], None] | None = None,
) -> Generator[eventlog.Followed]:
    """`run_follow_as` for sync code: the checks run on the calling thread, each followed
    by `checked()` (a door giving its database connection back while it waits)."""
    run = str(run_id)

    def still_allowed() -> Allowed:
        try:
            left = selectors.run_follow_seconds_left(run_id=run, credential=credential)
        finally:
            if checked is not None:
                checked()
        return False if left is None else left

    return eventlog.run_follow_sync(
        run,
        after=after,
        keepalive=settings.PARLEY_STREAM_KEEPALIVE_SECONDS,
        still_allowed=still_allowed,
        recheck=_notices(credential),
    )


def _notices(
    credential: SocketCredential,
) -> Callable[[Callable[[], None]], contextlib.AbstractAsyncContextManager[None]]:
    def listen(on_notice: Callable[[], None]) -> contextlib.AbstractAsyncContextManager[None]:
        return credential_notices_listen(user_id=credential.user_id, on_notice=on_notice)

    return listen
