"""Whatever is stored exports and imports back: random histories written through the
public doors (the OpenAI-compatible API's items, and the services behind sends, replies,
edits, regenerations, switches, settings and organising), exported, imported by the same
user or another, and exported again, come back the same apart from what the format says
an import changes (ids, the export time)."""

import json
from typing import Any

import openai
import pytest
from django.core.cache import cache
from django.db import transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from accounts.models import User
from conversations import selectors, services
from conversations.errors import ValidationFailed
from conversations.formats import exporting
from conversations.models import Conversation, Message
from conversations.openai_api import ids
from conversations.services import NewMessage
from conversations.services.organising_names import folder_ensure
from tests.support.conversations import BUILTIN_TOOLS, refetch, row_counts
from tests.support.documents import export_comparable
from tests.support.openai_api import body_of

pytestmark = pytest.mark.django_db

# Any text UTF-8 can carry except NUL, with the characters formats tend to trip on.
_CHAR = st.characters(codec="utf-8", exclude_characters="\x00")
_RISKY = st.sampled_from(['"', "\\", "\n", "\r\n", "```", "</script>", "é", "🦜", "\u2028"])
_text = st.lists(st.one_of(_CHAR, _RISKY), max_size=8).map("".join)
_nonblank = st.tuples(st.characters(exclude_categories=("Cs", "Cc", "Z")), _text).map("".join)
_name = st.sampled_from(["weather", "calculator", "lookup-2", "f"])
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda children: st.lists(children, max_size=2) | st.dictionaries(_text, children, max_size=2),
    max_leaves=4,
)
_tokens = st.integers(min_value=0, max_value=10**6)
_usage = st.none() | st.fixed_dictionaries(
    {"prompt_tokens": _tokens, "completion_tokens": _tokens, "total_tokens": _tokens},
    optional={"completion_tokens_details": st.fixed_dictionaries({"reasoning_tokens": _tokens})},
)
_pick = st.integers(min_value=0, max_value=50)

# One step of a history: what to do, and the choices it needs. Writes...
_writes = st.one_of(
    # A user message, and the assistant's answer a client records with it or not.
    st.tuples(st.just("user"), _nonblank, st.none() | _text),
    st.tuples(st.just("event"), _nonblank),
    # A reply as the engine stores one: reasoning, usage, the provider's own fields.
    st.tuples(
        st.just("reply"),
        _text,
        _text,
        st.none() | _tokens,
        _usage,
        st.none() | st.dictionaries(_text, _json, max_size=2),
    ),
    # Function calls (after an assistant text or not), some answered in the same request;
    # `reuse` names a call id again once its call was answered.
    st.tuples(
        st.just("calls"),
        st.none() | _text,
        st.lists(st.tuples(_name, _text, st.booleans()), min_size=1, max_size=3),
        st.booleans(),
    ),
    st.tuples(st.just("answer"), _pick, _text, st.none() | _name),
)
# Tag and folder names, some differing only in case (one name to the importer's account).
_label = st.text(st.sampled_from("aAbBéÉ🦜-"), min_size=1, max_size=6)
# ...and what forks, switches, refuses, changes settings or files it, less often.
_others = st.one_of(
    st.tuples(st.just("organise"), st.lists(_label, max_size=4), st.none() | _label, st.booleans()),
    st.tuples(st.just("stray answer"), st.booleans()),
    st.tuples(st.just("delete"), _pick),
    st.tuples(st.just("edit"), _pick, _nonblank),
    st.tuples(st.just("regenerate"), _pick),
    st.tuples(st.just("switch"), _pick),
    st.tuples(st.just("draft"), _text),
    st.tuples(
        st.just("settings"),
        st.text(_CHAR, max_size=20),
        _text,
        st.none() | st.floats(min_value=0, max_value=2, allow_nan=False),
        st.none() | st.integers(min_value=1, max_value=32768),
        st.dictionaries(st.text(_CHAR, max_size=8), _text, max_size=3),
        st.lists(st.sampled_from(BUILTIN_TOOLS), unique=True),
    ),
)
_ops = st.one_of(_writes, _writes, _others)


