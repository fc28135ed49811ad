"""What a run's tool settings allow, round by round: the tools a model call is offered,
the tool choice it goes with, and the server tool calls it may still make.

A response's settings (Run.generation, read by the one loop for every sink):

- `tool_choice` applies to the run's first model call only; later calls of the run go
  `auto`, as OpenAI's do. With Parley's own tools in the loop, `required` on every call
  would call tools until the run's iteration limit.
- `allowed_tools` (names): only those tools are offered, on every call of the run.
- `max_tool_calls`: the most calls the server's own tools make in the run. Once used up,
  the next call goes with tool choice `none`, so the model answers in text; calls asked
  beyond it in one reply are not run, and their result says why (every call keeps its
  result). Client-declared function tools end the run anyway and do not count.
"""

from typing import Any

from conversations.engine.sink import RunSink, ToolCall, tool_calls_limit
from conversations.models import Run
from conversations.tools import ToolResult


def tools_offered(run: Run, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`tools` (function tool definitions) less those the run does not allow."""
    allowed = (run.generation or {}).get("allowed_tools")
    if allowed is None:
        return tools
    return [tool for tool in tools if tool["function"]["name"] in allowed]


def tool_choice_next(sink: RunSink) -> str | dict[str, Any] | None:
    """The tool choice of the run's next model call (None: none is sent)."""
    run = sink.run
    choice = (run.generation or {}).get("tool_choice")
    limit = tool_calls_limit(run)
    if limit is not None and run.iterations and sink.replied().tool_results >= limit:
        return "none"
    if run.iterations == 0 or choice is None:
        return choice
    return "auto"


def tool_calls_left(sink: RunSink) -> int | None:
    """How many more calls the run's server tools may make (None: no limit)."""
    limit = tool_calls_limit(sink.run)
    if limit is None:
        return None
    return max(0, limit - sink.replied().tool_results)


def call_refused(run: Run, call: ToolCall, *, left: int | None) -> ToolResult | None:
    """The result of a call the run's settings do not let run (`left`: the calls the run
    may still make, this one included), or None when it runs."""
    allowed = (run.generation or {}).get("allowed_tools")
    if allowed is not None and call["name"] not in allowed:
        return ToolResult(
            output=f"Not run: {call['name']} is not one of the tools this response allows.",
            is_error=True,
        )
    if left is not None and left <= 0:
        return ToolResult(
            output=f"Not run: this response may make at most {tool_calls_limit(run)} tool "
            "calls, and they are used up. Answer with what you have.",
            is_error=True,
        )
    return None
