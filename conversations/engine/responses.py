"""Responses of the OpenAI-compatible API: a response is a run.

- `response_start`: the request's input stored as messages on the branch the run answers
  on, and a queued run carrying what the request asked for besides (instructions, client
  tools, generation settings, metadata), in one transaction (`runs.run_begin`). Continuing
  from a response that is no longer the tip of its branch forks a new branch there, as an
  edit does, so the older path stays as an alternative.
- `response_unstored`: `store: false`. The one loop runs in this process over the
  history the request names plus its input (engine/unstored.py), nothing is written, and
  what happened comes back as the event list a stored run's log would hold, so the
  transport answers both kinds alike.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from accounts.models import User
from conversations import context, selectors, services
from conversations.engine.llm import provider_get
from conversations.engine.runs import run_begin
from conversations.engine.unstored import UnstoredRun, unstored_run, unstored_run_go
from conversations.models import Branch, Conversation, Message, Run
from conversations.services import NewMessage
from conversations.services.common import raise_if
from conversations.tools import tool_default_names


@dataclass(frozen=True)
class ResponseAsk:
    """What a response request asks for besides where it goes."""

    messages: Sequence[NewMessage]
    model: str = ""
    instructions: str = ""
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    generation: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def run_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "instructions": self.instructions,
            "client_tools": self.client_tools,
            "generation": self.generation,
            "metadata": self.metadata,
            "options": self.options,
        }
        if self.model:
            fields["model"] = self.model
        return fields


def response_start(
    *,
    user: User,
    ask: ResponseAsk,
    conversation: Conversation | None = None,
    previous: Run | None = None,
) -> Run:
    """Store the input and start the run answering it: in `conversation`, after the
    response `previous`, or in a new conversation when neither is given. RunActive while
    another run of that conversation is active; nothing is stored then."""
    with transaction.atomic():
        if previous is not None:
            conversation = previous.conversation
        elif conversation is None:
            conversation = services.conversation_create(owner=user)
        target = conversation

        def prepare(locked: Conversation, run_id: uuid.UUID) -> tuple[Branch, Message, Message]:
            branch = _branch_after(target, previous) if previous is not None else None
            branch, rows = services.response_input_store(
                conversation=target,
                locked=locked,
                messages=ask.messages,
                branch=branch,
                run_id=run_id,
            )
            return branch, rows[-1], rows[-1]

        _, _, run = run_begin(conversation=target, client_id="", prepare=prepare)
        # In the transaction that created the run: no worker sees it before these.
        fields = ask.run_fields()
        if previous is not None:
            fields["options"] = {**ask.options, "previous_run_id": str(previous.pk)}
        Run.objects.filter(pk=run.pk).update(**fields)
        for name, value in fields.items():
            setattr(run, name, value)
    return run


def _branch_after(conversation: Conversation, previous: Run) -> Branch:
    """The branch a response continuing `previous` goes on: the previous one's own, or a
    fork of it right after the previous response's last message when its path went on."""
    branch = selectors.branch_get(conversation=conversation, branch_id=previous.branch_id)
    last = (
        Message.objects.filter(run=previous, branch=branch).order_by("-seq").first()
        or previous.trigger_message
    )
    tip = last.seq if last is not None else branch.message_count
    if tip >= branch.message_count:
        return branch
    return services.branch_fork(conversation=conversation, source=branch, fork_seq=tip)


# --- store: false ----------------------------------------------------------------------


def response_unstored(
    *,
    user: User,
    ask: ResponseAsk,
    conversation: Conversation | None = None,
    previous: Run | None = None,
) -> tuple[Run, list[dict[str, Any]]]:
    """Run a response that keeps nothing: an unsaved run (its fields as a stored one's)
    and the events of its run. The history is the named conversation's or previous
    response's path (read, never written) followed by the input; the tools and settings
    are that conversation's (the server's defaults without one). Its tool results must
    answer calls of that path or of the input before them, as a stored response's do
    (ValidationFailed)."""
    source = previous.conversation if previous is not None else conversation
    path = response_path_read(conversation=conversation, previous=previous)
    raise_if(services.message_batch_pairing_problems(branch=path, messages=ask.messages))
    # Placed on the path read, as a stored response's input is on its branch.
    messages = services.compaction_place(
        owner=user.pk, branch=path, last=path.message_count if path else 0, messages=ask.messages
    )
    run, scratch = unstored_run(
        owner=user,
        model=ask.model or settings.PARLEY_MODEL,
        tools=source.tools if source is not None else tool_default_names(),
        draft=source.draft if source is not None else "",
        conversation=source,
        **{k: v for k, v in ask.run_fields().items() if k != "model"},
    )
    if previous is not None:
        run.options = {**ask.options, "previous_run_id": str(previous.pk)}
    history, files_read = response_history_read(source, path)
    sink = UnstoredRun(
        run=run,
        conversation=scratch,
        head=[context.system_message(source.system_prompt)]
        if source is not None and source.system_prompt
        else [],
        # The input's own files (NewMessage.files) come read already.
        before=[*history, *messages],
        files_read=files_read,
    )
    unstored_run_go(sink, provider=provider_get(), label=f"response {run.id}")
    return run, sink.events


def response_path_read(*, conversation: Conversation | None, previous: Run | None) -> Branch | None:
    """The stored path a response kept nowhere reads: the previous response's branch up to
    its last message, or the conversation's active branch (None: no stored path)."""
    if previous is not None:
        branch = selectors.branch_get(
            conversation=previous.conversation, branch_id=previous.branch_id
        )
        last = Message.objects.filter(run=previous).order_by("-seq").first()
        branch.message_count = last.seq if last is not None else branch.message_count
        return branch
    if conversation is not None:
        return selectors.branch_active(conversation=conversation)
    return None


def response_history_read(
    conversation: Conversation | None, path: Branch | None
) -> tuple[list[context.StoredMessage], context.FilesRead | None]:
    """The tail of the stored path as the model reads it, and the reader of its files (as
    a stored run reads them: selectors.conversation_model_input)."""
    if conversation is None or path is None:
        return [], None
    rows = selectors.history_tail(
        conversation=conversation,
        max_messages=settings.PARLEY_CONTEXT_MAX_MESSAGES,
        branch=path,
    )
    described, files_read = selectors.history_files(
        rows=rows,
        vision=conversation.vision,
        text_chars=context.file_text_chars(settings.PARLEY_CONTEXT_TOKENS),
    )
    return list(described), files_read
