"""The declarations every event, notification and frame is checked against
(conversations/protocol.py; the check itself: tests/support/protocol_check.py)."""

from conversations import event_types, notifications, protocol
from tests.support.events import message_dict, run_dict

RUN_ID = "4a0ff27c-3f1d-4b8a-9d21-3a4f0f0b6f70"


def event(kind: str, **payload: object) -> dict[str, object]:
    return {"type": kind, "run_id": RUN_ID, "sequence_number": 3, **payload}


def test_every_event_type_and_notification_has_one_declaration():
    assert set(protocol.RUN_EVENTS) == set(event_types.EVENT_TYPES)
    names = {
        value
        for name, value in vars(notifications).items()
        if name.isupper()
        and isinstance(value, str)
        and value.startswith(("conversation", "folders"))
    }
    assert set(protocol.NOTIFICATIONS) == names
    assert set(protocol.RUN_EVENTS) | set(protocol.NOTIFICATIONS) <= set(protocol.SOCKET_FRAMES)


def test_a_whole_event_conforms():
    completed = event("message.completed", message=message_dict(RUN_ID, "Hi"))
    assert protocol.protocol_problems(protocol.RUN_EVENTS, completed) == []
    ended = event("run.completed", run=run_dict(RUN_ID, "completed"))
    assert protocol.protocol_problems(protocol.RUN_EVENTS, ended) == []


def test_a_missing_key_a_stray_key_and_a_wrong_type_are_each_named():
    created = event("message.created", message_id="m1", role="assistant", attempt=1)
    assert protocol.protocol_problems(protocol.RUN_EVENTS, created) == []

    missing = {k: v for k, v in created.items() if k != "attempt"}
    assert protocol.protocol_problems(protocol.RUN_EVENTS, missing) == ["attempt: Field required"]
    stray = protocol.protocol_problems(protocol.RUN_EVENTS, {**created, "by": "user"})
    assert stray == ["by: Extra inputs are not permitted"]
    (wrong,) = protocol.protocol_problems(protocol.RUN_EVENTS, {**created, "attempt": "1"})
    assert wrong.startswith("attempt:")


def test_an_undeclared_type_and_a_shapeless_payload_are_violations():
    assert protocol.protocol_problems(protocol.RUN_EVENTS, event("run.exploded")) == [
        "undeclared type 'run.exploded'"
    ]
    assert protocol.protocol_problems(protocol.SOCKET_FRAMES, ["not", "a", "frame"]) == [
        "not an object with a string 'type'"
    ]


def test_a_socket_frame_of_a_notification_is_checked_as_the_notification():
    frame = {"type": "conversation.draft_updated", "conversation_id": RUN_ID, "draft": "x"}
    assert protocol.protocol_problems(protocol.SOCKET_FRAMES, frame) == ["by: Field required"]


def test_an_error_frame_speaks_the_error_vocabulary():
    frame = {"type": "error", "code": "run_active", "message": "Wait for the reply."}
    assert protocol.protocol_problems(protocol.SOCKET_FRAMES, frame) == []
    lost = {**frame, "code": "stream_unavailable", "run_id": RUN_ID, "after": 7}
    assert protocol.protocol_problems(protocol.SOCKET_FRAMES, lost) == []
    (problem,) = protocol.protocol_problems(protocol.SOCKET_FRAMES, {**frame, "code": "conflict"})
    assert "not a code of the error vocabulary" in problem