def _active_path(conversation: Conversation) -> list[Message]:
    branch = selectors.branch_active(conversation=refetch(conversation))
    return list(selectors.path_messages(branch, after=0, last=branch.message_count))


def _calls_on(path: list[Message]) -> tuple[list[str], set[str]]:
    """(the calls still open along the path, in order; the ids answered along it)."""
    waiting: dict[str, None] = {}
    answered: set[str] = set()
    for message in path:
        for call in message.tool_calls:
            waiting[call["id"]] = None
        if message.role == Message.Role.TOOL and message.tool_call_id in waiting:
            del waiting[message.tool_call_id]
            answered.add(message.tool_call_id)
    return list(waiting), answered - set(waiting)


class _Writer:
    """Applies steps to one conversation; each is a valid request, except a stray
    answer, which must be refused with nothing stored."""

    def __init__(self, door: openai.OpenAI, conversation: Conversation) -> None:
        self.door, self.conversation = door, conversation
        self.door_id = ids.conversation_id(conversation.pk)
        self.fresh = 0

    def _new_id(self) -> str:
        self.fresh += 1
        return f"call_{self.fresh}"

    def items(self, items: list[Any]) -> None:
        self.door.conversations.items.create(self.door_id, items=items)

    def apply(self, op: tuple[Any, ...]) -> None:
        kind, args = op[0], op[1:]
        getattr(self, "op_" + kind.replace(" ", "_"))(*args)
        self.conversation = refetch(self.conversation)

    def op_user(self, text: str, answer: str | None) -> None:
        said = [] if answer is None else [{"role": "assistant", "content": answer}]
        self.items([{"role": "user", "content": text}, *said])

    def op_event(self, text: str) -> None:
        self.items([{"role": "developer", "content": text}])

    def op_reply(self, text, reasoning, reasoning_ms, usage, payload) -> None:
        services.message_append(
            conversation=self.conversation,
            message=NewMessage(
                role="assistant",
                content=text,
                reasoning=reasoning,
                reasoning_ms=reasoning_ms,
                usage=usage,
                provider_payload=payload,
            ),
        )

    def op_calls(self, text, calls, reuse) -> None:
        _, answered = _calls_on(_active_path(self.conversation))
        spare = sorted(answered)
        items: list[dict[str, Any]] = []
        if text is not None:
            items.append({"role": "assistant", "content": text})
        outputs = []
        for name, arguments, answer_now in calls:
            call_id = spare.pop() if reuse and spare else self._new_id()
            items.append(
                {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}
            )
            if answer_now:
                outputs.append({"type": "function_call_output", "call_id": call_id, "output": name})
        self.items(items + outputs)

    def op_answer(self, pick, text, name) -> None:
        waiting, _ = _calls_on(_active_path(self.conversation))
        if waiting:
            item = {"type": "function_call_output", "call_id": waiting[pick % len(waiting)]}
            item["output"] = text
            if name is not None:
                item["name"] = name
            self.items([item])

    def op_stray_answer(self, answered_before: bool) -> None:
        _, answered = _calls_on(_active_path(self.conversation))
        call_id = sorted(answered)[0] if answered_before and answered else "call_nobody"
        before = row_counts()
        with pytest.raises(openai.BadRequestError) as caught:
            self.items([{"type": "function_call_output", "call_id": call_id, "output": "x"}])
        assert body_of(caught.value)["param"] == "items[0].call_id"
        assert row_counts() == before

    def op_delete(self, pick) -> None:
        listed = list(self.door.conversations.items.list(self.door_id, order="asc", limit=100))
        if not listed:
            return
        before = row_counts()
        refusal = None
        try:
            self.door.conversations.items.delete(
                listed[pick % len(listed)].id, conversation_id=self.door_id
            )
        except openai.BadRequestError as refused:
            refusal = refused.message
        if refusal is not None:
            # Only when it would leave a later result without its call.
            assert "take that one out first" in refusal
            assert row_counts() == before

    def _pick_on_path(self, pick: int, role: str) -> Message | None:
        found = [
            m for m in _active_path(self.conversation) if m.role == role and m.kind == "message"
        ]
        return found[pick % len(found)] if found else None

    def op_edit(self, pick, text) -> None:
        message = self._pick_on_path(pick, Message.Role.USER)
        if message is not None:
            with transaction.atomic():
                services.message_edit_prepare(
                    conversation=self.conversation, message=message, content=text
                )

    def op_regenerate(self, pick) -> None:
        message = self._pick_on_path(pick, Message.Role.ASSISTANT)
        if message is None:
            return
        try:
            with transaction.atomic():
                services.reply_regenerate_prepare(conversation=self.conversation, message=message)
        except ValidationFailed:
            pass  # no user message before it: nothing to answer again

    def op_switch(self, pick) -> None:
        branches = selectors.branches_list(conversation=self.conversation)
        branch = branches[pick % len(branches)]
        services.branch_switch(conversation=self.conversation, branch_id=branch["id"])

    def op_draft(self, text) -> None:
        services.conversation_draft_update(conversation=self.conversation, draft=text)

    def op_settings(self, title, system_prompt, temperature, max_tokens, metadata, tools) -> None:
        services.conversation_update(
            conversation=self.conversation,
            title=title,
            system_prompt=system_prompt,
            temperature=temperature,
            max_output_tokens=max_tokens,
            metadata=metadata,
            tools=tools,
        )

    def op_organise(self, tags, folder, pinned) -> None:
        owner = self.conversation.owner
        services.conversation_update(
            conversation=self.conversation,
            tags=tags,
            pinned=pinned,
            folder_id=folder_ensure(owner=owner, name=folder).pk if folder else None,
        )


