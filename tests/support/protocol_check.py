"""Every run event, notification and websocket frame the suite makes, checked against its
declaration in conversations/protocol.py, as Zulip checks every event its tests send.

Checked where each leaves this process: a run event when a writer (or a recorder) makes
it, and again when a reader reads it (events a worker process wrote), a notification
when it is sent to a group, a frame when a consumer sends it. A violation is kept and
fails the test that made it at its end: raised on the spot it could be swallowed by the
code under test (a notification's send is best effort)."""

import json
from typing import Any

import pytest

from conversations import notifications, protocol
from conversations.consumers import ConversationConsumer
from conversations.engine.eventlog import reader, writer

Registry = dict[str, type[protocol._Shape]]


class Violations:
    def __init__(self) -> None:
        self.found: list[str] = []
        self.seen: set[tuple[str, str]] = set()

    def check(self, where: str, registry: Registry, payload: Any) -> None:
        kind = payload.get("type") if isinstance(payload, dict) else None
        self.seen.add((where, str(kind)))
        for problem in protocol.protocol_problems(registry, payload):
            self.found.append(f"{where} {kind!r}: {problem}\n    {payload!r}"[:2000])


def protocol_checks_install(monkeypatch: pytest.MonkeyPatch, violations: Violations) -> None:
    """Check, until the test ends, every run event written or read, every notification
    sent and every frame a consumer sends; what does not match is kept in `violations`."""
    entry = writer.EventWriter._entry

    def written(self: Any, type: str, payload: Any) -> Any:
        made = entry(self, type, payload)
        violations.check("run event", protocol.RUN_EVENTS, json.loads(made[2]))
        return made

    take = reader._Cursor.take

    def read(self: Any, entries: Any) -> list[Any]:
        events = take(self, entries)
        for event in events:
            violations.check("run event read", protocol.RUN_EVENTS, event)
        return events

    send = notifications._send

    def sent(group: str, bodies: list[dict[str, Any]]) -> None:
        for body in bodies:
            violations.check("notification", protocol.NOTIFICATIONS, body)
        send(group, bodies)

    send_json = ConversationConsumer.send_json

    async def framed(self: Any, content: Any, close: bool = False) -> None:
        violations.check("socket frame", protocol.SOCKET_FRAMES, content)
        await send_json(self, content, close=close)

    monkeypatch.setattr(writer.EventWriter, "_entry", written)
    monkeypatch.setattr(reader._Cursor, "take", read)
    monkeypatch.setattr(notifications, "_send", sent)
    monkeypatch.setattr(ConversationConsumer, "send_json", framed)


def protocol_violations_fail(violations: Violations) -> None:
    """Fail the test that made events not matching their declaration."""
    if violations.found:
        pytest.fail(
            "events that do not match their declaration in conversations/protocol.py:\n"
            + "\n".join(violations.found),
            pytrace=False,
        )
