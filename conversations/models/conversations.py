"""Conversations, their branches and ordered messages (the tool loop's runs are in runs.py).

Invariants live in the database (one root branch per conversation, unique seq per branch,
a branch's fork point on its parent, closed sets of
roles/kinds/statuses) so no code path can break them.
"""

import uuid
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.text import StorableJSONDecoder
from conversations.tools.registry import tool_default_names


def default_tools() -> list[str]:
    """A new conversation enables every built-in tool (conversations/tools/builtins.py)."""
    return tool_default_names()


class MessageRole(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"


class MessageKind(models.TextChoices):
    MESSAGE = "message"
    EVENT = "event"  # a context event: stored system message that triggers no run
    DRAFT_EDIT = "draft_edit"  # the notice stored when the user edited the draft
    # A summary the model reads in place of the earlier turns it covers (covers_seq).
    COMPACTION = "compaction"


class ShownConversations(models.Manager["Conversation"]):
    """All but those an import is still storing, hidden until its last batch."""

    def get_queryset(self) -> models.QuerySet["Conversation"]:
        return super().get_queryset().filter(import_started_at__isnull=True)


class Conversation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    # The preamble: sent fresh on every model call, never stored as a history row.
    system_prompt = models.TextField(blank=True)
    model = models.CharField(max_length=100, blank=True)
    tools = models.JSONField(default=default_tools, blank=True, decoder=StorableJSONDecoder)
    # The conversation's working document, shown beside the chat.
    draft = models.TextField(blank=True)
    # Set when the user changes the draft; the next turn stores a notice and clears it.
    draft_edited = models.BooleanField(default=False)
    # The assistant's tool call that last wrote the draft ("" if none); a user edit leaves it.
    # A resumed `update_draft` finds its own id here and knows its write already happened.
    # As long as Message.tool_call_id: both hold a provider's tool call id.
    draft_call_id = models.CharField(max_length=200, blank=True, default="")
    # How many times the user has changed the draft (the assistant's writes do not count).
    # A run notes the count its model call saw (Run.draft_edits_seen), so the assistant
    # never writes over an edit it has not seen.
    draft_edit_count = models.PositiveIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True, decoder=StorableJSONDecoder)
    # Every message stored, on every branch. The seq allocator is the branch's own
    # counter (Branch.message_count); both move under a row lock on this conversation.
    message_count = models.PositiveIntegerField(default=0)
    # The branch the UI shows and where a new message goes unless another is named. Set
    # when the conversation is created (its root branch); null only for a moment then.
    active_branch = models.ForeignKey(
        "Branch", null=True, blank=True, on_delete=models.DO_NOTHING, related_name="+"
    )
    # How many branches it has (1 until the first edit or regeneration): lists show it,
    # and a conversation of one branch has no alternatives to look up.
    # Also the database's default, so a release that never names it can create conversations.
    branch_count = models.PositiveIntegerField(default=1, db_default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    last_activity_at = models.DateTimeField(default=timezone.now)
    archived_at = models.DateTimeField(null=True, blank=True)
    flagged = models.BooleanField(default=False)
    flag_reason = models.TextField(blank=True)
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    forked_at_seq = models.PositiveIntegerField(null=True, blank=True)
    # Generation settings; None means the server's default (PARLEY_DEFAULT_TEMPERATURE,
    # PARLEY_DEFAULT_MAX_OUTPUT_TOKENS), so no reply runs unbounded.
    temperature = models.FloatField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Whether the model takes images (else they are named to it: `[image: name, WxH]`).
    vision = models.BooleanField(default=True)
    # Set while an import stores the conversation a batch at a time (null once whole):
    # hidden from every read until then, and deleted when its import was abandoned.
    import_started_at = models.DateTimeField(null=True, blank=True)
    # Organising (models/organising.py): pinned ones come first in lists; one folder at
    # most, and deleting the folder leaves the conversation in none.
    pinned = models.BooleanField(default=False, db_default=False)
    folder = models.ForeignKey(
        "Folder",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="conversations",
        db_index=False,
    )

    objects = ShownConversations()
    # With those: for the import itself, the quota and the clean-up of abandoned imports.
    with_imports = models.Manager()  # noqa: DJ012 (ruff takes the manager above for a field)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(temperature__isnull=True)
                | Q(temperature__gte=0.0, temperature__lte=2.0),
                name="conversation_temperature_range",
            ),
            models.CheckConstraint(
                condition=Q(max_output_tokens__isnull=True) | Q(max_output_tokens__gte=1),
                name="conversation_max_output_tokens_positive",
            ),
        ]
        indexes = [
            # The sidebar and the API list: newest activity first, keyset-paginated.
            models.Index(
                fields=["owner", "-last_activity_at", "-id"], name="conversation_owner_activity"
            ),
            # The sidebar's order: pinned first, then newest activity (also ?pinned=).
            models.Index(
                fields=["owner", "-pinned", "-last_activity_at", "-id"],
                name="conversation_owner_pinned",
            ),
            # A folder's listing, in the same order, without reading the owner's range.
            models.Index(
                fields=["folder", "-pinned", "-last_activity_at", "-id"],
                condition=Q(folder__isnull=False),
                name="conversation_folder",
            ),
            # The admin list (newest activity first over every owner) and the retention
            # purge (last activity older than a cutoff) read this range, never the table.
            models.Index(fields=["-last_activity_at", "-id"], name="conversation_activity"),
            # Imports under way: few rows, found without reading the table.
            models.Index(
                fields=["import_started_at"],
                condition=Q(import_started_at__isnull=False),
                name="conversation_importing",
            ),
        ]
        permissions = [
            # Separate from "view": a moderator can see who has which conversation
            # without being able to read what was said.
            ("view_transcript", "Can read conversation transcripts (audited)"),
        ]

    def __str__(self) -> str:
        # No title: titles are made from the first message, and this label shows up in
        # places (admin breadcrumbs, confirmation pages, autocompletes) read by staff who
        # may not read message text. The short id tells conversations apart.
        count = self.message_count
        return f"untitled ({count} message{'' if count == 1 else 's'}) · {str(self.id)[:8]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Every conversation has its root branch from birth, whichever path creates it.
        if not (self._state.adding and self.active_branch_id is None):
            super().save(*args, **kwargs)
            return
        self.active_branch_id = uuid.uuid4()
        # One transaction: the two rows point at each other, checked at commit.
        with transaction.atomic():
            super().save(*args, **kwargs)
            Branch.objects.create(
                id=self.active_branch_id,
                conversation=self,
                created_at=self.created_at,
                message_count=self.message_count,
            )

    def label(self, *, with_title: bool) -> str:
        """The title for those who may read message text, else the neutral label."""
        return self.title if with_title and self.title else str(self)


