"""The built-in tools, enabled in every new conversation. Registered when the app is ready
(conversations/apps.py), since they use the services and selectors."""

import ast
import math
import operator
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from conversations import selectors, services, validation
from conversations.errors import DraftEditedMeanwhile, Problem, ValidationFailed
from conversations.event_types import DRAFT_UPDATED
from conversations.tools.registry import ToolContext, ToolError, tool

Number = int | float

# ---------------------------------------------------------------------------------------
# calculator: an allow-list walk over the parsed expression; nothing is ever evaluated by
# Python itself, so names, attributes, calls and imports simply have no meaning here.

MAX_EXPRESSION_CHARS = 1000
# Integers beyond this many bits (~1,200 digits) are refused: big-int arithmetic on
# model-chosen numbers could otherwise take a worker's CPU and memory for minutes.
MAX_INT_BITS = 4096
SIGNIFICANT_DIGITS = 12

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "exp": math.exp,
    "log": math.log,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
}
_NOT_ALLOWED = {
    ast.Attribute: "attribute access is not allowed",
    ast.Lambda: "lambda is not allowed",
    ast.Compare: "comparisons are not supported",
    ast.BoolOp: "and/or are not supported",
    ast.Subscript: "indexing is not supported",
}
_HELP = (
    "use numbers, + - * / // % **, parentheses, the constants "
    + ", ".join(_CONSTANTS)
    + " and the functions "
    + ", ".join(_FUNCTIONS)
)


