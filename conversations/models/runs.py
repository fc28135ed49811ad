"""The tool loop's runs: one per reply, at most one active per conversation (a database
constraint, so no code path can start a second), with the lease a step holds while it
works (engine/runs.py)."""

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.text import StorableJSONDecoder
from conversations.models.conversations import Branch, Conversation, Message


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Stopped at the iteration limit.
    INCOMPLETE = "incomplete"


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
    # Where the run's messages go and whose path its model reads, whichever branch the
    # conversation shows meanwhile.
    branch = models.ForeignKey(
        Branch,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
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
    error = models.JSONField(null=True, blank=True, decoder=StorableJSONDecoder)
    usage = models.JSONField(default=dict, blank=True, decoder=StorableJSONDecoder)
    # Conversation.draft_edit_count when this run's latest model call read its input (null
    # before the first call): the tools that call asked for must not write over a draft
    # the user changed after that moment, because the model never saw the user's words.
    draft_edits_seen = models.PositiveIntegerField(null=True, blank=True)
    instructions = models.TextField(blank=True, default="")  # engine/responses.py: a preamble
    # the client runs these
    client_tools = models.JSONField(default=list, blank=True, decoder=StorableJSONDecoder)
    # over the conversation's
    generation = models.JSONField(default=dict, blank=True, decoder=StorableJSONDecoder)
    metadata = models.JSONField(default=dict, blank=True, decoder=StorableJSONDecoder)
    # echoed back, previous_run_id
    options = models.JSONField(default=dict, blank=True, decoder=StorableJSONDecoder)
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
