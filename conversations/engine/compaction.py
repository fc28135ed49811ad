"""A conversation's context compacted: one model call, through the one loop as a run kept
nowhere (engine/unstored.py), with no tools, reads the previous response's path and the
request's input and writes a summary that lets the conversation go on without them.

Nothing is stored: the caller hands the summary to the client (who sends it back as a
compaction item, services/compactions.py), with the user messages the compacted history
held, newest first while they fit a quarter of the context's token budget, as they were.
A failed model call raises ProviderError: there is no summary to give.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings

from accounts.models import User
from conversations import context, selectors, services
from conversations.engine.llm import provider_get
from conversations.engine.llm.base import ProviderError
from conversations.engine.responses import response_history_read, response_path_read
from conversations.engine.unstored import UnstoredRun, unstored_run, unstored_run_go
from conversations.models import Branch, Message, Run
from conversations.services import NewMessage

COMPACTION_INSTRUCTIONS = (
    "You are compacting a conversation so that it can go on in a smaller context. Write a "
    "summary of everything below that lets the assistant continue without it: the facts "
    "established, the decisions taken, the questions still open, the user's goals and "
    "preferences, and the results of tool calls that still matter. Keep names, numbers and "
    "exact wording where they matter. Write only the summary, in the conversation's language."
)
# Said last, so a model reads the conversation as material rather than a turn to answer.
SUMMARY_NOW = "Write the summary of the conversation above now, as instructed."
# The share of the context's token budget the user messages kept verbatim may take.
KEPT_SHARE = 4


@dataclass(frozen=True)
class Compacted:
    summary: str
    # The upstream's counts for the call (chat-completion names), empty when it gave none.
    usage: dict[str, Any] = field(default_factory=dict)
    # The last stored message the summary covers (None: it covers no stored message).
    covers: UUID | None = None
    # The user messages of the compacted history kept as they were, in order.
    kept: list[str] = field(default_factory=list)


def context_compact(
    *,
    user: User,
    model: str,
    previous: Run | None,
    messages: Sequence[NewMessage],
    instructions: str = "",
) -> Compacted:
    """The summary of `previous`'s path (the response's own messages included) followed by
    `messages`. ValidationFailed for a compaction among `messages` made for another user;
    QuotaExceeded once the user's daily messages are used up (the model works as for a
    turn); ProviderError when the model call fails or says nothing."""
    source = previous.conversation if previous is not None else None
    path = response_path_read(conversation=None, previous=previous)
    last = path.message_count if path is not None else 0
    messages = services.compaction_place(owner=user.pk, branch=path, last=last, messages=messages)
    history, files_read = response_history_read(source, path)
    run, scratch = unstored_run(
        owner=user,
        model=model or settings.PARLEY_MODEL,
        tools=[],
        conversation=source,
        instructions=COMPACTION_INSTRUCTIONS,
    )
    read = [*history, *messages]
    sink = UnstoredRun(
        run=run,
        conversation=scratch,
        head=[context.system_message(instructions)] if instructions else [],
        before=[*read, context.HistoryMessage(role=Message.Role.SYSTEM, content=SUMMARY_NOW)],
        files_read=files_read,
    )
    unstored_run_go(sink, provider=provider_get(), label=f"compaction {run.id}")
    if run.status == Run.Status.FAILED and run.error is not None:
        raise ProviderError(run.error["code"], run.error["message"])
    summary = sink.reply_text().strip()
    if not summary:
        raise ProviderError("provider_error", "The model wrote no summary.")
    return Compacted(
        # Cut to what a stored message holds, as it will be once sent back.
        summary=summary[: settings.PARLEY_MAX_MESSAGE_CHARS],
        usage=dict(run.usage or {}),
        covers=_last_message(path, last),
        kept=_user_texts(context.compaction_applied(read)),
    )


def _last_message(path: Branch | None, last: int) -> UUID | None:
    if path is None or last <= 0:
        return None
    rows = selectors.path_rows(branch=path, after=last - 1, last=last)
    return rows[0]["id"] if rows else None


def _user_texts(history: Sequence[context.StoredMessage]) -> list[str]:
    """The user messages' texts, newest first while they fit their share of the budget,
    in their order."""
    budget = settings.PARLEY_CONTEXT_TOKENS // KEPT_SHARE
    kept: list[str] = []
    for message in reversed(history):
        if message.role != Message.Role.USER or not message.content.strip():
            continue
        cost = context.estimate_tokens({"role": "user", "content": message.content})
        if cost > budget:
            break
        kept.append(message.content)
        budget -= cost
    kept.reverse()
    return kept
