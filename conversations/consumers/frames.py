"""What the conversation websocket does with each client frame.

A mixin of ConversationConsumer (conversations/consumers/__init__.py), which parses a
frame, checks the socket's credential and calls the handler named by its `type`, behind
the request budgets every door spends (`_limited`; handlers that make the model work are
declared `@limits.model_work`). A handler checks the frame's fields, calls the engine or
a service, and answers the way every frame that starts a run does: it follows the run,
so the run's events (from `run.created` on) stream on this socket; the other sockets of
the conversation hear the notifications (`conversation.run_started`,
`conversation.branch_created`, `conversation.updated`, ...). A refusal raises an error of
the vocabulary (conversations.errors), which the consumer sends as an `error` frame with
the code every door uses for it; the socket stays open. An id that is not this
conversation's (another user's, another conversation's, unknown or malformed) is
`not_found`, never a hint that it exists elsewhere.
"""

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from accounts.scopes import CHAT, READ, ScopeMissing, scope_require
from accounts.sockets import SocketCredential, socket_credential_valid
from config.async_db import db_call
from conversations import limits, notifications, selectors, services
from conversations.engine import message_edit, reply_regenerate, run_cancel, run_start
from conversations.errors import (
    NO_ACTIVE_RUN,
    ParleyError,
    Problem,
    ValidationFailed,
    scope_refusal,
)
from conversations.models import Conversation, Run

Frame = dict[str, Any]
Handler = Callable[[Any, Frame], Awaitable[None]]


class CredentialEnded(Exception):
    """The socket's credential no longer holds, found by a frame that checks it itself
    (SELF_CHECKED): the consumer closes the socket (4401), as for any other frame."""


# Frames whose handler checks the socket's credential in the same database call as its
# work, first thing: starting a run is what every message sent costs, and a call of its
# own for the check (a thread hop, a pooled connection taken and given back) cost as
# much CPU again as the check's two statements. The consumer checks the others first.
SELF_CHECKED = frozenset({"message.create", "message.regenerate", "message.edit"})


def error_frame(error: ParleyError) -> dict[str, Any]:
    """The websocket's rendering of the error vocabulary: `{"type": "error", "code",
    "message"}` and the error's details beside them (`problems`; a lost stream's
    `run_id` and `after`, where the client resumes)."""
    extra = {k: v for k, v in error.details.items() if k not in ("type", "code", "message")}
    return {"type": "error", "code": error.code, "message": error.message, **extra}


# Opening a socket shows the conversation's state and follows its running reply: a read.
CONNECT_SCOPE = READ


def connect_refusal(credential: SocketCredential) -> ParleyError | None:
    """Why a socket with this credential may not open (`insufficient_scope`), or None."""
    try:
        scope_require(held=credential.scopes, required=CONNECT_SCOPE)
    except ScopeMissing as exc:
        return scope_refusal(exc)
    return None


def needs(scope: str) -> Callable[[Handler], Handler]:
    """Declares that a frame handler needs `scope` of the socket's credential
    (accounts.scopes); `_limited` refuses the frame with `insufficient_scope` before it
    spends any budget or does anything, the socket staying open. Frames that write or
    make the model work need `chat`; reading ones `read`."""

    def decorate(handler: Handler) -> Handler:
        handler.required_scope = scope  # type: ignore[attr-defined]
        return handler

    return decorate


def _text(frame: Frame, name: str, *, required: bool = True) -> str:
    value = frame.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ValidationFailed([Problem(f"$.{name}", "must be a string")])
    return value


