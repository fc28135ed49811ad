"""ChatGPT import, whole files and the service: an export read conversation by conversation
(garbage refused by path), each conversation stored on its own through the ordinary
import, failures and the quota reported per conversation, and the `import_chatgpt`
command."""

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError

from conversations import services
from conversations.errors import Problem, ValidationFailed
from conversations.formats.chatgpt import chatgpt_export_detect, chatgpt_file_conversions
from conversations.models import Conversation
from conversations.services import chatgpt_import
from tests.support.chatgpt import (
    CYCLE,
    EDITED,
    LINEAR,
    MISSING_PARENT,
    PICTURE,
    REASONING,
    Chat,
    check_document,
    fixture,
    fixture_bytes,
    leaves,
    stored_paths,
)

# --- whole files ------------------------------------------------------------------------------


def test_a_file_yields_each_conversation_converted_or_with_its_problems():
    results = list(chatgpt_file_conversions(fixture_bytes()))
    assert [r.index for r in results] == list(range(7))
    failed = [r.index for r in results if r.converted is None]
    assert failed == [CYCLE, MISSING_PARENT]
    assert results[CYCLE].title == "Broken: a cycle"
    assert all(p.path.startswith(f"$[{CYCLE}]") for p in results[CYCLE].problems)
    assert results[EDITED].chatgpt_id == "6650a1c0-0000-8000-9000-00000000000b"
    for result in results:
        if result.converted is not None:
            check_document(result.converted.document)
            assert len(result.converted.sources) == len(result.converted.document["messages"])


def test_unstorable_text_or_deep_nesting_fails_only_its_conversation(settings):
    settings.PARLEY_JSON_MAX_DEPTH = 12
    good = Chat("good")
    good.add(good.hidden_system(), "user", "fine")
    nul = Chat("nul")
    nul.add(nul.hidden_system(), "user", "bad\x00text", node_id="n-nul")
    deep = Chat("deep")
    nested: Any = "x"
    for _ in range(20):
        nested = [nested]
    deep.add(deep.hidden_system(), "user", "ok", metadata={"nested": nested})
    raw = json.dumps([good.conversation(), nul.conversation(), deep.conversation()]).encode()
    results = list(chatgpt_file_conversions(raw))
    assert results[0].converted is not None
    assert results[1].code == results[2].code == "invalid_json"
    assert results[1].problems[0].path == "$[1].mapping.n-nul.message.content.parts[0]"
    assert "nesting is deeper" in results[2].problems[0].message


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b'[{"title": "x",', "invalid_json"),
        (b"\xff\xfe\x00garbage", "invalid_json"),
        (b"42", "invalid_import"),
        (b'"conversations"', "invalid_import"),
        (b'{"title": "no mapping here"}', "invalid_import"),
    ],
)
def test_a_file_that_cannot_be_read_is_refused_whole(raw, code):
    with pytest.raises(ValidationFailed) as failure:
        list(chatgpt_file_conversions(raw))
    assert failure.value.code == code
    assert failure.value.problems[0].path == "$"


def test_a_file_over_the_size_limit_is_refused(settings):
    settings.PARLEY_IMPORT_MAX_BYTES = 100
    with pytest.raises(ValidationFailed) as failure:
        list(chatgpt_file_conversions(fixture_bytes()))
    assert "the limit is 100" in str(failure.value)


def test_one_conversation_object_and_the_wrapped_form_are_exports_too():
    one = fixture()[LINEAR]
    [result] = chatgpt_file_conversions(json.dumps(one).encode())
    assert result.converted is not None
    assert result.path == "$"
    wrapped = json.dumps({"conversations": [one, {"mapping": 1}]}).encode()
    results = list(chatgpt_file_conversions(wrapped))
    assert results[1].problems[0].path == "$.conversations[1].mapping"
    assert chatgpt_export_detect(b" \n[]")
    assert chatgpt_export_detect(json.dumps(one).encode())
    assert chatgpt_export_detect(wrapped)
    # Parley's own forms are not ChatGPT exports, even when they mention a mapping.
    assert not chatgpt_export_detect(
        b'{"messages": [{"role": "user", "content": "\\"mapping\\""}]}'
    )
    assert not chatgpt_export_detect(b'{"format": "parley.conversation", "mapping"')


# --- the service -------------------------------------------------------------------------------


@pytest.fixture
def stored(monkeypatch, owner):
    """conversation_import replaced by a plain create, so the service's own logic (one
    conversation at a time, errors, quota) is tested whatever the branch storage does."""
    documents: list[dict[str, Any]] = []

    def fake_import(*, owner, document):
        parsed = json.loads(document)
        documents.append(parsed)
        return services.conversation_create(owner=owner, title=parsed["conversation"]["title"])

    monkeypatch.setattr(chatgpt_import, "conversation_import", fake_import)
    return documents


