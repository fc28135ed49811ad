"""Conversations, their ordered messages, tool-loop runs and the audit trail.

Invariants live in the database (unique seq per conversation, one active run per
conversation, closed sets of roles/kinds/statuses) so no code path can break them.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

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
    # A context event: stored system message that triggers no run.
    EVENT = "event"
    # The notice stored when the user edited the draft.
    DRAFT_EDIT = "draft_edit"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Stopped at the iteration limit.
    INCOMPLETE = "incomplete"


class AuditAction(models.TextChoices):
    VIEWED = "viewed"
    EXPORTED = "exported"
    DELETED = "deleted"
    FLAGGED = "flagged"
    UNFLAGGED = "unflagged"
    IMPORTED = "imported"
    PURGED = "purged"


class Conversation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    # The preamble: sent fresh on every model call, never stored as a history row.
    system_prompt = models.TextField(blank=True)
    model = models.CharField(max_length=100, blank=True)
    tools = models.JSONField(default=default_tools, blank=True)
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
    metadata = models.JSONField(default=dict, blank=True)
    # Also the seq allocator: messages are only ever appended, so the next seq is
    # message_count + 1, read and bumped under a row lock on this conversation.
    message_count = models.PositiveIntegerField(default=0)
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
            # The admin list (newest activity first over every owner) and the retention
            # purge (last activity older than a cutoff) read this range, never the table.
            models.Index(fields=["-last_activity_at", "-id"], name="conversation_activity"),
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

    def label(self, *, with_title: bool) -> str:
        """The title for those who may read message text, else the neutral label."""
        return self.title if with_title and self.title else str(self)


class Message(models.Model):
    Role = MessageRole

    Kind = MessageKind

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
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
    tool_calls = models.JSONField(default=list, blank=True)
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
    usage = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    provider_payload = models.JSONField(null=True, blank=True)
    # A copy made by an import or a fork: it happened elsewhere, so the usage dashboard
    # counts neither the message nor its tokens as this user's own spend. Not exported,
    # so export -> import -> export stays identical.
    copied = models.BooleanField(default=False)

    class Meta:
        ordering = ["conversation", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "seq"], name="message_unique_seq"),
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


RUN_ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.IN_PROGRESS)
RUN_TERMINAL_STATUSES = (
    RunStatus.COMPLETED,
    RunStatus.FAILED,
    RunStatus.CANCELLED,
    RunStatus.INCOMPLETE,
)


class Run(models.Model):
    Status = RunStatus

    # The two halves of the status set, defined once (above): active until it ends.
    ACTIVE_STATUSES = RUN_ACTIVE_STATUSES
    TERMINAL_STATUSES = RUN_TERMINAL_STATUSES

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs")
    trigger_message = models.ForeignKey(
        Message,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    model = models.CharField(max_length=100, blank=True)
    iterations = models.PositiveIntegerField(default=0)
    attempt = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Which step holds the lease: a step that lost it (it stalled past expiry and another
    # worker took over) finds its token gone and writes nothing.
    lease_token = models.UUIDField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # A client's idempotency key for "send this message": the same key starts one run.
    client_id = models.CharField(max_length=100, blank=True)
    error = models.JSONField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    # Conversation.draft_edit_count when this run's latest model call read its input (null
    # before the first call): the tools that call asked for must not write over a draft
    # the user changed after that moment, because the model never saw the user's words.
    draft_edits_seen = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(status__in=list(RUN_ACTIVE_STATUSES)),
                name="run_one_active_per_conversation",
            ),
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="run_status_valid"
            ),
            models.UniqueConstraint(
                fields=["conversation", "client_id"],
                condition=~Q(client_id=""),
                name="run_unique_client_id",
            ),
        ]
        indexes = [models.Index(fields=["status", "lease_expires_at"], name="run_status_lease")]

    def __str__(self) -> str:
        return f"Run {self.id} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE_STATUSES


class AuditEvent(models.Model):
    """Append-only record of privileged access. Plain ids so it outlives what it describes."""

    Action = AuditAction

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    actor_username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    conversation_id = models.UUIDField(null=True, blank=True, db_index=True)
    owner_id = models.BigIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=AuditAction.values), name="audit_action_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.actor_username} {self.action} {self.conversation_id}"


class DailyMessageCount(models.Model):
    """User messages sent per user per UTC day, kept while a daily quota is configured.

    A counter row rather than a COUNT over messages: the quota is checked on every send,
    and counting a busy user's day of messages joined through their conversations would
    cost more each time. The row lock taken by the increment also serialises one user's
    concurrent sends, so two of them cannot both pass the last free slot.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    messages = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "day"], name="daily_message_count_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} {self.day}: {self.messages}"


class UsageDay(models.Model):
    """One conversation's own usage on one UTC day: the rows the usage dashboard adds up.

    Kept current in the transaction that stores the messages (services/usage.py), so the
    dashboard reads a few rows per conversation and day instead of every message. One row
    per conversation rather than per user, so "conversations active" over a range stays a
    count of distinct conversations. Copies (imports, forks) never count: they were spent
    elsewhere.

    The dashboard reports spend that happened, so deleting what caused it does not take it
    back: the conversation is a plain id (no foreign key: its deletion leaves the row), and
    a deleted account's rows lose their owner but keep counting in the daily totals.
    """

    day = models.DateField()
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    conversation_id = models.UUIDField()
    messages = models.PositiveIntegerField(default=0)
    user_messages = models.PositiveIntegerField(default=0)
    # The providers' reported counts, each kept apart: prompt and completion tokens are
    # priced differently, and once a conversation is deleted the split cannot be read back.
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    total_tokens = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            # Also the index the dashboard's date range reads.
            models.UniqueConstraint(fields=["day", "conversation_id"], name="usage_day_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.conversation_id}: {self.messages}"