def _door_items(door: openai.OpenAI, conversation: Conversation) -> list[dict[str, Any]]:
    """The active path as the OpenAI door lists it, without the ids."""
    listed = door.conversations.items.list(
        ids.conversation_id(conversation.pk), order="asc", limit=100
    )
    return [{k: v for k, v in item.to_dict().items() if k != "id"} for item in listed]


@pytest.fixture
def doors(sdk, owner, outsider) -> dict[int, openai.OpenAI]:
    """Each user's client of the OpenAI-compatible door, by user id."""
    return {owner.pk: sdk(owner), outsider.pk: sdk(outsider)}


def _imported(owner: User, document: str) -> Conversation:
    return refetch(services.conversation_import(owner=owner, document=document))


@pytest.mark.slow  # forty histories, each written through the doors and imported twice
@hypothesis_settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_ops, min_size=3, max_size=14), to_another_user=st.booleans())
def test_whatever_is_stored_exports_and_imports_back(
    doors, owner, outsider, steps, to_another_user
):
    cache.clear()  # each example has its own request budget
    writer = _Writer(doors[owner.pk], services.conversation_create(owner=owner))
    for step in steps:
        writer.apply(step)
    original = writer.conversation
    importer = outsider if to_another_user else owner

    first = "".join(exporting.export_json_chunks(original))
    copy = _imported(importer, first)
    second = "".join(exporting.export_json_chunks(copy))

    assert export_comparable(json.loads(second)) == export_comparable(json.loads(first))
    assert (copy.message_count, copy.branch_count) == (
        original.message_count,
        original.branch_count,
    )
    # What a client of either door sees of the active path is the same too.
    assert _door_items(doors[importer.pk], copy) == _door_items(doors[owner.pk], original)
    # Importing the copy's export changes nothing more.
    third = "".join(exporting.export_json_chunks(_imported(importer, second)))
    assert export_comparable(json.loads(third)) == export_comparable(json.loads(first))
    # The active path alone (version 1) reads back as that path.
    line = exporting.export_json(original, version=1)
    again = exporting.export_json(_imported(importer, json.dumps(line)), version=1)
    assert export_comparable(again) == export_comparable(line)
