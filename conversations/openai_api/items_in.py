"""OpenAI's input items as the messages Parley stores, and back for a removal.

- `message`: role `user` becomes a user message; `system` and `developer` a context
  event (the model reads both as system text; a developer's reads back as `developer`);
  `assistant` an assistant message, keeping its `phase` (`commentary` or
  `final_answer`). Content is a string or a list of text parts (`input_text`,
  `output_text`, `refusal`), joined by a newline. A user's message may also hold
  `input_image` and `input_file` parts (file_parts.py): the files it carries, in order
  (its text may then be empty); other messages take text only, and audio is refused.
- `function_call` `{call_id, name, arguments}`: a tool call of an assistant message.
  Calls sent together, with the assistant `message` just before them if any, make one
  assistant message, as a model's reply with parallel calls is stored.
- `reasoning` `{summary, content?}`: what the model thought, kept as the reasoning of the
  assistant turn that follows it (its text from `content`'s `reasoning_text` parts, else
  its summary's `summary_text`); `encrypted_content` is another server's and is dropped.
- `function_call_output` `{call_id, output}`: a tool message answering that call. The call
  comes before it, in the same request or on the conversation's path, and has no answer
  yet: the rule an import keeps (tool_pairing.py), checked by the domain when the items
  are stored and named back by the item's parameter (`input[3].call_id`).
- `compaction` `{encrypted_content}`: a summary `POST /responses/compact` made for this
  user, stored as a system message the model reads in place of the turns it covers
  (compaction_items.py).

Ids and statuses clients send back from listed items are ignored (Parley assigns
both); any other unknown field is refused by name, as OpenAI's API does.
"""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings

from conversations import validation
from conversations.errors import ValidationFailed
from conversations.models import Message
from conversations.openai_api.compaction_items import compaction_message
from conversations.openai_api.errors import fields_check, invalid, quoted, wrong_type
from conversations.openai_api.file_parts import FILE_PARTS, FilePart, file_part
from conversations.openai_api.ids import ItemRef, ItemType
from conversations.services import NewMessage

MAX_ITEMS = 20
# Fields of listed items that a client may send back unchanged; they mean nothing here.
_ECHOED = {"id", "status", "created_by"}
_MESSAGE_FIELDS = {"type", "role", "content", "phase", *_ECHOED}
_CALL_FIELDS = {"type", "call_id", "name", "arguments", "namespace", "caller", *_ECHOED}
_OUTPUT_FIELDS = {"type", "call_id", "output", "name", "namespace", "caller", *_ECHOED}
_REASONING_FIELDS = {"type", "summary", "content", "encrypted_content", *_ECHOED}
_REASONING_PARTS = {"summary_text", "reasoning_text", "output_text", "input_text"}
_PHASES = ("commentary", "final_answer")
_ROLES = {"user", "assistant", "system", "developer"}
# Which field holds a text part's text.
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
_PART_FIELDS = {
    "input_text": {"type", "text", "prompt_cache_breakpoint"},
    "output_text": {"type", "text", "annotations", "logprobs"},
    "refusal": {"type", "refusal"},
}


def _content_max() -> int:
    limit: int = settings.PARLEY_MAX_MESSAGE_CHARS
    return limit


