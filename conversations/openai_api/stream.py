"""A run's event log as OpenAI's Responses streaming events.

The translation is a pure function of the log, read from its start: the same log always
gives the same events with the same `sequence_number`s (counted here, gapless, from 0),
so a reader resumes with `starting_after=N` on any web process by translating the log
again and skipping what it has seen. Parley's events map as follows:

- `run.created` → `response.created`; `run.in_progress` → `response.in_progress`;
- the first `message.delta` of an assistant message → `response.output_item.added` (a
  `message` item) and `response.content_part.added`, then each delta →
  `response.output_text.delta`; the text closes (`output_text.done`,
  `content_part.done`, `output_item.done`) when its calls or the message complete;
- `tool_call.created` → `output_item.added` (a `function_call` item),
  `tool_call.arguments.delta` → `function_call_arguments.delta`, `tool_call.completed`
  → `function_call_arguments.done` and `output_item.done`;
- `reasoning.delta` (a reasoning model's thoughts, before its answer) → a `reasoning`
  item (`output_item.added`, `content_part.added` of a `reasoning_text` part), each
  delta → `response.reasoning.delta`; the thoughts close (`reasoning.done`,
  `content_part.done`, `output_item.done`) when the answer or a call begins or the
  message completes;
- `tool_result.completed` (a Parley tool ran) → a `function_call_output` item, added and
  done;
- the terminal event → `response.completed`, `response.failed` or
  `response.incomplete` (a cancelled run: `response.failed` with status `cancelled`,
  as OpenAI's stream has no event of its own for it), with the whole response.

A step retried after a worker died streams its message again from the start: the text
and thoughts already sent are not sent twice (only what goes past them). Draft events
have no counterpart and are left out: a stream holds only the event types the Open
Responses specification lists.
"""

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from conversations.engine import eventlog
from conversations.openai_api.ids import ItemRef, ItemType, item_id
from conversations.openai_api.objects import output_text, reasoning_item
from conversations.openai_api.responses_out import response_ending

_TERMINAL_EVENTS = {
    "completed": "response.completed",
    "failed": "response.failed",
    "cancelled": "response.failed",
    "incomplete": "response.incomplete",
}


@dataclass
class _Text:
    """The streamed text of an assistant message, or (`thoughts`) of its reasoning item."""

    index: int
    item_id: str
    thoughts: bool = False
    text: str = ""
    # After a retried step's `message.created`: the text streamed again so far.
    replay: str | None = None
    done: bool = False

    def part(self) -> dict[str, Any]:
        if self.thoughts:
            return {"type": "reasoning_text", "text": self.text}
        return output_text(self.text)


@dataclass
class _Call:
    index: int
    item: dict[str, Any]
    done: bool = False


