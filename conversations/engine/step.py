"""A step in hand: a stored run under our lease, with its open event log. It is where the
one loop (engine/loop.py) writes for a stored run: replies and tool results appended to
the run's own branch in transactions that check the lease, events to the run's log, and
the two ways a step lets go of a run (hand it to the next step, or end it)."""

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from conversations import context, selectors
from conversations.engine import dispatch, eventlog
from conversations.engine.cancel import cancel_flag_raised
from conversations.engine.lease import Lease, LeaseLost, release_connection
from conversations.engine.runs import run_finish
from conversations.engine.sink import (
    KeptResult,
    Position,
    history_truncated,
    tool_calls_limit,
)
from conversations.engine.turns import turns
from conversations.errors import ParleyError
from conversations.models import Branch, Conversation, Message, Run, StoredFile
from conversations.serializers import attachment_payload
from conversations.services.inline_files import InlineFiles, files_inline
from conversations.services.messages import NewMessage, message_append, stored_payload
from conversations.tools import ToolImage

log = logging.getLogger(__name__)


@dataclass
class Step:
    run: Run
    conversation: Conversation
    lease: Lease
    writer: eventlog.EventWriter
    stored = True

    def mine(self) -> QuerySet[Run]:
        return self.lease.mine()

    def cancel_requested(self) -> bool:
        return Run.objects.filter(pk=self.run.pk, cancel_requested_at__isnull=False).exists()

    def tool_stopped(self) -> bool:
        # The stop's flag in Redis: cheap enough to look for twice a second. Without
        # Redis the column is still read between tools and by the next step.
        try:
            return cancel_flag_raised(run_id=str(self.run.pk))
        except Exception:
            log.debug("run %s: the stop flag could not be read", self.run.pk, exc_info=True)
            return False

    def emit(self, kind: str, payload: dict[str, Any]) -> None:
        self.writer.emit(kind, **payload)

    @cached_property
    def branch(self) -> Branch:
        """The run's own branch, whichever the conversation shows meanwhile."""
        branch = self.run.branch  # read with the lease
        if branch is None or branch.conversation_id != self.conversation.pk:
            branch = selectors.branch_get(
                conversation=self.conversation, branch_id=self.run.branch_id
            )
        return branch

    # --- the loop's sink ------------------------------------------------------------

    def model_input(self) -> list[context.ChatMessage]:
        return selectors.conversation_model_input(
            conversation=self.conversation,
            branch=self.branch,
            truncate=history_truncated(self.run),
        )

    def replied(self) -> Position:
        run = self.run
        # A run's replies are stored with their iteration counted, in one transaction:
        # before its first reply there is nothing to look for.
        assistant = (
            Message.objects.filter(run=run, role=Message.Role.ASSISTANT).order_by("-seq").first()
            if run.iterations
            else None
        )
        if assistant is None:
            return Position(iterations=run.iterations, calls=None, answered=frozenset())
        answered = frozenset(
            Message.objects.filter(
                run=run, role=Message.Role.TOOL, seq__gt=assistant.seq
            ).values_list("tool_call_id", flat=True)
            if assistant.tool_calls
            else ()
        )
        return Position(
            iterations=run.iterations,
            calls=assistant.tool_calls,
            answered=answered,
            tool_results=self._tool_results() if tool_calls_limit(run) is not None else 0,
        )

    def _tool_results(self) -> int:
        # The results the run kept past its input (a request's own function_call_output
        # items are stored as the run's too, before the message it answers).
        return Message.objects.filter(
            run=self.run,
            role=Message.Role.TOOL,
            seq__gt=Coalesce(F("run__trigger_message__seq"), 0),
        ).count()

    def atomic(self) -> contextlib.AbstractContextManager[Any]:
        return transaction.atomic()

    def after_commit(self, action: Callable[[], object]) -> None:
        transaction.on_commit(action)

    def message_keep(self, message: NewMessage) -> dict[str, Any]:
        stored = message_append(
            conversation=self.conversation, branch_id=self.branch.pk, message=message
        )
        return stored_payload(stored, self.branch, branch_count=self.conversation.branch_count)

    def tool_result_keep(
        self, message: NewMessage, images: tuple[ToolImage, ...] = ()
    ) -> KeptResult:
        # The images become the owner's files first (each in a transaction of its own),
        # and are deleted again if the result cannot be kept.
        with files_inline(owner=self.conversation.owner) as inline:
            files, refused = _images_store(inline, images)
            if files or refused:
                message = replace(
                    message,
                    content="\n".join([message.content, *refused]),
                    attachments=tuple(file.pk for file in files),
                )
            with transaction.atomic():
                if not self.lease.update(lease_expires_at=self.lease.until()):
                    raise LeaseLost
                stored = message_append(
                    conversation=self.conversation, branch_id=self.run.branch_id, message=message
                )
        return KeptResult(
            message_id=str(stored.id),
            output=stored.content,
            attachments=[attachment_payload(file) for file in files],
        )

    def run_advance(
        self, *, status: str | None, error: dict[str, str] | None = None, **fields: Any
    ) -> None:
        if status is None:
            step_hand_over(self, **fields)
        else:
            step_finish(self, status, error=error, **fields)

    @contextlib.contextmanager
    def tool_running(self) -> Iterator[Callable[[], None] | None]:
        self.lease.renew()
        with turns.given_back():
            release_connection()  # the tool may run for long; renewals reconnect
            yield self.lease.keepalive
            release_connection()  # before waiting for the turn again


def _images_store(
    inline: InlineFiles, images: tuple[ToolImage, ...]
) -> tuple[list[StoredFile], list[str]]:
    """The images stored as uploads are (sniffed, within the owner's quota), and a line
    for each one refused, saying why."""
    files: list[StoredFile] = []
    refused: list[str] = []
    most: int = settings.PARLEY_FILE_MAX_PER_MESSAGE
    for image in images:
        if len(files) == most:
            refused.append(f"[image {image.filename} not kept: at most {most} files a message]")
            continue
        try:
            files.append(inline.store(data=image.data, filename=image.filename))
        except ParleyError as error:
            refused.append(f"[image {image.filename} not kept: {error.message}]")
    return files, refused


def step_hand_over(step: Step, **fields: Any) -> None:
    """Inside the storing transaction: give up the lease (writing `fields` with it), and
    once committed, queue the next step (any worker may take it)."""
    if not step.lease.update(
        lease_token=None, lease_expires_at=None, updated_at=timezone.now(), **fields
    ):
        raise LeaseLost
    for name, value in fields.items():
        setattr(step.run, name, value)
    run_id = str(step.run.id)
    transaction.on_commit(lambda: dispatch.step_enqueue(run_id))


def step_finish(
    step: Step, status: str, error: dict[str, str] | None = None, **fields: Any
) -> None:
    """Close the run through the one ending path (writing `fields` with it), on the
    condition that our lease still holds it, its terminal event following our own events
    in the log."""
    if not run_finish(
        run=step.run, status=status, error=error, lease=step.lease, writer=step.writer, **fields
    ):
        raise LeaseLost
