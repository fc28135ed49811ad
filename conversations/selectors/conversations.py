"""Reads of conversations, their messages and runs. Each takes the requesting user, so
another user's rows can never come back: callers get "does not exist", which the API
answers as 404."""

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Prefetch

# Row comparisons (Django's own, for composite keys; django-stubs has no types for them).
from django.db.models.fields.tuple_lookups import (  # type: ignore[import-untyped]
    Tuple,
    TupleLessThan,
)

from accounts.models import User
from accounts.sockets import SocketCredential, socket_credential_seconds_left
from conversations import context
from conversations.errors import Problem, ValidationFailed
from conversations.models import Attachment, Branch, Conversation, Message, Run, Tag
from conversations.selectors.attachments import attachment_payloads
from conversations.selectors.branches import alternatives_at, branch_active, path_messages
from conversations.selectors.cursors import (
    Page,
    cursor_decode_flagged,
    cursor_encode,
    page_limit,
)
from conversations.selectors.history import HistoryRow, path_history
from conversations.selectors.model_files import history_files
from conversations.selectors.organising import folder_get, tagged_filter
from conversations.selectors.search import search_terms_parse
from conversations.serializers import MESSAGE_FIELDS


def conversation_get(*, user: User, conversation_id: UUID | str) -> Conversation:
    """The user's conversation, or Conversation.DoesNotExist (also for malformed ids)."""
    try:
        key = UUID(str(conversation_id))
    except ValueError:
        raise Conversation.DoesNotExist from None
    return Conversation.objects.get(pk=key, owner=user)


def _encode_cursor(conversation: Conversation) -> str:
    return cursor_encode(
        [conversation.pinned, conversation.last_activity_at.isoformat(), str(conversation.id)]
    )


def _after(cursor: str) -> TupleLessThan:
    """The rows after the cursor's in the order (pinned, last_activity_at, id), all
    descending: one row comparison, which the list's indexes take as a range."""
    position = cursor_decode_flagged(cursor)
    return TupleLessThan(Tuple(F("pinned"), F("last_activity_at"), F("id")), position)


def conversation_list(
    *,
    user: User,
    archived: bool | None = False,
    q: str = "",
    cursor: str | None = None,
    limit: int = 50,
    tags: Sequence[str] = (),
    folder_id: UUID | str | None = None,
    pinned: bool | None = None,
) -> Page[Conversation]:
    """The user's conversations, pinned ones first, then newest activity first,
    keyset-paginated on (pinned, last_activity_at, id) so deep pages cost the same as the
    first (the indexes `conversation_owner_pinned` and, in a folder, `conversation_folder`
    hold that order). Filters: under each of `tags` and of the `tag:` terms of `q` (any
    case), in the folder `folder_id` (Folder.DoesNotExist unless it is the user's), pinned
    or not; the rest of `q` matches titles. Each page reads its conversations' tags in
    one more query."""
    limit = page_limit(limit)
    rows = Conversation.objects.filter(owner=user)
    if folder_id is not None:
        # Only the owner's conversations are filed in their folders: the folder alone
        # then reads its own index in the list's order, not the owner's whole range.
        rows = Conversation.objects.filter(folder=folder_get(user=user, folder_id=folder_id))
    if archived is not None:
        rows = rows.filter(archived_at__isnull=not archived)
    terms = search_terms_parse(q)
    if terms.text:
        rows = rows.filter(title__icontains=terms.text)
    under = tagged_filter(user=user, names=[*tags, *terms.tags])
    if under is None:
        return Page(items=[], next_cursor=None)
    rows = rows.filter(under)
    if pinned is not None:
        rows = rows.filter(pinned=pinned)
    if cursor:
        rows = rows.filter(_after(cursor))
    shown = rows.order_by("-pinned", "-last_activity_at", "-id").prefetch_related(
        Prefetch("tags", queryset=Tag.objects.only("id", "name").order_by())
    )
    found = list(shown[: limit + 1])
    more = len(found) > limit
    items = found[:limit]
    return Page(items=items, next_cursor=_encode_cursor(items[-1]) if more else None)


def _after_checked(after: int) -> int:
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValidationFailed([Problem("$.after", "must be a non-negative integer")])
    return after


def _branch(conversation: Conversation, branch: Branch | None) -> Branch:
    return branch if branch is not None else branch_active(conversation=conversation)


