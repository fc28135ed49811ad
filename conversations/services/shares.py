"""Share links: create, revoke and count the views of a read-only snapshot."""

import secrets
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from accounts.models import User
from conversations.errors import Problem, ValidationFailed
from conversations.models import AuditEvent, Branch, Conversation, Share
from conversations.selectors.branches import branch_active
from conversations.selectors.shares import share_get_by_token, share_token_hash, shares_open
from conversations.services.audit import audit_record, audit_record_each
from conversations.services.forks import path_copy
from conversations.services.quotas import conversation_quota_check


def share_create(
    *,
    conversation: Conversation,
    user: Any,
    audience: str = Share.Audience.PUBLIC,
    expires_at: datetime | None = None,
    actor: User | None = None,
) -> tuple[Share, str]:
    """A new share of the conversation's active path as it is now, and its token (shown
    once: only its hash is kept). With `actor`, staff made it for `user`: recorded in the
    audit trail."""
    problems = []
    if audience not in Share.Audience.values:
        problems.append(Problem("$.audience", "must be public or signed_in"))
    if expires_at is not None and expires_at <= timezone.now():
        problems.append(Problem("$.expires_at", "must be in the future"))
    if problems:
        raise ValidationFailed(problems)
    token = secrets.token_urlsafe(32)
    with transaction.atomic():
        # Under the conversation's lock, so two requests at once cannot both take the last.
        Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
        _open_shares_check(conversation=conversation)
        branch = branch_active(conversation=conversation)
        share = Share.objects.create(
            conversation=conversation,
            created_by=user,
            token_hash=share_token_hash(token),
            audience=audience,
            expires_at=expires_at,
            branch=branch,
            message_count=branch.message_count,
        )
        if actor is not None:
            audit_record(
                actor=actor,
                action=AuditEvent.Action.SHARE_CREATED,
                conversation=conversation,
                reason=_audit_reason(share.pk, audience),
            )
    return share, token


def _audit_reason(share_id: Any, audience: str) -> str:
    # Which link, never its token (only the hash is kept anyway).
    return f"share {share_id} ({audience})"


def _open_shares_check(*, conversation: Conversation) -> None:
    limit = settings.PARLEY_MAX_SHARES_PER_CONVERSATION
    if limit and shares_open(conversation=conversation).count() >= limit:
        raise ValidationFailed(
            [
                Problem(
                    "$",
                    f"this conversation has {limit} open share links, the most it may "
                    "have; revoke one first",
                )
            ]
        )


def share_revoke(*, share: Share, actor: User | None = None) -> Share:
    """Close the link for good; revoking twice keeps the first time."""
    if share.revoked_at is None:
        shares_revoke(queryset=Share.objects.filter(pk=share.pk), actor=actor)
        share.refresh_from_db(fields=["revoked_at"])
    return share


def shares_revoke(*, queryset: QuerySet[Share], actor: User | None = None) -> int:
    """Close these links for good (those closed already keep their time), in one UPDATE;
    with `actor` (staff), each one closed is recorded in the audit trail. How many."""
    with transaction.atomic():
        # Locked by id: the selection may come with joins or DISTINCT (an admin's search).
        open_ = Share.objects.filter(pk__in=queryset.values("pk"), revoked_at__isnull=True)
        open_ = open_.select_for_update(of=("self",))
        rows = list(
            open_.values_list("pk", "conversation_id", "conversation__owner_id", "audience")
        )
        Share.objects.filter(pk__in=[row[0] for row in rows]).update(revoked_at=timezone.now())
        if actor is not None:
            audit_record_each(
                actor=actor,
                action=AuditEvent.Action.SHARE_REVOKED,
                rows=[
                    (conversation, owner, _audit_reason(pk, aud))
                    for pk, conversation, owner, aud in rows
                ],
            )
    return len(rows)


class ShareNeedsSignIn(Exception):
    """A `signed_in` share opened by someone not signed in."""


def share_open(*, token: str, user: Any) -> Share:
    """The share a token opens to `user`, its view counted; Share.DoesNotExist for an
    unknown, revoked or expired token alike, ShareNeedsSignIn for a `signed_in` share and
    an anonymous reader."""
    share = share_get_by_token(token=token)
    if share.audience == Share.Audience.SIGNED_IN and not user.is_authenticated:
        raise ShareNeedsSignIn
    share_view_count(share=share)
    return share


def share_view_count(*, share: Share) -> None:
    """Count one view, without losing concurrent ones."""
    Share.objects.filter(pk=share.pk).update(view_count=F("view_count") + 1)


def share_continue(*, share: Share, user: Any) -> Conversation:
    """A new conversation of `user` holding copies of the messages the link shows, to go
    on from. It takes the title and the model, nothing private of the owner's (system
    prompt, draft and its edits, metadata, tools); files stay with the owner."""
    source = share.conversation
    with transaction.atomic():
        conversation_quota_check(owner_id=user.pk)
        copy = Conversation.objects.create(
            owner=user,
            title=source.title,
            model=source.model,
            temperature=source.temperature,
            max_output_tokens=source.max_output_tokens,
            vision=source.vision,
        )
        count = len(
            path_copy(branch=share.branch, last=share.message_count, into=copy, shown_only=True)
        )
        copy.message_count = count
        copy.save(update_fields=["message_count"])
        Branch.objects.filter(conversation=copy).update(message_count=count)
    return copy