@dataclass
class ResponseEvents:
    """Feed the run's events in order (`feed`); each call returns the OpenAI events they
    give. `head` is responses_out.response_head of the run."""

    head: dict[str, Any]
    sequence: int = 0
    output: list[dict[str, Any]] = field(default_factory=list)
    status: str = "queued"
    _texts: dict[str, _Text] = field(default_factory=dict)
    _calls: dict[str, _Call] = field(default_factory=dict)
    _call_counts: dict[str, int] = field(default_factory=dict)
    _out: list[dict[str, Any]] = field(default_factory=list)

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        self._out = []
        kind = event["type"]
        if kind == eventlog.RUN_CREATED:
            self._emit("response.created", response=self.snapshot())
        elif kind == eventlog.RUN_IN_PROGRESS:
            self.status = "in_progress"
            self._emit("response.in_progress", response=self.snapshot())
        elif kind == eventlog.MESSAGE_CREATED:
            for key in (event["message_id"], _thoughts_key(event["message_id"])):
                text = self._texts.get(key)
                if text is not None and not text.done:
                    text.replay = ""
        elif kind == eventlog.REASONING_DELTA:
            self._text_delta(event["message_id"], event["delta"], thoughts=True)
        elif kind == eventlog.MESSAGE_DELTA:
            self._thoughts_close(event["message_id"])
            self._text_delta(event["message_id"], event["delta"])
        elif kind == eventlog.TOOL_CALL_CREATED:
            self._thoughts_close(event["message_id"])
            self._call_added(event)
        elif kind == eventlog.TOOL_CALL_ARGUMENTS_DELTA:
            call = self._calls.get(event["call_id"])
            if call is not None and not call.done:
                call.item["arguments"] += event["delta"]
                self._emit(
                    "response.function_call_arguments.delta",
                    item_id=call.item["id"],
                    output_index=call.index,
                    delta=event["delta"],
                )
        elif kind == eventlog.TOOL_CALL_COMPLETED:
            call = self._calls.get(event["call_id"])
            if call is not None:
                self._texts_close(call.item["id"].split("_")[1], thoughts=False)
                call.item["arguments"] = event["arguments"]
                self._call_done(call)
        elif kind == eventlog.MESSAGE_COMPLETED:
            message_hex = str(event["message"]["id"]).replace("-", "")
            self._texts_close(message_hex, thoughts=True)
            self._texts_close(message_hex, thoughts=False)
        elif kind == eventlog.TOOL_RESULT_COMPLETED:
            self._result(event)
        elif kind in eventlog.TERMINAL_TYPES:
            self._ended(event["run"])
        return self._out

    def snapshot(self) -> dict[str, Any]:
        return {**self.head, "status": self.status, "output": [dict(i) for i in self.output]}

    # --- the parts ---------------------------------------------------------------------

    def _emit(self, kind: str, **payload: Any) -> None:
        self._out.append({"type": kind, "sequence_number": self.sequence, **payload})
        self.sequence += 1

    def _text_delta(self, message_id: str, delta: str, *, thoughts: bool = False) -> None:
        key = _thoughts_key(message_id) if thoughts else message_id
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = self._text_added(message_id, thoughts=thoughts)
        if text.done:
            return
        if text.replay is not None:
            # A retried step: only the text beyond what was sent before is new.
            text.replay += delta
            if len(text.replay) <= len(text.text):
                return
            delta = text.replay[len(text.text) :]
            text.replay = None
        text.text += delta
        self.output[text.index]["content"] = [text.part()]
        common = {"item_id": text.item_id, "output_index": text.index, "content_index": 0}
        if thoughts:
            self._emit("response.reasoning.delta", **common, delta=delta)
        else:
            self._emit("response.output_text.delta", **common, delta=delta, logprobs=[])

    def _text_added(self, message_id: str, *, thoughts: bool) -> _Text:
        kind = ItemType.REASONING if thoughts else ItemType.MESSAGE
        ref = ItemRef(kind, _uuid(message_id))
        text = _Text(index=len(self.output), item_id=item_id(ref), thoughts=thoughts)
        item: dict[str, Any]
        if thoughts:
            item = {**reasoning_item(ref, ""), "content": []}
        else:
            item = {"id": text.item_id, "type": "message", "role": "assistant"}
            item |= {"status": "in_progress", "content": []}
        self._emit("response.output_item.added", output_index=text.index, item=item)
        part = text.part()
        self.output.append({**item, "content": [part]})
        self._emit(
            "response.content_part.added",
            item_id=text.item_id,
            output_index=text.index,
            content_index=0,
            part=part,
        )
        return text

    def _thoughts_close(self, message_id: str) -> None:
        text = self._texts.get(_thoughts_key(message_id))
        if text is not None and not text.done:
            self._text_done(text)

    def _texts_close(self, message_hex: str, *, thoughts: bool) -> None:
        prefix = "rs" if thoughts else "msg"
        for text in self._texts.values():
            if not text.done and text.item_id == f"{prefix}_{message_hex}":
                self._text_done(text)

    def _text_done(self, text: _Text) -> None:
        text.done = True
        part = text.part()
        common = {"item_id": text.item_id, "output_index": text.index, "content_index": 0}
        if text.thoughts:
            self._emit("response.reasoning.done", **common, text=text.text)
        else:
            self._emit("response.output_text.done", **common, text=text.text, logprobs=[])
        self._emit("response.content_part.done", **common, part=part)
        item = {**self.output[text.index], "content": [part]}
        if not text.thoughts:
            item["status"] = "completed"
        self.output[text.index] = item
        self._emit("response.output_item.done", output_index=text.index, item=item)

    def _call_added(self, event: dict[str, Any]) -> None:
        if event["call_id"] in self._calls:
            return  # a retried step announcing the same call again
        message_id = event["message_id"]
        number = self._call_counts.get(message_id, 0)
        self._call_counts[message_id] = number + 1
        ref = ItemRef(ItemType.FUNCTION_CALL, _uuid(message_id), number)
        item = {
            "id": item_id(ref),
            "type": "function_call",
            "call_id": event["call_id"],
            "name": event["name"],
            "arguments": "",
            "status": "in_progress",
        }
        call = self._calls[event["call_id"]] = _Call(index=len(self.output), item=item)
        self.output.append(item)
        self._emit("response.output_item.added", output_index=call.index, item=dict(item))

    def _call_done(self, call: _Call) -> None:
        if call.done:
            return
        call.done = True
        call.item["status"] = "completed"
        common = {"item_id": call.item["id"], "output_index": call.index}
        self._emit(
            "response.function_call_arguments.done", **common, arguments=call.item["arguments"]
        )
        self._emit("response.output_item.done", output_index=call.index, item=dict(call.item))

    def _result(self, event: dict[str, Any]) -> None:
        message_id = event.get("message_id")
        if message_id is None:
            return  # written before results named their message: nothing to name it by
        ref = ItemRef(ItemType.FUNCTION_CALL_OUTPUT, _uuid(message_id))
        item = {
            "id": item_id(ref),
            "type": "function_call_output",
            "call_id": event["call_id"],
            "output": event["output"],
            "status": "completed",
        }
        call = self._calls.get(event["call_id"])
        if call is not None:  # as the stored result names its tool
            item["name"] = call.item["name"]
        index = len(self.output)
        self.output.append(item)
        self._emit("response.output_item.added", output_index=index, item=item)
        self._emit("response.output_item.done", output_index=index, item=item)

    def _ended(self, run: dict[str, Any]) -> None:
        for text in self._texts.values():
            if not text.done:
                self._text_done(text)
        for call in self._calls.values():
            self._call_done(call)
        self.status = run["status"]
        response = response_ending(self.snapshot(), run)
        self._emit(_TERMINAL_EVENTS.get(run["status"], "response.failed"), response=response)


def _uuid(raw: str) -> UUID:
    return UUID(str(raw))


def _thoughts_key(message_id: str) -> str:
    """Where a message's reasoning is kept among the streamed texts (its text is kept
    under the message's id)."""
    return f"{message_id}:thoughts"


def openai_events(
    head: dict[str, Any], events: Iterable[dict[str, Any]], *, after: int | None = None
) -> Iterator[dict[str, Any]]:
    """The OpenAI events of a run's events, those numbered past `after` only."""
    translator = ResponseEvents(head=head)
    for event in events:
        for out in translator.feed(event):
            if after is None or out["sequence_number"] > after:
                yield out


def sse_frame(event: dict[str, Any]) -> str:
    """One Server-Sent Event as OpenAI's API frames it: `event:` the type, `data:` the
    JSON event."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"
