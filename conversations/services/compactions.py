"""Compactions placed on a path: a summary of earlier turns (a system message of kind
`compaction`) names the last stored message it covers by id; on the path it joins, that
becomes the seq up to which the model's input leaves turns out (`covers_seq`, read by
context.compaction_applied). A covered message not on that path covers nothing.

Every door's compaction arrives with the user it was made for: one made for another user
is refused, so no one can have the model read someone else's summary.
"""

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from uuid import UUID

from conversations.errors import Problem, ValidationFailed
from conversations.models import Branch, Message
from conversations.selectors.branches import segment_owning

if TYPE_CHECKING:
    from conversations.services.messages import NewMessage

# The payload keys: the covered message's id and the user the summary was made for, as
# the door gives them; the seq the covered message has on this path, as stored.
COVERS = "covers"
MADE_FOR = "user"
COVERS_SEQ = "covers_seq"


def compaction_place(
    *, owner: Any, branch: Branch | None, last: int, messages: Sequence["NewMessage"]
) -> Sequence["NewMessage"]:
    """`messages`, to follow seq `last` of `branch`'s path (no path at all for None), each
    compaction among them with the seq of the message it covers on that path (0 when it
    is not there). ValidationFailed for one made for a user other than `owner`. Reads
    nothing unless a compaction is among them."""
    if not any(new.kind == Message.Kind.COMPACTION for new in messages):
        return messages
    problems: list[Problem] = []
    placed = list(messages)
    for index, new in enumerate(messages):
        if new.kind != Message.Kind.COMPACTION:
            continue
        payload: dict[str, Any] = dict(new.provider_payload or {})
        made_for = payload.pop(MADE_FOR, owner)
        if str(made_for) != str(owner):
            problems.append(
                Problem(
                    f"$.messages[{index}].encrypted_content",
                    "this compaction was made for another user",
                )
            )
            continue
        covers = payload.get(COVERS)
        payload[COVERS_SEQ] = _covered_seq(branch, last, covers) if branch is not None else 0
        placed[index] = replace(new, role=Message.Role.SYSTEM, provider_payload=payload)
    if problems:
        raise ValidationFailed(problems)
    return placed


def _covered_seq(branch: Branch, last: int, covers: Any) -> int:
    """The seq of message `covers` on `branch`'s path up to seq `last`, or 0."""
    try:
        key = UUID(str(covers))
    except ValueError:
        return 0
    found = (
        Message.objects.filter(pk=key, conversation_id=branch.conversation_id)
        .values_list("seq", "branch_id")
        .first()
    )
    if found is None:
        return 0
    seq, owner_branch = found
    if seq > last or segment_owning(branch, seq).branch_id != owner_branch:
        return 0
    return int(seq)


def compaction_shifted(payload: Any, *, removed_seq: int) -> Any:
    """A compaction's payload once the message at `removed_seq` left the path before it
    and the messages after that moved up one seq: it still covers the same turns."""
    if not isinstance(payload, dict):
        return payload
    covered = payload.get(COVERS_SEQ)
    if isinstance(covered, int) and covered >= removed_seq:
        return {**payload, COVERS_SEQ: covered - 1}
    return payload