class Branch(models.Model):
    """One line of a conversation's tree: edits and regenerations fork new branches.

    A branch's path is its parent's path up to `fork_seq`, then its own messages, whose
    seq continues gapless from `fork_seq + 1`. Nothing is copied: creating a branch
    writes this one row. The parent owns the message at `fork_seq` (or `fork_seq` is 0
    and the parent is the root), so the messages at `fork_seq + 1` of the parent and of
    its children forked there are alternatives of each other.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="branches"
    )
    # Branches and their messages go only with their conversation, as one DELETE per
    # table: nothing cascades row by row (the database's keys still hold at commit).
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.DO_NOTHING, related_name="children"
    )
    fork_seq = models.PositiveIntegerField(default=0)
    # The length of this branch's path (fork_seq + its own messages): the next message
    # appended here gets seq message_count + 1.
    message_count = models.PositiveIntegerField(default=0)
    # The chain above this branch, root first: [[branch id, last seq it gives the path]].
    # Read with the branch, so a path's segments cost no recursive query.
    lineage = models.JSONField(default=list, blank=True, decoder=StorableJSONDecoder)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(parent__isnull=True),
                name="branch_one_root_per_conversation",
            ),
            models.CheckConstraint(
                condition=Q(parent__isnull=False) | Q(fork_seq=0), name="branch_root_forks_at_0"
            ),
            models.CheckConstraint(
                condition=Q(message_count__gte=models.F("fork_seq")),
                name="branch_path_holds_fork_point",
            ),
        ]
        indexes = [
            # A fork point's alternatives: the children of a branch forked at one seq.
            models.Index(fields=["parent", "fork_seq"], name="branch_fork_point"),
            # The branch list, a page at a time, oldest first.
            models.Index(fields=["conversation", "created_at", "id"], name="branch_list"),
        ]

    def __str__(self) -> str:
        return f"branch {str(self.id)[:8]} at {self.fork_seq}"

    @property
    def is_root(self) -> bool:
        return self.parent_id is None


class Message(models.Model):
    Role = MessageRole

    Kind = MessageKind

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    # No index of its own: the unique (branch, seq) index serves every lookup by branch.
    branch = models.ForeignKey(
        Branch, on_delete=models.DO_NOTHING, related_name="messages", db_index=False
    )
    # The position along the branch's path (not along the conversation).
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    kind = models.CharField(max_length=16, choices=MessageKind.choices, default=MessageKind.MESSAGE)
    content = models.TextField(blank=True)
    # What a reasoning model thought before answering (streamed as `reasoning.delta`):
    # shown collapsed, exported, never sent back to the model.
    reasoning = models.TextField(blank=True, default="")
    # How long it thought, from its first reasoning delta to its first answer delta.
    reasoning_ms = models.PositiveIntegerField(null=True, blank=True)
    # [{"id", "name", "arguments"}], arguments a JSON string kept exactly as the model sent it.
    tool_calls = models.JSONField(default=list, blank=True, decoder=StorableJSONDecoder)
    tool_call_id = models.CharField(max_length=200, blank=True)
    name = models.CharField(max_length=200, blank=True)
    # Both links between runs and messages are DO_NOTHING without a database constraint:
    # runs and messages are only ever deleted together with their conversation, so a
    # delete is one DELETE per table with no per-row collection in Python and no per-row
    # check at commit (PostgreSQL spent seconds checking 100k deleted rows).
    run = models.ForeignKey(
        "Run",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="messages",
    )
    usage = models.JSONField(null=True, blank=True, decoder=StorableJSONDecoder)
    created_at = models.DateTimeField(default=timezone.now)
    provider_payload = models.JSONField(null=True, blank=True, decoder=StorableJSONDecoder)
    # A copy made by an import or a fork: it happened elsewhere, so the usage dashboard
    # counts neither the message nor its tokens as this user's own spend. Not exported,
    # so export -> import -> export stays identical.
    copied = models.BooleanField(default=False)

    class Meta:
        ordering = ["conversation", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["branch", "seq"], name="message_unique_branch_seq"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="message_seq_positive"),
            models.CheckConstraint(
                condition=Q(role__in=MessageRole.values), name="message_role_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=MessageKind.values), name="message_kind_valid"
            ),
            # Events and draft notices are system messages; nothing else may claim those kinds.
            models.CheckConstraint(
                condition=Q(kind="message") | Q(role="system"), name="message_kind_is_system"
            ),
            # A tool result must say which call it answers.
            models.CheckConstraint(
                condition=~Q(role="tool") | ~Q(tool_call_id=""), name="message_tool_has_call_id"
            ),
        ]
        indexes = [
            # The usage dashboard aggregates a date range of messages.
            models.Index(fields=["created_at"], name="message_created_at"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.role}"