def _string(value: Any, param: str, *, max_chars: int, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise wrong_type(param, "a string", value)
    if not empty and not value.strip():
        raise invalid(f"Invalid '{param}': must not be empty.", param=param)
    problems = validation.text_problems(value, path=param, max_chars=max_chars)
    if problems:
        raise invalid(f"Invalid '{param}': {problems[0].message}.", param=param)
    return value


def _text(value: Any, param: str, *, parts: set[str], files: list[FilePart] | None = None) -> str:
    """A string, or a list of text parts of the kinds in `parts`, as one text. With
    `files` (a user's message), file parts are taken too, into `files`."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise wrong_type(param, "a string or an array of content parts", value)
    texts = []
    for index, part in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(part, dict):
            raise wrong_type(where, "an object", part)
        kind = part.get("type")
        if files is not None and kind in FILE_PARTS:
            files.append(file_part(part, where))
            continue
        if kind not in parts:
            raise invalid(
                f"Invalid '{where}.type': {quoted(kind)!r} is not supported here; "
                f"{_accepted(kind, parts, files=files is not None)}",
                param=f"{where}.type",
            )
        field = _TEXT_PARTS[kind]
        fields_check(part, where, required={"type", field}, known=_PART_FIELDS[kind])
        if not isinstance(part[field], str):
            raise wrong_type(f"{where}.{field}", "a string", part[field])
        texts.append(part[field])
    limit: int = settings.PARLEY_FILE_MAX_PER_MESSAGE
    if files is not None and len(files) > limit:
        raise invalid(
            f"Invalid '{param}': at most {limit} files per message ({len(files)} given).",
            param=param,
        )
    return "\n".join(texts)


def _accepted(kind: Any, parts: set[str], *, files: bool) -> str:
    """What a message takes instead of a part of `kind`."""
    if files:
        return f"a user's message takes {', '.join(sorted(parts | FILE_PARTS))} parts."
    if kind in FILE_PARTS:
        return "images and files go in a user's message."
    return f"this takes {', '.join(sorted(parts))} parts."


def _message(item: dict[str, Any], param: str) -> tuple[NewMessage, tuple[FilePart, ...]]:
    fields_check(item, param, required={"role", "content"}, known=_MESSAGE_FIELDS)
    role = item["role"]
    if role not in _ROLES:
        raise invalid(
            f"Invalid '{param}.role': expected one of {', '.join(sorted(_ROLES))}, got "
            f"{quoted(role)!r}.",
            param=f"{param}.role",
        )
    parts = set(_TEXT_PARTS) if role == "assistant" else {"input_text", "output_text"}
    files: list[FilePart] | None = [] if role == "user" else None
    text = _string(
        _text(item["content"], f"{param}.content", parts=parts, files=files),
        f"{param}.content",
        max_chars=_content_max(),
        # An assistant's empty reply is a real thing to record (one stopped while
        # thinking); a user's message may be files alone.
        empty=role == "assistant" or bool(files),
    )
    phase = item.get("phase")
    if phase is not None and (role != "assistant" or phase not in _PHASES):
        raise invalid(
            f"Invalid '{param}.phase': an assistant message's phase is {' or '.join(_PHASES)}.",
            param=f"{param}.phase",
        )
    if role == "assistant":
        payload = {"phase": phase} if phase else None
        return NewMessage(role=Message.Role.ASSISTANT, content=text, provider_payload=payload), ()
    if role == "user":
        return NewMessage(role=Message.Role.USER, content=text), tuple(files or ())
    return NewMessage(
        role=Message.Role.SYSTEM,
        kind=Message.Kind.EVENT,
        content=text,
        provider_payload={"role": "developer"} if role == "developer" else None,
    ), ()


def _reasoning(item: dict[str, Any], param: str) -> str:
    """A reasoning item's text: its full thoughts when it carries them, else its summary."""
    fields_check(item, param, required={"summary"}, known=_REASONING_FIELDS)
    texts: dict[str, list[str]] = {}
    for name in ("content", "summary"):
        parts = item.get(name)
        if parts is None and name == "content":
            continue
        if not isinstance(parts, list):
            raise wrong_type(f"{param}.{name}", "an array of content parts", parts)
        for index, part in enumerate(parts):
            where = f"{param}.{name}[{index}]"
            if not isinstance(part, dict):
                raise wrong_type(where, "an object", part)
            if part.get("type") not in _REASONING_PARTS:
                raise invalid(
                    f"Invalid '{where}.type': {quoted(part.get('type'))!r} is not supported "
                    f"here; this takes {', '.join(sorted(_REASONING_PARTS))} parts.",
                    param=f"{where}.type",
                )
            fields_check(part, where, required={"type", "text"}, known={"type", "text"})
            texts.setdefault(name, []).append(
                _string(part["text"], f"{where}.text", max_chars=_content_max())
            )
    chosen = texts.get("content") or texts.get("summary") or []
    return _string("\n".join(chosen), f"{param}.summary", max_chars=_content_max())


def _call(item: dict[str, Any], param: str) -> dict[str, str]:
    fields_check(item, param, required={"call_id", "name", "arguments"}, known=_CALL_FIELDS)
    return {
        "id": _string(
            item["call_id"],
            f"{param}.call_id",
            max_chars=validation.TOOL_CALL_ID_MAX,
            empty=False,
        ),
        "name": _string(
            item["name"], f"{param}.name", max_chars=validation.TOOL_NAME_MAX, empty=False
        ),
        "arguments": _string(item["arguments"], f"{param}.arguments", max_chars=_content_max()),
    }


def _output(item: dict[str, Any], param: str) -> NewMessage:
    fields_check(item, param, required={"call_id", "output"}, known=_OUTPUT_FIELDS)
    name = item.get("name")
    return NewMessage(
        role=Message.Role.TOOL,
        tool_call_id=_string(
            item["call_id"],
            f"{param}.call_id",
            max_chars=validation.TOOL_CALL_ID_MAX,
            empty=False,
        ),
        content=_string(
            _text(item["output"], f"{param}.output", parts={"input_text", "output_text"}),
            f"{param}.output",
            max_chars=_content_max(),
        ),
        name=""
        if name is None
        else _string(name, f"{param}.name", max_chars=validation.TOOL_NAME_MAX),
    )


@dataclass(frozen=True)
class InputMessages:
    """Input items as the messages to store, and the item each tool call and result
    came from."""

    messages: list[NewMessage] = field(default_factory=list)
    # The path the domain gives a call or result of `messages` (`$.messages[1].tool_call_id`)
    # -> the parameter of the item it came from (`input[3].call_id`).
    params: dict[str, str] = field(default_factory=dict)
    # The files of the user's messages, by their place in `messages` (files_in.py reads
    # or stores them).
    files: dict[int, tuple[FilePart, ...]] = field(default_factory=dict)

    @contextlib.contextmanager
    def named(self) -> Iterator[None]:
        """The domain's refusal of one of these calls or results (a result answering no
        open call, checked against the stored path) named by its item's parameter."""
        try:
            yield
        except ValidationFailed as refused:
            first = refused.problems[0] if refused.problems else None
            param = self.params.get(first.path) if first is not None else None
            if first is None or param is None:
                raise
            raise invalid(f"Invalid '{param}': {first.message}.", param=param) from None


def new_messages(
    value: Any, *, param: str = "items", at_least: int = 0, most: int = MAX_ITEMS
) -> InputMessages:
    """The messages to store for a list of input items, or a 400 naming the first
    problem by its parameter path (`items[2].content`)."""
    read = InputMessages()
    if value is None and at_least == 0:
        return read
    if not isinstance(value, list):
        raise wrong_type(param, "an array", value)
    if not at_least <= len(value) <= most:
        raise invalid(
            f"Invalid '{param}': expected from {at_least} to {most} items, got {len(value)}.",
            param=param,
            code="array_above_max_length" if len(value) > most else "empty_array",
        )
    messages = read.messages
    # The assistant message that function calls join, while they keep coming, and the
    # items its calls came from.
    turn: NewMessage | None = None
    turn_items: list[str] = []
    # Reasoning items waiting for the assistant turn they belong to.
    thoughts: list[str] = []

    def turn_begin(new: NewMessage | None = None) -> NewMessage:
        base = new or NewMessage(role=Message.Role.ASSISTANT)
        reasoning = "\n".join(thoughts)
        thoughts.clear()
        return replace(base, reasoning=reasoning) if reasoning else base

    def turn_end() -> None:
        nonlocal turn
        if turn is None and thoughts:
            turn = turn_begin()  # thoughts with no reply after them: kept as they were
        if turn is None:
            return
        for number, where in enumerate(turn_items):
            read.params[f"$.messages[{len(messages)}].tool_calls[{number}].id"] = where
        messages.append(turn)
        turn = None
        turn_items.clear()

    for index, item in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(item, dict):
            raise wrong_type(where, "an object", item)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == ItemType.FUNCTION_CALL:
            call = _call(item, where)
            turn = turn or turn_begin()
            if any(other["id"] == call["id"] for other in turn.tool_calls):
                raise invalid(
                    f"Invalid '{where}.call_id': {quoted(call['id'])!r} is already a call "
                    "of this assistant turn.",
                    param=f"{where}.call_id",
                )
            turn = replace(turn, tool_calls=[*turn.tool_calls, call])
            turn_items.append(f"{where}.call_id")
            continue
        if kind == ItemType.REASONING:
            text = _reasoning(item, where)
            if turn is not None:
                turn_end()  # the thoughts of the next turn
            thoughts.append(text)
            continue
        if kind == ItemType.MESSAGE:
            new, files = _message(item, where)
            if new.role == Message.Role.ASSISTANT:
                if turn is not None:
                    turn_end()
                turn = turn_begin(new)
                continue
        turn_end()
        if kind == ItemType.MESSAGE:
            if files:
                read.files[len(messages)] = files
            messages.append(new)
        elif kind == ItemType.FUNCTION_CALL_OUTPUT:
            read.params[f"$.messages[{len(messages)}].tool_call_id"] = f"{where}.call_id"
            messages.append(_output(item, where))
        elif kind == ItemType.COMPACTION:
            read.params[f"$.messages[{len(messages)}].encrypted_content"] = (
                f"{where}.encrypted_content"
            )
            messages.append(compaction_message(item, where))
        elif kind is None:
            raise invalid(
                f"Missing required parameter: '{where}.type'.",
                param=f"{where}.type",
                code="missing_required_parameter",
            )
        else:
            raise invalid(
                f"Invalid '{where}.type': {quoted(kind)!r} items are not supported; Parley "
                "stores message, reasoning, function_call, function_call_output and "
                "compaction items.",
                param=f"{where}.type",
            )
    turn_end()
    return read


def replacement_for(message: Message, ref: ItemRef) -> NewMessage | None:
    """What stays of `message` once the item `ref` is taken out: the message without that
    part, or None when nothing of it is left."""
    reasoning = message.reasoning
    if ref.type == ItemType.FUNCTION_CALL:
        calls = [call for index, call in enumerate(message.tool_calls) if index != ref.index]
        content = message.content
    elif ref.type == ItemType.MESSAGE and message.role == Message.Role.ASSISTANT:
        calls, content = list(message.tool_calls), ""
    elif ref.type == ItemType.REASONING:
        calls, content, reasoning = list(message.tool_calls), message.content, ""
    else:
        return None
    if not calls and not content:
        return None
    return NewMessage(
        role=message.role,
        content=content,
        kind=message.kind,
        tool_calls=calls,
        usage=message.usage,
        provider_payload=message.provider_payload,
        created_at=message.created_at,
        reasoning=reasoning,
        reasoning_ms=message.reasoning_ms if reasoning else None,
    )
