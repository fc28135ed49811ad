"""Tool results answer calls: the rule every path of a conversation keeps, whichever door
wrote it (an import, a client's items and input over the OpenAI-compatible API, an item
taken out, a stateless state), so whatever is stored exports and imports back.

Read along one path, in order: a tool message names (`tool_call_id`) a call an earlier
assistant message of that path made and no result has answered yet; a call's id is not
empty and not reused while its call still waits for a result; only tool messages name a
call. A call may stay unanswered (a run stopped among its tools, a client that never
answered), and an answered call's id may be used again.
"""

from collections.abc import Iterable, Sequence

from conversations.errors import Problem

TOOL = "tool"


class OpenCalls:
    """The calls of one path still waiting for a result, as the path is read in order."""

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._ids = set(ids)

    def copy(self) -> "OpenCalls":
        return OpenCalls(self._ids)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._ids

    def read(
        self, *, role: str, call_ids: Sequence[str], tool_call_id: str | None, path: str
    ) -> list[Problem]:
        """Take the path's next message into account (its calls open, its result closes
        one); what breaks the rule, by the JSON paths of the message at `path`."""
        problems: list[Problem] = []
        for index, call_id in enumerate(call_ids):
            where = f"{path}.tool_calls[{index}].id"
            if not call_id:
                problems.append(Problem(where, "must not be empty"))
            elif call_id in self._ids:
                problems.append(Problem(where, f"{call_id!r} is already an unanswered call"))
            else:
                self._ids.add(call_id)
        where = f"{path}.tool_call_id"
        if role == TOOL:
            if not tool_call_id:
                problems.append(Problem(where, "a tool message needs one"))
            elif tool_call_id in self._ids:
                self._ids.remove(tool_call_id)
            else:
                problems.append(
                    Problem(where, f"{tool_call_id!r} answers no earlier unanswered tool call")
                )
        elif tool_call_id:
            problems.append(Problem(where, "only tool messages carry one"))
        return problems

    def skim(self, *, role: str, call_ids: Sequence[str], tool_call_id: str | None) -> None:
        """`read` for a message already stored: what it opens and closes, its problems
        (a row stored before the rule held) left aside."""
        self.read(role=role, call_ids=call_ids, tool_call_id=tool_call_id, path="")
