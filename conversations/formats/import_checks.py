"""What an imported conversation must mean, whatever form it came in: settings within
their limits, roles and kinds that fit, sequence numbers gapless along every path, a
tree of branches whose fork points hold, every tool result answering an earlier call
of its path, text any database can store.
"""

from typing import TYPE_CHECKING, Any
from uuid import UUID

from conversations import validation
from conversations.errors import Problem
from conversations.formats.import_tree import nesting_problems, tree_messages
from conversations.tool_pairing import OpenCalls
from conversations.tools.registry import tool_names_problems

if TYPE_CHECKING:
    from conversations.formats.importing import (
        ImportedBranch,
        ImportedConversation,
        ImportedMessage,
    )


def _nul_problems(value: Any, path: str) -> list[Problem]:
    """NUL anywhere in stored JSON fails on PostgreSQL, so find it up front."""
    if isinstance(value, str):
        return (
            [Problem(path, "contains a NUL character, which cannot be stored")]
            if ("\x00" in value)
            else []
        )
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            found += _nul_problems(key, f"{path}.{key!r}") + _nul_problems(item, f"{path}.{key}")
        return found
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _nul_problems(item, f"{path}[{i}]")]
    return []


def conversation_problems(conversation: "ImportedConversation") -> list[Problem]:
    base = "$.conversation"
    return (
        validation.title_problems(conversation.title, path=f"{base}.title")
        + validation.system_prompt_problems(
            conversation.system_prompt, path=f"{base}.system_prompt"
        )
        + validation.model_problems(conversation.model, path=f"{base}.model")
        + tool_names_problems(conversation.tools, path=f"{base}.tools")
        + validation.metadata_problems(conversation.metadata, path=f"{base}.metadata")
        + validation.draft_problems(conversation.draft, path=f"{base}.draft")
        + validation.temperature_problems(
            getattr(conversation, "temperature", None), path=f"{base}.temperature"
        )
        + validation.max_output_tokens_problems(
            getattr(conversation, "max_output_tokens", None), path=f"{base}.max_output_tokens"
        )
        + validation.vision_problems(getattr(conversation, "vision", True), path=f"{base}.vision")
        + validation.tag_names_problems(getattr(conversation, "tags", []), path=f"{base}.tags")
        + _folder_problems(getattr(conversation, "folder", None), path=f"{base}.folder")
    )


def _folder_problems(name: str | None, *, path: str) -> list[Problem]:
    return [] if name is None else validation.folder_name_problems(name, path=path)


def _own_problems(message: "ImportedMessage", path: str) -> list[Problem]:
    """What one message must satisfy wherever it sits."""
    problems: list[Problem] = []
    problems += validation.content_problems(message.content, path=f"{path}.content")
    problems += validation.content_problems(
        getattr(message, "reasoning", ""), path=f"{path}.reasoning"
    )
    if (getattr(message, "reasoning_ms", None) or 0) < 0:
        problems.append(Problem(f"{path}.reasoning_ms", "must not be negative"))
    problems += validation.usage_problems(message.usage, path=f"{path}.usage")
    problems += _nul_problems(message.provider_payload, f"{path}.provider_payload")
    # Checked here, not left to the database: PostgreSQL fails on an over-long varchar.
    problems += validation.text_problems(
        message.name or "", path=f"{path}.name", max_chars=validation.TOOL_NAME_MAX
    )
    problems += validation.text_problems(
        message.tool_call_id or "",
        path=f"{path}.tool_call_id",
        max_chars=validation.TOOL_CALL_ID_MAX,
    )
    if message.kind != "message" and message.role != "system":
        problems.append(Problem(f"{path}.kind", f"{message.kind!r} requires role 'system'"))
    if message.tool_calls and message.role != "assistant":
        problems.append(Problem(f"{path}.tool_calls", "only assistant messages call tools"))
    return problems


def _call_problems(message: "ImportedMessage", path: str, pending: OpenCalls) -> list[Problem]:
    """Tool calls and results along a path (the rule every door keeps, tool_pairing.py):
    `pending` holds the unanswered calls."""
    problems: list[Problem] = []
    for call_index, call in enumerate(message.tool_calls):
        call_path = f"{path}.tool_calls[{call_index}]"
        problems += _nul_problems(call.model_dump(), call_path)
        if not call.name:
            problems.append(Problem(f"{call_path}.name", "must not be empty"))
    return problems + pending.read(
        role=message.role,
        call_ids=[call.id for call in message.tool_calls],
        tool_call_id=message.tool_call_id,
        path=path,
    )