def test_each_conversation_is_stored_on_its_own_and_failures_are_reported(owner, stored):
    started: list[int] = []
    done: list[int] = []
    report = services.conversations_import_chatgpt(
        owner=owner, document=fixture_bytes(), on_start=started.append, progress=done.append
    )
    assert (started, sum(done)) == ([7], 7)
    assert (report.imported, report.failed) == (5, 2)
    assert [r.status for r in report.results] == ["imported"] * 5 + ["failed"] * 2
    assert len(stored) == 5
    failure = report.results[CYCLE].error
    assert failure is not None
    assert failure["code"] == "invalid_import"
    assert failure["details"]["problems"][0]["path"].startswith(f"$[{CYCLE}].mapping.")
    payload = report.payload()
    assert payload["imported"] == 5
    assert payload["failed"] == 2
    assert payload["results"][0]["conversation"]["title"] == "Sourdough starter schedule"
    assert payload["results"][CYCLE]["conversation"] is None


def test_the_quota_fails_the_remaining_conversations_clearly(owner, stored, settings):
    settings.PARLEY_MAX_CONVERSATIONS_PER_USER = 2
    report = services.conversations_import_chatgpt(owner=owner, document=fixture_bytes())
    assert [r.status for r in report.results] == ["imported"] * 2 + ["failed"] * 5
    for result in report.results[2:]:
        assert result.error is not None
        assert result.error["code"] == "conversation_quota_exceeded"
        assert "limit of 2 conversations" in result.error["message"]
    assert report.results[PICTURE].title == "What plant is this?"
    assert Conversation.objects.filter(owner=owner).count() == 2


def test_problems_the_ordinary_import_finds_point_into_the_export(owner, monkeypatch):
    def refuse(*, owner, document):
        raise ValidationFailed(
            [Problem("$.messages[1].content", "is bad"), Problem("$.conversation.title", "no")]
        )

    monkeypatch.setattr(chatgpt_import, "conversation_import", refuse)
    report = services.conversations_import_chatgpt(owner=owner, document=fixture_bytes())
    converted = next(chatgpt_file_conversions(fixture_bytes())).converted
    assert converted is not None
    node = converted.sources[1]
    assert fixture()[LINEAR]["mapping"][node]["message"]["author"]["role"] == "assistant"
    error = report.results[LINEAR].error
    assert error is not None
    assert error["code"] == "invalid_import"
    assert report.results[LINEAR].problems() == [
        Problem(f"$[0].mapping.{node}.message", "content: is bad"),
        Problem("$[0]", "conversation.title: no"),
    ]


def test_a_database_error_fails_only_its_conversation(owner, stored, monkeypatch):
    calls = []
    real = chatgpt_import.conversation_import

    def flaky(*, owner, document):
        calls.append(1)
        if len(calls) == 2:
            raise DatabaseError("boom")
        return real(owner=owner, document=document)

    monkeypatch.setattr(chatgpt_import, "conversation_import", flaky)
    report = services.conversations_import_chatgpt(owner=owner, document=fixture_bytes())
    assert [r.status for r in report.results[:5]] == ["imported", "failed"] + ["imported"] * 3
    assert report.results[1].error is not None
    assert report.results[1].error["code"] == "storage_failed"


# --- stored for real (needs the branch storage: conversation_import reading "branches") -----


def test_the_fixture_is_stored_as_trees(owner):
    report = services.conversations_import_chatgpt(owner=owner, document=fixture_bytes())
    assert (report.imported, report.failed) == (5, 2)
    source = fixture()[EDITED]
    conversation = report.results[EDITED].conversation
    assert conversation is not None
    assert conversation.owner == owner
    paths = stored_paths(conversation)
    assert len(paths) == leaves(source["mapping"])
    active = [m.content for m in paths[conversation.active_branch_id]]
    assert active[-1] == "- Monsieur Moustache\n- Croissant\n- Poussière"
    assert [m.seq for m in paths[conversation.active_branch_id]] == [1, 2, 3, 4]
    assert "Keep answers short" in conversation.system_prompt
    reasoning = report.results[REASONING].conversation
    assert reasoning is not None
    [reply] = [m for m in stored_paths(reasoning)[reasoning.active_branch_id] if m.reasoning_ms]
    assert reply.reasoning_ms == 4000
    assert reply.content == "No: 221 = 13 \u00d7 17."
    assert Conversation.objects.filter(owner=owner).count() == 5


def test_the_command_imports_with_a_progress_bar(owner, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_bytes(fixture_bytes())
    out, err = StringIO(), StringIO()
    call_command("import_chatgpt", owner.username, str(path), stdout=out, stderr=err)
    assert "Imported 5 of 7 conversation(s)." in out.getvalue()
    assert "#5 'Broken: a cycle'" in out.getvalue()
    assert "7/7" in err.getvalue()
    assert Conversation.objects.filter(owner=owner).count() == 5


def test_the_command_refuses_an_unknown_user_or_an_unreadable_file(owner, tmp_path):
    with pytest.raises(CommandError, match="No user named"):
        call_command("import_chatgpt", "nobody", str(tmp_path / "x.json"))
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("import_chatgpt", owner.username, str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"{not json")
    with pytest.raises(CommandError, match="Not a readable ChatGPT export"):
        call_command("import_chatgpt", owner.username, str(bad))
    only_broken = tmp_path / "broken.json"
    only_broken.write_text(json.dumps([fixture()[CYCLE]]))
    with pytest.raises(CommandError, match="Nothing was imported"):
        call_command("import_chatgpt", owner.username, str(only_broken), stdout=StringIO())
