"""Moderation and data governance: flags, bulk deletes, user deletion, retention, and the
audit trail each of them leaves.

Bulk work walks the selection in primary-key pages, so memory stays flat however many
conversations are selected, and a delete never loads messages or runs: with nothing
cascading from them, each page costs one DELETE per table (see conversation_delete).
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet, Sum
from django.utils import timezone

from accounts.models import User
from accounts.services import idempotency_answers_forget
from conversations import notifications
from conversations.errors import Problem, ValidationFailed
from conversations.models import AuditEvent, Conversation, Run
from conversations.services.audit import audit_record_many
from conversations.services.files import files_owner_forget, files_release
from conversations.services.runs import runs_end_with_conversations

PAGE = 500
FLAG_REASON_MAX = 2000

Progress = Callable[[int], None]


def _pages(queryset: QuerySet[Conversation], size: int = PAGE) -> Iterator[list[tuple[UUID, int]]]:
    """`(id, owner id)` of the selection, a page at a time, by ascending id (keyset)."""
    rows = queryset.order_by("pk").values_list("pk", "owner_id")
    last: UUID | None = None
    while True:
        page = list((rows if last is None else rows.filter(pk__gt=last))[:size])
        if not page:
            return
        yield page
        last = page[-1][0]


def _reason_checked(reason: str, *, required: bool) -> str:
    reason = reason.strip()
    if required and not reason:
        raise ValidationFailed([Problem("$.reason", "give a reason")])
    if len(reason) > FLAG_REASON_MAX:
        raise ValidationFailed(
            [Problem("$.reason", f"must be at most {FLAG_REASON_MAX} characters")]
        )
    return reason


def conversations_flag(*, actor: User, queryset: QuerySet[Conversation], reason: str) -> int:
    """Flag the selection for review with a reason; one audit event per conversation."""
    reason = _reason_checked(reason, required=True)
    done = 0
    with transaction.atomic():
        for page in _pages(queryset):
            Conversation.objects.filter(pk__in=[pk for pk, _ in page]).update(
                flagged=True, flag_reason=reason
            )
            done += audit_record_many(
                actor=actor, action=AuditEvent.Action.FLAGGED, conversations=page, reason=reason
            )
    return done


def conversations_unflag(*, actor: User, queryset: QuerySet[Conversation], reason: str) -> int:
    reason = _reason_checked(reason, required=False)
    done = 0
    with transaction.atomic():
        for page in _pages(queryset):
            Conversation.objects.filter(pk__in=[pk for pk, _ in page]).update(
                flagged=False, flag_reason=""
            )
            done += audit_record_many(
                actor=actor, action=AuditEvent.Action.UNFLAGGED, conversations=page, reason=reason
            )
    return done


def conversations_export_record(
    *, actor: User, queryset: QuerySet[Conversation], export_format: str
) -> int:
    """Audit an export before its first byte is sent: access is what the trail records."""
    done = 0
    with transaction.atomic():
        for page in _pages(queryset):
            done += audit_record_many(
                actor=actor,
                action=AuditEvent.Action.EXPORTED,
                conversations=page,
                reason=f"format: {export_format}",
            )
    return done


def _page_delete(page: list[tuple[UUID, int]]) -> None:
    """Delete one page of conversations: a DELETE per table, detaching forks of them."""
    ids = [pk for pk, _ in page]
    runs_end_with_conversations(conversation_ids=ids)
    files_release(conversation_ids=ids)
    Conversation.objects.filter(pk__in=ids).delete()
    # Answers kept for Idempotency-Key repeats may quote them: they go with them.
    idempotency_answers_forget(
        owner_ids={owner_id for _, owner_id in page}, mentioning=[str(pk) for pk in ids]
    )
    # One notification per owner of the page, naming their conversations: open tabs
    # learn the same as from one per conversation, for a fraction of the messages.
    owners: dict[int, list[UUID]] = {}
    for pk, owner_id in page:
        owners.setdefault(owner_id, []).append(pk)
    for owner_id, gone in owners.items():
        notifications.deleted_notify(owner_id, gone)


def conversations_delete(
    *,
    actor: User | None,
    queryset: QuerySet[Conversation],
    reason: str = "",
    progress: Progress | None = None,
) -> int:
    """Hard-delete the selection with its messages and runs, all or nothing, audited."""
    done = 0
    with transaction.atomic():
        for page in _pages(queryset):
            audit_record_many(
                actor=actor, action=AuditEvent.Action.DELETED, conversations=page, reason=reason
            )
            _page_delete(page)
            done += len(page)
            if progress is not None:
                progress(len(page))
    return done


def user_delete(*, actor: User | None, user: User) -> int:
    """Delete a user and everything they own, fast: their conversations page by page (each
    deletion audited), then the account (API keys, counters and files go with it, the
    files' bytes after the commit). Audit events the user wrote as a moderator stay, with
    the actor cleared and the username kept."""
    with transaction.atomic():
        deleted = conversations_delete(
            actor=actor,
            queryset=Conversation.objects.filter(owner=user),
            reason=f"account {user.get_username()!r} deleted",
        )
        files_owner_forget(owner_id=user.pk)
        user.delete()
    return deleted


@dataclass(frozen=True)
class PurgeResult:
    cutoff: datetime | None
    conversations: int
    messages: int


def retention_cutoff(*, days: int, now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=days)


def conversations_expired(*, cutoff: datetime) -> QuerySet[Conversation]:
    """Inactive since before `cutoff`. A conversation with a reply still being generated is
    kept: it is active, whatever its timestamp says."""
    return Conversation.objects.filter(last_activity_at__lt=cutoff).exclude(
        runs__status__in=Run.ACTIVE_STATUSES
    )


def conversations_purge(
    *,
    days: int | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    progress: Progress | None = None,
    on_start: Callable[[int], None] | None = None,
) -> PurgeResult:
    """Delete conversations with no activity for `days` (PARLEY_RETENTION_DAYS by default;
    0 keeps everything). Each deleted conversation gets a `purged` audit event.

    Works a page per transaction, so a purge of millions never holds one huge transaction
    and an interrupted purge keeps what it finished. `dry_run` counts and changes nothing.
    """
    days = settings.PARLEY_RETENTION_DAYS if days is None else days
    if days <= 0:
        return PurgeResult(cutoff=None, conversations=0, messages=0)
    cutoff = retention_cutoff(days=days, now=now)
    expired = conversations_expired(cutoff=cutoff)
    totals = expired.aggregate(messages=Sum("message_count"))
    count = expired.count()
    if on_start is not None:
        on_start(count)
    if dry_run:
        return PurgeResult(cutoff=cutoff, conversations=count, messages=totals["messages"] or 0)
    reason = f"retention: no activity since before {cutoff:%Y-%m-%d %H:%M} UTC ({days} days)"
    conversations = messages = 0
    for page in _pages(expired):
        with transaction.atomic():
            # Re-check inside the transaction: a page read a moment ago may have woken up.
            live = list(
                conversations_expired(cutoff=cutoff)
                .filter(pk__in=[pk for pk, _ in page])
                .select_for_update()
                .values_list("pk", "owner_id", "message_count")
            )
            audit_record_many(
                actor=None,
                action=AuditEvent.Action.PURGED,
                conversations=[(pk, owner) for pk, owner, _ in live],
                reason=reason,
            )
            _page_delete([(pk, owner) for pk, owner, _ in live])
        conversations += len(live)
        messages += sum(count for _, _, count in live)
        if progress is not None:
            progress(len(page))
    return PurgeResult(cutoff=cutoff, conversations=conversations, messages=messages)