def message_page(
    *, conversation: Conversation, after: int = 0, limit: int = 50, branch: Branch | None = None
) -> Page[Message]:
    """Messages of a branch's path (the active one by default) with seq > after, in order.
    The cursor is the last seq returned, so a page never shifts when messages are appended.
    Seqs are gapless along a path, so the page is one range read segment by segment."""
    limit, after = page_limit(limit), _after_checked(after)
    path = _branch(conversation, branch)
    found = list(path_messages(path, after=after, last=after + limit + 1))
    more = len(found) > limit
    items = found[:limit]
    return Page(items=items, next_cursor=str(items[-1].seq) if more else None)


def message_rows_page(
    *, conversation: Conversation, after: int = 0, limit: int = 50, branch: Branch | None = None
) -> Page[dict[str, Any]]:
    """`message_page` as plain dicts of MESSAGE_FIELDS, each with its `alternatives` (one
    more query for the page): a 200-message API page costs a third less without building
    a model instance per row."""
    limit, after = page_limit(limit), _after_checked(after)
    path = _branch(conversation, branch)
    # Whether each message has files, in the same query: a page without any reads none.
    found = list(
        path_messages(path, after=after, last=after + limit + 1)
        .annotate(has_files=Exists(Attachment.objects.filter(message_id=OuterRef("pk"))))
        .values(*MESSAGE_FIELDS, "has_files")
    )
    more = len(found) > limit
    items = found[:limit]
    choices = alternatives_at(
        path, (row["seq"] for row in items), branch_count=conversation.branch_count
    )
    files = attachment_payloads(message_ids=[row["id"] for row in items if row.pop("has_files")])
    for row in items:
        row["alternatives"] = choices.get(row["seq"])
        row["attachments"] = files.get(row["id"], [])
    return Page(items=items, next_cursor=str(items[-1]["seq"]) if more else None)


def history_tail(
    *, conversation: Conversation, max_messages: int, branch: Branch | None = None
) -> list[HistoryRow]:
    """The newest `max_messages` messages of a branch's path in seq order: bounded range
    reads whatever the conversation's length or number of branches.

    Plain tuples by SQL written once (conversations/sql): this runs before every model
    call and reads up to a few hundred rows, where the ORM costs more than the query.
    """
    path = _branch(conversation, branch)
    first = max(0, path.message_count - max_messages)
    return path_history(path, after=first, last=path.message_count)


def conversation_model_input(
    *,
    conversation: Conversation,
    token_budget: int | None = None,
    branch: Branch | None = None,
    truncate: bool = True,
) -> list[dict[str, Any]]:
    """What the model is sent for the next turn on a branch (see context.py for the rules;
    without `truncate`, context.HistoryTooLong instead of dropping the oldest turns)."""
    budget: int = settings.PARLEY_CONTEXT_TOKENS if token_budget is None else token_budget
    history = history_tail(
        conversation=conversation,
        max_messages=settings.PARLEY_CONTEXT_MAX_MESSAGES,
        branch=branch,
    )
    history, files_read = history_files(
        rows=history, vision=conversation.vision, text_chars=context.file_text_chars(budget)
    )
    return context.build_model_input(
        system_prompt=conversation.system_prompt,
        history=history,
        draft=conversation.draft,
        token_budget=budget,
        files_read=files_read,
        truncate=truncate,
    )


def run_active(*, conversation: Conversation) -> Run | None:
    return Run.objects.filter(conversation=conversation, status__in=Run.ACTIVE_STATUSES).first()


def run_get(*, conversation: Conversation, run_id: UUID | str) -> Run | None:
    try:
        key = UUID(str(run_id))
    except ValueError:
        return None
    return Run.objects.filter(conversation=conversation, pk=key).first()


def run_get_for_user(*, user: User, run_id: UUID | str) -> Run:
    """The run if it belongs to one of the user's conversations, else Run.DoesNotExist."""
    try:
        key = UUID(str(run_id))
    except ValueError:
        raise Run.DoesNotExist from None
    return Run.objects.select_related("conversation").get(pk=key, conversation__owner=user)


def run_followable(*, run_id: UUID | str, credential: SocketCredential) -> bool:
    """Whether the holder of `credential` may still follow the run's events: the
    credential holds (accounts.sockets: the key unrevoked, the session live, the user
    active) and the run is still one of the user's (deleting its conversation deletes it)."""
    return run_follow_seconds_left(run_id=run_id, credential=credential) is not None


def run_follow_seconds_left(*, run_id: UUID | str, credential: SocketCredential) -> float | None:
    """None when the holder of `credential` may no longer follow the run (run_followable);
    otherwise the seconds until the credential lapses by itself (a session's expiry), or
    infinity."""
    left = socket_credential_seconds_left(credential=credential)
    if left is None:
        return None
    if not Run.objects.filter(pk=run_id, conversation__owner_id=credential.user_id).exists():
        return None
    return left