def _checked(value: Any) -> Number:
    """Refuse results that are not finite real numbers of a sane size."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(f"the result is not a real number ({type(value).__name__})")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is too large (overflow)")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError(f"the result is too large (more than {MAX_INT_BITS} bits)")
    return value


def _power(base: Number, exponent: Number) -> Number:
    # Decide before computing: 10**10**10 would never finish.
    # bit_length() - 1 is a lower bound of log2(base), so this never refuses wrongly.
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and (abs(base).bit_length() - 1) * exponent > MAX_INT_BITS
    ):
        raise ToolError(f"the result is too large (more than {MAX_INT_BITS} bits)")
    return _checked(base**exponent)


def _evaluate(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ToolError(f"{node.value!r} is not a number; {_HELP}")
        return _checked(node.value)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        binary = _BINARY.get(type(node.op))
        if binary is None:
            raise ToolError(f"the operator {type(node.op).__name__} is not supported; {_HELP}")
        return _checked(binary(left, right))
    if isinstance(node, ast.UnaryOp):
        unary = _UNARY.get(type(node.op))
        if unary is None:
            raise ToolError(f"the operator {type(node.op).__name__} is not supported; {_HELP}")
        return _checked(unary(_evaluate(node.operand)))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise ToolError(f"unknown name {node.id!r}; {_HELP}")
    if isinstance(node, ast.Call):
        return _call(node)
    reason = _NOT_ALLOWED.get(type(node), f"{type(node).__name__} is not allowed")
    raise ToolError(f"{reason}; {_HELP}")


def _call(node: ast.Call) -> Number:
    if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
        shown = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
        raise ToolError(f"the function {shown!r} is not available; {_HELP}")
    name = node.func.id
    if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
        raise ToolError(f"{name}() takes plain positional arguments only")
    args = [_evaluate(arg) for arg in node.args]
    try:
        return _checked(_FUNCTIONS[name](*args))
    except (TypeError, ValueError) as exc:
        raise ToolError(f"{name}(): {exc}") from None


def _tidy(value: Number) -> Number:
    """Ints stay exact; floats lose the binary noise (0.1 + 0.2 gives 0.3)."""
    if isinstance(value, int):
        return value
    tidy = float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    return 0.0 if tidy == 0 else tidy  # no "-0.0"


def calculate(expression: str) -> Number:
    """The calculator's arithmetic, usable without a ToolContext."""
    if not expression.strip():
        raise ToolError("the expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"invalid expression: {exc.msg}") from None
    except (MemoryError, RecursionError):
        raise ToolError("the expression is nested too deeply") from None
    try:
        return _tidy(_evaluate(tree))
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("the result is too large (overflow)") from None
    except RecursionError:
        raise ToolError("the expression is nested too deeply") from None


@tool(enabled_by_default=True)
def calculator(
    context: ToolContext,
    expression: Annotated[
        str, Field(description="The expression, e.g. '(2 + 3) * 4 / 7' or 'sqrt(2) * pi'.")
    ],
) -> Number:
    """Evaluate an arithmetic expression exactly and safely (no code is run).

    Supports numbers, + - * / // % ** (power), unary minus, parentheses, the constants
    pi, e, tau and the functions sqrt, abs, round, min, max, floor, ceil, exp, log, sin,
    cos, tan (radians).
    """
    return calculate(expression)


# ---------------------------------------------------------------------------------------


@tool(enabled_by_default=True)
def current_time(
    context: ToolContext,
    timezone: Annotated[
        str, Field(description="An IANA time zone name such as 'Europe/Paris'.")
    ] = "UTC",
) -> str:
    """The current date and time (ISO 8601) in the given IANA time zone, UTC by default."""
    if timezone.strip().upper() == "UTC":
        # No dependency on the system's tz database for the common case.
        return datetime.now(UTC).isoformat(timespec="seconds")
    try:
        zone = ZoneInfo(timezone.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(
            f"unknown time zone {timezone!r}; use an IANA name such as 'Europe/Paris', "
            "'America/New_York' or 'UTC'"
        ) from None
    return datetime.now(zone).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------


@tool(mutating=True, enabled_by_default=True)
def update_draft(
    context: ToolContext,
    draft: Annotated[str, Field(description="The complete new text of the draft.")],
) -> str:
    """Replace the conversation's draft (the working document shown beside the chat) with
    new text. Send the whole draft, not a diff.

    The user's edits win: if they changed the draft after the model call that asked for
    this one read its input, nothing is written and the model gets an error quoting their
    draft. The model's next call has seen that text, so it may write deliberately.
    """
    done = f"Draft updated ({len(draft)} characters)."
    conversation = context.conversation
    if not context.stored:
        return _draft_replace_unsaved(context, draft) or done
    if context.is_resume:
        conversation.refresh_from_db(fields=["draft", "draft_call_id"])
        # One column is exact: a run executes its calls in order and resumes a call only
        # when its result was never stored, so no later call of the run has written yet.
        if conversation.draft_call_id == context.call_id:
            # The earlier attempt wrote but may have died before publishing. Writing again
            # could undo a user edit made since, so publish the draft as it is now.
            context.emit(DRAFT_UPDATED, {"draft": conversation.draft})
            return done
    try:
        changed = services.conversation_draft_update(
            conversation=conversation,
            draft=draft,
            by_user=False,
            call_id=context.call_id,
            edits_seen=context.draft_edits_seen,
        )
    except ValidationFailed as exc:
        raise ToolError("; ".join(_problem_text(p) for p in exc.problems)) from None
    except DraftEditedMeanwhile as exc:
        raise ToolError(_edited_meanwhile(exc.draft)) from None
    if not changed:
        return "The draft already had this text; nothing changed."
    context.emit(DRAFT_UPDATED, {"draft": draft})
    return done


def _draft_replace_unsaved(context: ToolContext, draft: str) -> str | None:
    """update_draft on a conversation kept nowhere: the same checks, the text replaced in
    memory. A message when nothing changed."""
    problems = validation.draft_problems(draft)
    if problems:
        raise ToolError("; ".join(_problem_text(p) for p in problems))
    if context.conversation.draft == draft:
        return "The draft already had this text; nothing changed."
    context.conversation.draft = draft
    context.emit(DRAFT_UPDATED, {"draft": draft})
    return None


def _edited_meanwhile(users_draft: str) -> str:
    # The user's text comes last: a long draft may be cut to the tool output limit, and the
    # instructions must survive. The full draft also ends the model's next input.
    return (
        "the user edited the draft while you were working, and their edit wins: your text "
        "was not saved. If the draft still needs changing, call update_draft again with the "
        f'complete text, keeping their changes. The draft now reads: "{users_draft}"'
    )


def _problem_text(problem: Problem) -> str:
    """`$.call_id` + "is too long" reads "call id is too long"."""
    return f"{problem.path.removeprefix('$.').replace('_', ' ')} {problem.message}"


@tool(enabled_by_default=True)
def search_conversations(
    context: ToolContext,
    query: Annotated[str, Field(description="Text to look for (case-insensitive).")],
    limit: Annotated[int, Field(ge=1, le=20, description="How many matches to return.")] = 5,
) -> list[dict[str, Any]]:
    """Search the messages of the user's own conversations for a text, newest first.

    Returns matches with the conversation id and title, the message's position (seq),
    its role and a short snippet around the match, the match in **bold**.
    """
    if not query.strip():
        raise ToolError("the query is empty")
    # The same matching as the search API (full-text on PostgreSQL), newest first.
    found = selectors.search_hits(user=context.user, q=query, limit=limit, order="newest")
    return [
        {
            "conversation_id": str(hit.message.conversation_id),
            "conversation_title": hit.conversation_title,
            "seq": hit.message.seq,
            "role": hit.message.role,
            "snippet": hit.snippet,
        }
        for hit in found
    ]
