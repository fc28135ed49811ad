"""Runs ended by a deletion, and the lock a run's start takes. Starting, stopping and
ending runs otherwise belongs to the engine (conversations/engine/runs.py), which also
publishes what these end."""

from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

from django.db import connection
from django.db.transaction import TransactionManagementError
from django.dispatch import Signal
from django.utils import timezone

from conversations import sql
from conversations.models import Conversation, Run
from conversations.services.messages import LOCKED_FIELDS

# Sent inside a deleting transaction with the runs it ends (`runs`: Run objects, already
# marked cancelled in memory). The engine connects to it to publish their terminal events
# after commit; the domain itself knows nothing of event logs.
runs_ended = Signal()


def runs_end_with_conversations(*, conversation_ids: Iterable[UUID]) -> None:
    """Inside a transaction that deletes these conversations: each run still active ends
    as cancelled with them. Its worker stops at its next lease renewal."""
    now = timezone.now()
    ended = []
    for run in Run.objects.filter(
        conversation_id__in=list(conversation_ids), status__in=Run.ACTIVE_STATUSES
    ):
        run.status = Run.Status.CANCELLED
        run.finished_at = run.cancel_requested_at = now
        ended.append(run)
    if ended:
        runs_ended.send(sender=Run, runs=ended)


@dataclass(frozen=True)
class RunLock:
    locked: Conversation  # the row as `conversation_lock` reads it, with the run's model
    run_active: bool  # a run of the conversation is queued or in progress
    client_id_taken: bool  # a run of it was started with the client id asked about


def conversation_lock_for_run(*, conversation: Conversation, client_id: str = "") -> RunLock:
    """`conversation_lock` (with the model a run uses) for starting a run, with what the
    start must know first read in the same statement: whether a run is active, and
    whether `client_id` already started one.

    Both are read in the statement's snapshot, so a run committed while it waited for the
    lock is missed; the new run's insert then meets the constraint these checks only
    anticipate (one active run per conversation, one run per client id), and the caller
    sorts out the IntegrityError as for any other race.

    Conversation.DoesNotExist unless the conversation is there and its owner's (by
    `conversation.owner_id`): `conversation` need hold no more than its id and owner.
    """
    if not connection.in_atomic_block:
        raise TransactionManagementError("the run lock is taken inside a transaction")
    # One statement, written once (conversations/sql): the ORM's would cost more CPU to
    # build than the database spends running it, on every message sent.
    found = sql.conversation_run_lock(
        conversation_id=conversation.pk,
        owner_id=conversation.owner_id,
        client_id=client_id,
        fields=(*LOCKED_FIELDS, "model"),
    )
    if found is None:
        raise Conversation.DoesNotExist
    return RunLock(*found)