class FrameHandlers:
    """The client frames, by type. Needs the consumer's conversation and run following."""

    conversation: Conversation | None
    following: str | None
    credential: SocketCredential | None

    if TYPE_CHECKING:  # provided by ConversationConsumer and its base class

        def _follow(self, run_id: str, *, after: int | None) -> None: ...

        async def _follow_stored(self, run_id: str, *, after: int | None) -> None: ...

        async def send_json(self, content: Any, close: bool = False) -> None: ...

    def _handlers(self) -> dict[str, Callable[[Frame], Awaitable[None]]]:
        return {
            "message.create": self._message_create,
            "message.regenerate": self._message_regenerate,
            "message.edit": self._message_edit,
            "branch.switch": self._branch_switch,
            "run.cancel": self._run_cancel,
            "subscribe": self._subscribe,
            "draft.update": self._draft_update,
            "ping": self._ping,
        }

    def _limited(
        self, handler: Callable[[Frame], Awaitable[None]]
    ) -> Callable[[Frame], Awaitable[None]]:
        """`handler` behind its scope and the request budgets (conversations.limits), the
        ones the API's doors spend: every frame of a known type spends the user's, `ping`
        included (it reads the database); one that makes the model work spends the
        model's as well. A refused frame does nothing: the `throttled` error frame, with
        `retry_after`."""

        async def limited(frame: Frame) -> None:
            if self.credential is None:
                raise CredentialEnded
            # Refused for its scope first, as the API checks permissions before throttles:
            # a frame the key may not send spends nothing.
            required: str = handler.required_scope  # type: ignore[attr-defined]
            scope_require(held=self.credential.scopes, required=required)
            work = limits.makes_model_work(handler)
            await limits.abudgets_take(ident=self.credential.user_id, model_work=work)
            await handler(frame)

        return limited

    def _follow_started(self, run: Run) -> None:
        # A repeat (same client_id) may name the run this socket already follows.
        if self.following != str(run.pk):
            self._follow(str(run.pk), after=None)

    @limits.model_work
    @needs(CHAT)
    async def _message_create(self, frame: Frame) -> None:
        content = _text(frame, "content", required=False)
        client_id = _text(frame, "client_id", required=False)
        assert self.conversation is not None
        _, run = await _run_start(
            self.credential, self.conversation, content, client_id, frame.get("attachments")
        )
        self._follow_started(run)

    @limits.model_work
    @needs(CHAT)
    async def _message_regenerate(self, frame: Frame) -> None:
        message_id = _text(frame, "message_id")
        client_id = _text(frame, "client_id", required=False)
        assert self.conversation is not None
        run = await _reply_regenerate(self.credential, self.conversation, message_id, client_id)
        self._follow_started(run)

    @limits.model_work
    @needs(CHAT)
    async def _message_edit(self, frame: Frame) -> None:
        message_id = _text(frame, "message_id")
        content = _text(frame, "content", required=False)
        client_id = _text(frame, "client_id", required=False)
        assert self.conversation is not None
        run = await _message_edit(
            self.credential,
            self.conversation,
            message_id,
            content,
            client_id,
            frame.get("attachments"),
        )
        self._follow_started(run)

    @needs(CHAT)
    async def _branch_switch(self, frame: Frame) -> None:
        branch_id = _text(frame, "branch_id")
        assert self.conversation is not None
        shown, changed = await _branch_switch(self.conversation, branch_id)
        if not changed:
            # Already shown: no notification goes out, so this socket alone hears that
            # the switch holds (the same frame other sockets get when it changes).
            await self.send_json(
                {
                    "type": notifications.UPDATED,
                    "conversation_id": str(self.conversation.pk),
                    "active_branch_id": shown,
                }
            )

    @needs(CHAT)
    async def _run_cancel(self, frame: Frame) -> None:
        assert self.conversation is not None
        if not await _run_cancel_active(self.conversation):
            raise ParleyError(NO_ACTIVE_RUN)

    @needs(READ)
    async def _subscribe(self, frame: Frame) -> None:
        run_id = _text(frame, "run_id")
        after = frame.get("after")
        if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
            raise ValidationFailed([Problem("$.after", "must be an integer sequence number")])
        if after is not None and after < -1:
            raise ValidationFailed([Problem("$.after", "must be a sequence number (-1 or more)")])
        await self._follow_stored(run_id, after=after)

    @needs(CHAT)
    async def _draft_update(self, frame: Frame) -> None:
        draft = _text(frame, "draft")
        assert self.conversation is not None
        await _draft_update(self.conversation, draft)

    @needs(READ)
    async def _ping(self, frame: Frame) -> None:
        await self.send_json({"type": "pong"})


# --- database access (sync ORM, off the event loop) ----------------------------------------
# The socket's copy of the conversation is as old as the connection: its counters, title,
# draft, model and active branch may have moved since. Starting a run re-reads all of
# those under the conversation's lock (engine.run_begin), so those frames hand the copy
# over as it is; a switch re-reads it first.


def _credential_holds(credential: SocketCredential | None) -> None:
    # None: the connection was refused before its credential was taken.
    if credential is None or not socket_credential_valid(credential=credential):
        raise CredentialEnded


@db_call
def _run_start(
    credential: SocketCredential | None,
    conversation: Conversation,
    content: str,
    client_id: str,
    attachments: Any,
) -> tuple[Any, Run]:
    _credential_holds(credential)
    return run_start(
        conversation=conversation, content=content, client_id=client_id, attachments=attachments
    )


@db_call
def _reply_regenerate(
    credential: SocketCredential | None, conversation: Conversation, message_id: str, client_id: str
) -> Run:
    _credential_holds(credential)
    _, run = reply_regenerate(conversation=conversation, message_id=message_id, client_id=client_id)
    return run


@db_call
def _message_edit(
    credential: SocketCredential | None,
    conversation: Conversation,
    message_id: str,
    content: str,
    client_id: str,
    attachments: Any,
) -> Run:
    _credential_holds(credential)
    _, _, run = message_edit(
        conversation=conversation,
        message_id=message_id,
        content=content,
        client_id=client_id,
        attachments=attachments,
    )
    return run


@db_call
def _branch_switch(conversation: Conversation, branch_id: str) -> tuple[str, bool]:
    """The branch now shown, and whether this switch changed it (and so announced it)."""
    conversation.refresh_from_db()
    before = conversation.active_branch_id
    branch = services.branch_switch(conversation=conversation, branch_id=branch_id)
    return str(branch.pk), branch.pk != before


@db_call
def _run_cancel_active(conversation: Conversation) -> bool:
    run = selectors.run_active(conversation=conversation)
    if run is None:
        return False
    run_cancel(run=run)
    return True


@db_call
def _draft_update(conversation: Conversation, draft: str) -> None:
    services.conversation_draft_update(conversation=conversation, draft=draft)
