"""Import of JSON v1 exports: every corrupt document refused whole; exact round trips."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from accounts.models import User
from conversations import services
from conversations.errors import ValidationFailed
from conversations.formats import exporting
from conversations.models import AuditEvent, Conversation
from conversations.services import NewMessage
from tests.support.conversations import BUILTIN_TOOLS, refetch, row_counts, tool_call
from tests.support.documents import branch_ids_relabelled

# --- helpers -------------------------------------------------------------------------


def _message(seq: int, role: str, content: str = "", **fields: Any) -> dict[str, Any]:
    message = {
        "id": f"00000000-0000-4000-8000-{seq:012d}",
        "seq": seq,
        "role": role,
        "kind": "message",
        "content": content,
        "tool_calls": [],
        "tool_call_id": None,
        "name": None,
        "created_at": f"2025-03-01T10:00:{seq:02d}.123456+00:00",
        "run_id": None,
        "usage": None,
        "provider_payload": None,
    }
    message.update(fields)
    return message


def valid_document() -> dict[str, Any]:
    """A small, valid v1 document written by hand (not by the exporter under test)."""
    return {
        "format": "parley.conversation",
        "version": 1,
        "exported_at": "2025-03-01T11:00:00+00:00",
        "conversation": {
            "id": "11111111-1111-4111-8111-111111111111",
            "title": "Sums",
            "system_prompt": "Be brief.",
            "model": "gpt-4o-mini",
            "tools": ["calculator"],
            "metadata": {"team": "ops"},
            "draft": "",
            "created_at": "2025-03-01T09:59:00+00:00",
            "updated_at": "2025-03-01T10:00:00+00:00",
            "forked_from": None,
        },
        "messages": [
            _message(1, "user", "What is 2+2?"),
            _message(2, "assistant", tool_calls=[tool_call("call_a", arguments='{"x": "2+2"}')]),
            _message(3, "tool", "4", tool_call_id="call_a", name="calculator"),
            _message(4, "assistant", "It is 4.", usage={"total_tokens": 12}),
        ],
    }


def _dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False)


def _without_ids(document: dict[str, Any]) -> dict[str, Any]:
    """An export minus what an import is allowed to change: ids and the export time."""
    document = branch_ids_relabelled(document)
    del document["exported_at"]
    del document["conversation"]["id"]
    del document["conversation"]["forked_from"]
    for message in document["messages"]:
        del message["id"]
        del message["run_id"]
    return document


@pytest.fixture
def existing(conversation) -> Conversation:
    """Stored rows that a refused import must leave alone (so counts start above zero)."""
    services.user_message_append(conversation=conversation, content="already here")
    return conversation


# --- import: corrupt documents ---------------------------------------------------------

Mutation = Callable[[dict[str, Any]], str | bytes | dict[str, Any]]


def _set(path: str, value: Any) -> Mutation:
    """A mutation that sets one field, addressed as 'messages.2.content'."""

    def mutate(document: dict[str, Any]) -> dict[str, Any]:
        *parents, last = path.split(".")
        target: Any = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
        return document

    return mutate


def _drop(path: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> dict[str, Any]:
        *parents, last = path.split(".")
        target: Any = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        del target[last]
        return document

    return mutate


def _seqs(*seqs: int) -> Mutation:
    def mutate(document: dict[str, Any]) -> dict[str, Any]:
        for message, seq in zip(document["messages"], seqs, strict=True):
            message["seq"] = seq
        return document

    return mutate


def _append(message: dict[str, Any]) -> Mutation:
    def mutate(document: dict[str, Any]) -> dict[str, Any]:
        document["messages"].append(message)
        return document

    return mutate


def _long_call_id(document: dict[str, Any]) -> dict[str, Any]:
    call_id = "c" * 201
    document["messages"][1]["tool_calls"][0]["id"] = call_id
    document["messages"][2]["tool_call_id"] = call_id
    return document


def _many_messages(document: dict[str, Any]) -> dict[str, Any]:
    for seq in range(5, 8):
        document["messages"].append(_message(seq, "user", f"more {seq}"))
    return document


# (mutation, {expected path: words its message must contain}, settings to override)
CORRUPT_CASES = [
    pytest.param(lambda d: "this is not JSON", {"$": "not valid JSON"}, {}, id="not-json"),
    pytest.param(lambda d: _dumps(d)[:-40], {"$": "not valid JSON"}, {}, id="truncated-json"),
    pytest.param(
        _set("messages.3.usage", {"cost": float("nan")}),
        {"$": "NaN"},
        {},
        id="nan-constant",
    ),
    pytest.param(
        _set("messages.3.usage", {"total_tokens": 10**12}),
        {"$.messages[3].usage.total_tokens": "between 0 and 10000000"},
        {},
        id="usage-too-large",
    ),
    pytest.param(
        _set("messages.3.usage", {"total_tokens": 2**63 - 1, "prompt_tokens": -1}),
        {"$.messages[3].usage.total_tokens": "between", "$.messages[3].usage.prompt_tokens": ""},
        {},
        id="usage-overflow-and-negative",
    ),
    pytest.param(
        _set("messages.3.usage", {"total_tokens": 1.5}),
        {"$.messages[3].usage.total_tokens": "whole number"},
        {},
        id="usage-float",
    ),
    pytest.param(
        _set("messages.3.usage", {"total_tokens": True}),
        {"$.messages[3].usage.total_tokens": "whole number"},
        {},
        id="usage-bool",
    ),
    pytest.param(
        _set("messages.3.usage", {"total_tokens": "12"}),
        {"$.messages[3].usage.total_tokens": "whole number"},
        {},
        id="usage-string",
    ),
    pytest.param(
        _set("messages.3.usage", {"cost_usd": 5}),
        {"$.messages[3].usage.cost_usd": "not a usage field"},
        {},
        id="usage-unknown-key",
    ),
    pytest.param(
        _set("messages.3.usage", {"prompt_tokens_details": {"cached_tokens": 10**9}}),
        {"$.messages[3].usage.prompt_tokens_details.cached_tokens": "between"},
        {},
        id="usage-nested-too-large",
    ),
    pytest.param(
        _set("messages.3.usage", {"total_tokens": {"value": 5}, "completion_tokens": [5]}),
        {
            "$.messages[3].usage.total_tokens": "whole number",
            "$.messages[3].usage.completion_tokens": "whole number",
        },
        {},
        id="usage-nested-values",
    ),
    pytest.param(
        _set(
            "messages.3.usage",
            {"prompt_tokens_details": {"cached tokens": 1, "cached_tokens": {"n": 1}}},
        ),
        {
            "$.messages[3].usage.prompt_tokens_details.cached tokens": "not a usage field",
            "$.messages[3].usage.prompt_tokens_details.cached_tokens": "whole number",
        },
        {},
        id="usage-nested-unknown-and-object",
    ),
    pytest.param(
        _set("messages.3.usage", {"prompt_tokens_details": {f"f{i}": 1 for i in range(17)}}),
        {"$.messages[3].usage.prompt_tokens_details": "more than 16 fields"},
        {},
        id="usage-breakdown-too-many-fields",
    ),
    pytest.param(
        _set("messages.3.usage", {"total_tokens": 101}),
        {"$.messages[3].usage.total_tokens": "between 0 and 100"},
        {"PARLEY_IMPORT_MAX_USAGE_TOKENS": 100},
        id="usage-bound-is-a-setting",
    ),
    pytest.param(
        _set("messages.3.usage", [1, 2]),
        {"$.messages[3].usage": ""},
        {},
        id="usage-not-object",
    ),
    pytest.param(lambda d: [d], {"$": "must be an object"}, {}, id="top-level-list"),
    pytest.param(
        _set("format", "chatgpt.export"), {"$.format": "parley.conversation"}, {}, id="wrong-format"
    ),
    pytest.param(_set("version", 3), {"$.version": "unsupported version 3"}, {}, id="version-3"),
    pytest.param(
        _set("version", "1"), {"$.version": "unsupported version '1'"}, {}, id="version-string"
    ),
    pytest.param(
        _set("messages.0.role", "robot"), {"$.messages[0].role": "'user'"}, {}, id="unknown-role"
    ),
    pytest.param(
        _set("messages.0.kind", "event"),
        {"$.messages[0].kind": "requires role 'system'"},
        {},
        id="event-kind-on-user-message",
    ),
    pytest.param(
        _seqs(1, 2, 4, 5),
        {"$.messages[2].seq": "is 4; expected 3", "$.messages[3].seq": "is 5; expected 4"},
        {},
        id="seq-gap",
    ),
    pytest.param(
        _seqs(0, 1, 2, 3),
        {f"$.messages[{i}].seq": f"expected {i + 1}" for i in range(4)},
        {},
        id="seq-starts-at-0",
    ),
    pytest.param(
        _seqs(1, 2, 2, 3),
        {"$.messages[2].seq": "is 2; expected 3", "$.messages[3].seq": "is 3; expected 4"},
        {},
        id="duplicate-seq",
    ),
    pytest.param(
        _set("messages.2.tool_call_id", "call_zzz"),
        {"$.messages[2].tool_call_id": "answers no earlier unanswered tool call"},
        {},
        id="orphan-tool-result",
    ),
    pytest.param(
        _append(_message(5, "tool", "4 again", tool_call_id="call_a", name="calculator")),
        {"$.messages[4].tool_call_id": "answers no earlier unanswered tool call"},
        {},
        id="tool-result-for-answered-call",
    ),
    pytest.param(
        _set("messages.0.tool_calls", [tool_call("call_u")]),
        {"$.messages[0].tool_calls": "only assistant messages call tools"},
        {},
        id="tool-calls-on-user-message",
    ),
    pytest.param(
        _set("messages.0.content", 42),
        {"$.messages[0].content": "valid string"},
        {},
        id="content-is-a-number",
    ),
    pytest.param(
        _set("messages.1.tool_calls", '[{"id": "call_a"}]'),
        {"$.messages[1].tool_calls": "valid array"},
        {},
        id="tool-calls-is-a-string",
    ),
    pytest.param(
        _set("messages.0.created_at", "2025-03-01T10:00:01"),
        {"$.messages[0].created_at": "timezone"},
        {},
        id="naive-created-at",
    ),
    pytest.param(
        _set("conversation.id", "not-a-uuid"), {"$.conversation.id": "UUID"}, {}, id="id-not-uuid"
    ),
    pytest.param(
        _set("messages.1.temperature", 0.2),
        {"$.messages[1].temperature": "Extra inputs are not permitted"},
        {},
        id="unknown-extra-key",
    ),
    pytest.param(
        _drop("messages.3.usage"), {"$.messages[3].usage": "Field required"}, {}, id="missing-key"
    ),
    pytest.param(
        lambda d: d,
        {"$": "the limit is 500"},
        {"PARLEY_IMPORT_MAX_BYTES": 500},
        id="oversize-document",
    ),
    pytest.param(
        _many_messages,
        {"$.messages": "has 7 messages; the limit is 6"},
        {"PARLEY_IMPORT_MAX_MESSAGES": 6},
        id="too-many-messages",
    ),
    pytest.param(
        _set("messages.3.content", "x" * 21),
        {"$.messages[3].content": "the limit is 20"},
        {"PARLEY_MAX_MESSAGE_CHARS": 20},
        id="content-over-limit",
    ),
    pytest.param(
        _set("messages.0.content", "before\x00after"),
        {"$.messages[0].content": "NUL"},
        {},
        id="nul-in-content",
    ),
    pytest.param(
        _set("messages.3.provider_payload", {"raw": "ok", "finish": "st\x00p"}),
        {"$.messages[3].provider_payload.finish": "NUL"},
        {},
        id="nul-in-provider-payload",
    ),
    pytest.param(
        _set("conversation.tools", ["calculator", "teleport"]),
        {"$.conversation.tools[1]": "unknown tool 'teleport'"},
        {},
        id="unknown-tool",
    ),
    pytest.param(
        _set("conversation.metadata", {f"k{i}": "v" for i in range(17)}),
        {"$.conversation.metadata": "17 keys"},
        {},
        id="metadata-17-keys",
    ),
    # These three used to pass validation and then fail inside PostgreSQL (a 500, not a
    # list of problems); SQLite stored them silently.
    pytest.param(
        _set("conversation.metadata", {"te\x00am": "ops"}),
        {"$.conversation.metadata.te\\x00am": "NUL"},
        {},
        id="nul-in-metadata-key",
    ),
    pytest.param(
        _long_call_id,
        {"$.messages[2].tool_call_id": "the limit is 200"},
        {},
        id="tool-call-id-over-200",
    ),
    pytest.param(
        _set("messages.2.name", "n" * 201),
        {"$.messages[2].name": "the limit is 200"},
        {},
        id="tool-name-over-200",
    ),
    pytest.param(
        lambda d: _dumps(d).replace("What is 2+2?", "What is \ud800?"),
        {"$": "not valid text"},
        {},
        id="lone-surrogate-in-text",
    ),
]


@pytest.mark.parametrize(("mutate", "expected", "overrides"), CORRUPT_CASES)
def test_import_refuses_a_corrupt_document_and_stores_nothing(
    existing, owner, settings, mutate, expected, overrides
):
    for name, value in overrides.items():
        setattr(settings, name, value)
    document = mutate(valid_document())
    if not isinstance(document, str | bytes):
        document = _dumps(document)
    before = row_counts()

    with pytest.raises(ValidationFailed) as refused:
        services.conversation_import(owner=owner, document=document)

    problems = {problem.path: problem.message for problem in refused.value.problems}
    assert set(problems) == set(expected), refused.value.problems
    for path, words in expected.items():
        assert words in problems[path], problems[path]
    assert row_counts() == before


def test_the_uncorrupted_document_imports(existing, owner):
    """The control for the cases above: without the corruption the same document imports."""
    before = row_counts()

    imported = services.conversation_import(owner=owner, document=_dumps(valid_document()))

    assert imported.title == "Sums"
    assert list(imported.messages.order_by("seq").values_list("seq", "role")) == [
        (1, "user"),
        (2, "assistant"),
        (3, "tool"),
        (4, "assistant"),
    ]
    assert row_counts() == (before[0] + 1, before[1] + 4, before[2] + 1)


def test_import_limits_are_inclusive(owner, settings):
    document = _dumps(valid_document()).encode()
    settings.PARLEY_IMPORT_MAX_BYTES = len(document)
    settings.PARLEY_IMPORT_MAX_MESSAGES = 4
    settings.PARLEY_MAX_MESSAGE_CHARS = len("What is 2+2?")

    imported = services.conversation_import(owner=owner, document=document)

    assert imported.message_count == 4


def test_import_reports_every_problem_it_finds(existing, owner):
    document = valid_document()
    document["conversation"]["tools"] = ["teleport"]
    document["conversation"]["metadata"] = {f"k{i}": "v" for i in range(17)}
    document["messages"][0]["content"] = "nul\x00here"
    document["messages"][2]["tool_call_id"] = "call_nobody_made"
    document["messages"][3]["seq"] = 5
    before = row_counts()

    with pytest.raises(ValidationFailed) as refused:
        services.conversation_import(owner=owner, document=_dumps(document))

    assert {problem.path for problem in refused.value.problems} == {
        "$.conversation.tools[0]",
        "$.conversation.metadata",
        "$.messages[0].content",
        "$.messages[2].tool_call_id",
        "$.messages[3].seq",
    }
    assert row_counts() == before


def test_import_reports_every_type_error_at_once(owner):
    document = valid_document()
    document["messages"][0]["content"] = 7
    document["messages"][1]["created_at"] = "yesterday"
    document["messages"][3]["role"] = "narrator"
    del document["conversation"]["draft"]

    with pytest.raises(ValidationFailed) as refused:
        services.conversation_import(owner=owner, document=_dumps(document))

    assert {problem.path for problem in refused.value.problems} == {
        "$.conversation.draft",
        "$.messages[0].content",
        "$.messages[1].created_at",
        "$.messages[3].role",
    }


# --- import: round trip --------------------------------------------------------------

_RISKY = ['"', "'", "`", "```", "\n", "\r\n", "\\", "\t", "</script>", "${x}", "é", "🦜", "\u2028"]
# Anything UTF-8 can carry (so no lone surrogates) except NUL, which no backend stores.
_CHAR = st.characters(codec="utf-8", exclude_characters="\x00")
# Printable, non-space: makes a text non-blank (the services refuse blank messages).
_VISIBLE = st.characters(exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp"))

_text = st.lists(st.one_of(_CHAR, st.sampled_from(_RISKY)), max_size=12).map("".join)
_nonblank = st.tuples(_VISIBLE, _text).map("".join)
_key = st.text(_CHAR, max_size=12)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
    | _text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_key, children, max_size=3),
    max_leaves=6,
)
_extras = st.none() | st.dictionaries(_key, _json, max_size=3)
# Usage as providers report it: the counts and their breakdowns, whole tokens.
_tokens = st.none() | st.integers(min_value=0, max_value=10_000_000)
_usage = st.none() | st.fixed_dictionaries(
    {},
    optional={
        "prompt_tokens": _tokens,
        "completion_tokens": _tokens,
        "total_tokens": _tokens,
        "prompt_tokens_details": st.dictionaries(st.sampled_from(["cached_tokens"]), _tokens),
        "completion_tokens_details": st.dictionaries(
            st.sampled_from(["reasoning_tokens", "audio_tokens"]), _tokens
        ),
    },
)

_user = st.tuples(st.just("user"), _nonblank)
_assistant = st.tuples(st.just("assistant"), _text, _usage, _extras)
_event = st.tuples(st.just("event"), _nonblank)
_draft_then_user = st.tuples(st.just("draft"), _text, _nonblank)
_tool_group = st.tuples(
    st.just("tools"),
    _text,
    st.lists(
        st.tuples(st.sampled_from(BUILTIN_TOOLS), _text, _text), min_size=1, max_size=3
    ),  # (name, arguments, result)
    st.none() | st.tuples(st.integers(min_value=0, max_value=2), _nonblank),  # event inside
    _usage,
)
_steps = st.lists(st.one_of(_user, _assistant, _event, _draft_then_user, _tool_group), max_size=8)
_settings = st.fixed_dictionaries(
    {
        "title": st.text(_CHAR, max_size=30),
        "system_prompt": _text,
        "model": st.text(_CHAR, max_size=20),
        "tools": st.permutations(BUILTIN_TOOLS).flatmap(
            lambda tools: st.integers(0, len(tools)).map(lambda n: list(tools[:n]))
        ),
        "metadata": st.dictionaries(st.text(_CHAR, max_size=64), _text, max_size=16),
    }
)


Written = list[tuple[str, str, str]]  # (role, kind, content) of each stored message


def _build(
    owner: User, options: dict[str, Any], steps: list[tuple[Any, ...]]
) -> tuple[Conversation, Written]:
    """Write a conversation through the services, the way the app and the engine do."""
    conversation = services.conversation_create(owner=owner, **options)
    written: Written = []
    calls = 0
    for step in steps:
        if step[0] == "user":
            services.user_message_append(conversation=conversation, content=step[1])
            written.append(("user", "message", step[1]))
        elif step[0] == "event":
            services.context_event_add(conversation=conversation, content=step[1])
            written.append(("system", "event", step[1]))
        elif step[0] == "draft":
            if services.conversation_draft_update(conversation=conversation, draft=step[1]):
                written.append(("system", "draft_edit", services.draft_edit_notice(step[1])))
            services.user_message_append(conversation=conversation, content=step[2])
            written.append(("user", "message", step[2]))
        elif step[0] == "assistant":
            _, content, usage, payload = step
            written.append(("assistant", "message", content))
            services.message_append(
                conversation=conversation,
                message=NewMessage(
                    role="assistant", content=content, usage=usage, provider_payload=payload
                ),
            )
        else:
            _, content, tools, event, usage = step
            ids = [f"call_{calls + i}" for i in range(len(tools))]
            calls += len(tools)
            written.append(("assistant", "message", content))
            services.message_append(
                conversation=conversation,
                message=NewMessage(
                    role="assistant",
                    content=content,
                    tool_calls=[
                        tool_call(call_id, name, arguments)
                        for call_id, (name, arguments, _) in zip(ids, tools, strict=True)
                    ],
                    usage=usage,
                ),
            )
            for index, (call_id, (name, _, result)) in enumerate(zip(ids, tools, strict=True)):
                if event is not None and event[0] == index:
                    services.context_event_add(conversation=conversation, content=event[1])
                    written.append(("system", "event", event[1]))
                written.append(("tool", "message", result))
                services.message_append(
                    conversation=conversation,
                    message=NewMessage(
                        role="tool", content=result, tool_call_id=call_id, name=name
                    ),
                )
    return refetch(conversation), written


@hypothesis_settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(options=_settings, steps=_steps, final_draft=st.none() | _text)
def test_export_import_export_is_identical_apart_from_ids(owner, options, steps, final_draft):
    original, written = _build(owner, options, steps)
    if final_draft is not None:  # a draft edited after the last message stays a draft
        services.conversation_draft_update(conversation=original, draft=final_draft)
        original = refetch(original)
    first = exporting.export_json(original)

    imported = services.conversation_import(
        owner=owner, document="".join(exporting.export_json_chunks(original))
    )
    second = exporting.export_json(refetch(imported))

    # The export holds exactly what was written, in order...
    assert [(m["role"], m["kind"], m["content"]) for m in first["messages"]] == written
    assert [m["seq"] for m in first["messages"]] == list(range(1, len(written) + 1))
    assert first["conversation"]["metadata"] == options["metadata"]
    # ...and the import gives it back unchanged, under new ids.
    assert _without_ids(second) == _without_ids(first)
    assert second["conversation"]["id"] != first["conversation"]["id"]
    assert not {m["id"] for m in first["messages"]} & {m["id"] for m in second["messages"]}
    assert imported.message_count == len(written)


def test_importing_a_file_twice_gives_two_independent_conversations(owner, outsider):
    source = services.conversation_create(owner=owner, title="Shared file")
    services.user_message_append(conversation=source, content="hello")
    document = "".join(exporting.export_json_chunks(source))
    audits = AuditEvent.objects.filter(action=AuditEvent.Action.IMPORTED)
    before = audits.count()

    first = services.conversation_import(owner=outsider, document=document)
    second = services.conversation_import(owner=outsider, document=document.encode())

    assert len({source.pk, first.pk, second.pk}) == 3
    assert first.owner == outsider
    assert second.owner == outsider
    # Changing one copy leaves the other (and the source) alone.
    services.user_message_append(conversation=first, content="only in the first copy")
    assert first.messages.count() == 2
    assert second.messages.count() == 1
    assert source.messages.count() == 1
    assert audits.count() == before + 2
    event = audits.get(conversation_id=first.pk)
    assert event.actor == outsider
    assert event.owner_id == outsider.pk


def test_an_export_carries_the_usage_an_import_accepts_and_round_trips(owner):
    """Providers may report more than the counts (costs, cache figures): the export
    carries what an import accepts, so a real conversation always imports back, and the
    import's mark (a copy) is not part of the document."""
    source = services.conversation_create(owner=owner, title="Usage")
    services.user_message_append(conversation=source, content="hello")
    reported = {
        "prompt_tokens": 5,
        "completion_tokens": 2,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 1, "odd key": 3, "note": "x"},
        "completion_tokens_details": {"reasoning_tokens": 2**41},
        "prompt_cache_hit_tokens": 4,
        "cost": 0.01,
    }
    services.message_append(
        conversation=source,
        message=NewMessage(role="assistant", content="hi", usage=reported),
    )
    first = exporting.export_json(source)
    assert first["messages"][1]["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 2,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 1},
        "completion_tokens_details": {},
    }
    imported = services.conversation_import(owner=owner, document=json.dumps(first))
    assert set(imported.messages.values_list("copied", flat=True)) == {True}
    second = exporting.export_json(refetch(imported))
    assert _without_ids(second) == _without_ids(first)
    assert "copied" not in second["messages"][1]
