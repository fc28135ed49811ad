"""Share links: create, revoke and count the views of a read-only snapshot."""

import secrets
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from conversations.errors import Problem, ValidationFailed
from conversations.models import Conversation, Message, Share
from conversations.selectors.branches import branch_active, path_querysets
from conversations.selectors.shares import share_get_by_token, share_token_hash
from conversations.services.forks import BULK_BATCH, COPIED_FIELDS, messages_bulk_insert
from conversations.services.quotas import conversation_quota_check


def share_create(
    *,
    conversation: Conversation,
    user: Any,
    audience: str = Share.Audience.PUBLIC,
    expires_at: datetime | None = None,
) -> tuple[Share, str]:
    """A new share of the conversation's active path as it is now, and its token (shown
    once: only its hash is kept)."""
    problems = []
    if audience not in Share.Audience.values:
        problems.append(Problem("$.audience", "must be public or signed_in"))
    if expires_at is not None and expires_at <= timezone.now():
        problems.append(Problem("$.expires_at", "must be in the future"))
    if problems:
        raise ValidationFailed(problems)
    token = secrets.token_urlsafe(32)
    with transaction.atomic():
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
    return share, token


def share_revoke(*, share: Share) -> Share:
    """Close the link for good; revoking twice keeps the first time."""
    if share.revoked_at is None:
        share.revoked_at = timezone.now()
        share.save(update_fields=["revoked_at"])
    return share


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
    """A new conversation of `user` holding copies of the snapshot's messages, to go on
    from. It takes the title and the model, nothing private of the owner's (system
    prompt, draft, metadata, tools); files stay with the owner."""
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
            message_count=share.message_count,
        )
        root = copy.active_branch_id
        assert root is not None  # born with its root branch

        def copied() -> Iterator[Message]:
            for rows in path_querysets(share.branch, after=0, last=share.message_count):
                for row in rows.values(*COPIED_FIELDS).iterator(chunk_size=BULK_BATCH):
                    yield Message(conversation=copy, branch_id=root, copied=True, **row)

        messages_bulk_insert(copied())
    return copy