def message_problems(messages: "list[ImportedMessage]") -> list[Problem]:
    """One line of messages: seqs gapless from 1, every result answering an earlier call."""
    problems: list[Problem] = []
    pending = OpenCalls()
    for index, message in enumerate(messages):
        path = f"$.messages[{index}]"
        if getattr(message, "branch_id", None) is not None:
            problems.append(Problem(f"{path}.branch_id", "names a branch; $.branches lists none"))
        if message.seq != index + 1:
            problems.append(
                Problem(f"{path}.seq", f"is {message.seq}; expected {index + 1} (gapless from 1)")
            )
        problems += _own_problems(message, path) + _call_problems(message, path, pending)
    return problems


def _branch_problems(
    branches: "list[ImportedBranch]", counts: dict[UUID, int], active: UUID | None
) -> list[Problem]:
    """The tree's shape: one root first, parents before children, each fork point on
    one of its parent's own messages (or at 0 on the root)."""
    problems: list[Problem] = []
    if not branches or branches[0].parent_id is not None:
        problems.append(Problem("$.branches", "must start with the root branch (parent_id null)"))
    seen: dict[UUID, ImportedBranch] = {}
    for index, branch in enumerate(branches):
        path = f"$.branches[{index}]"
        parent = seen.get(branch.parent_id) if branch.parent_id is not None else None
        if branch.id in seen:
            problems.append(Problem(f"{path}.id", "is listed twice"))
        elif index and branch.parent_id is None:
            problems.append(Problem(f"{path}.parent_id", "a conversation has one root branch"))
        elif branch.parent_id is not None and parent is None:
            problems.append(Problem(f"{path}.parent_id", "names no branch listed before it"))
        elif parent is None and branch.fork_seq != 0:
            problems.append(Problem(f"{path}.fork_seq", "is 0 on the root branch"))
        elif parent is not None:
            owns = parent.fork_seq < branch.fork_seq <= parent.fork_seq + counts.get(parent.id, 0)
            at_root = branch.fork_seq == 0 and parent.parent_id is None
            if not (owns or at_root):
                problems.append(
                    Problem(
                        f"{path}.fork_seq",
                        f"is {branch.fork_seq}; it must name one of its parent's own messages "
                        "(or be 0 on the root)",
                    )
                )
        seen.setdefault(branch.id, branch)
    if active is not None and active not in seen:
        problems.append(Problem("$.conversation.active_branch_id", "names no listed branch"))
    return problems


def tree_problems(
    branches: "list[ImportedBranch]", messages: "list[ImportedMessage]", *, active: UUID | None
) -> list[Problem]:
    """A tree of branches: each branch's own messages listed together (in the order of
    $.branches) with seqs gapless from its fork point, and the tool-call rule holding
    along every path. The tree is walked depth first (formats/import_tree.py), so the
    check reads every message once; branches nested too deeply to store are refused."""
    order = {branch.id: index for index, branch in enumerate(branches)}
    counts: dict[UUID, int] = {}
    problems: list[Problem] = []
    last_rank = 0
    for index, message in enumerate(messages):
        key = getattr(message, "branch_id", None)
        if key not in order:
            problems.append(Problem(f"$.messages[{index}].branch_id", "names no listed branch"))
            continue
        if order[key] < last_rank:
            problems.append(
                Problem(f"$.messages[{index}].branch_id", "messages go branch by branch")
            )
        last_rank = order[key]
        counts[key] = counts.get(key, 0) + 1
    problems += _branch_problems(branches, counts, active)
    if problems:
        return problems
    pending = OpenCalls()
    found: dict[int, list[Problem]] = {}
    for index, message, expected in tree_messages(branches, messages, pending):
        path = f"$.messages[{index}]"
        mine: list[Problem] = []
        found[index] = mine
        if message.seq != expected:
            mine.append(
                Problem(f"{path}.seq", f"is {message.seq}; expected {expected} on its branch")
            )
        mine += _own_problems(message, path) + _call_problems(message, path, pending)
    return nesting_problems(branches) + [p for index in sorted(found) for p in found[index]]
