"""Every answer of the /openai/v1 views in this process checked against the Open Responses
specification (tests/support/open_responses.py), in every test: the views' answers as
the client gets them, whatever the test sent.

- a response (`POST /responses`, `GET /responses/{id}`, `POST /responses/{id}/cancel`):
  a ResponseResource, or a stream by the specification's rules, each frame checked as it
  passes on to the client;
- `POST /responses/compact`: a CompactResource;
- items (a response's input items, a conversation's items listed, added or retrieved):
  each an ItemField;
- every error (status >= 400): `{"error": ErrorPayload}`.

The specification defines no conversation, file, model, deleted-object or list object:
those, and a list's own keys, are left unchecked.

A problem is kept, not raised: raised in a view it would become the answer (or be lost
in a live server's thread). The test that made it fails at its end.
"""

import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from django.http import StreamingHttpResponse
from rest_framework.request import Request
from rest_framework.utils.encoders import JSONEncoder

from conversations.openai_api.base import OpenAIView
from tests.support.open_responses import (
    SseCheck,
    compaction_check,
    error_check,
    item_check,
    response_check,
)

_VIEWS = "conversations.openai_api.views"


def _items_check(body: Any) -> None:
    for item in body["data"]:
        item_check(item)


# (view class, method) → the check of its successful JSON answer.
JSON_CHECKS: dict[tuple[str, str], Callable[[Any], None]] = {
    (f"{_VIEWS}.responses.ResponsesView", "POST"): response_check,
    (f"{_VIEWS}.responses.ResponseView", "GET"): response_check,
    (f"{_VIEWS}.responses.ResponseCancelView", "POST"): response_check,
    (f"{_VIEWS}.responses.InputItemsView", "GET"): _items_check,
    (f"{_VIEWS}.compact.CompactView", "POST"): compaction_check,
    (f"{_VIEWS}.items.ItemsView", "GET"): _items_check,
    (f"{_VIEWS}.items.ItemsView", "POST"): _items_check,
    (f"{_VIEWS}.items.ItemView", "GET"): item_check,
}


class Answers:
    """The problems found in the answers of one test (from any thread)."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self._lock = threading.Lock()

    def add(self, where: str, problems: list[str]) -> None:
        with self._lock:
            self.found += [f"{where}: {problem}"[:3000] for problem in problems]


def _as_sent(data: Any) -> Any:
    """The data as the client reads it (ids, times and the like as JSON gives them)."""
    return json.loads(json.dumps(data, cls=JSONEncoder))


def _error_body(response: Any) -> Any:
    if hasattr(response, "data"):
        return _as_sent(response.data)
    if isinstance(response, StreamingHttpResponse):
        return "a stream"
    try:
        return json.loads(response.content)
    except ValueError:
        return response.content[:200]


def _checked(check: Callable[[Any], None], body: Any) -> list[str]:
    try:
        check(body)
    except AssertionError as exc:
        return str(exc).split("\n")
    return []


def _stream_wrap(
    response: StreamingHttpResponse, stream: SseCheck, report: Callable[[], None]
) -> None:
    """The stream's frames checked as they pass on. Its end is checked only when it ended:
    a client that hangs up early cut it, and a stream the server cuts short (no terminal
    event, no `[DONE]`: the client resumes with `starting_after`) is a dropped
    connection to the client."""

    def finish(ended: bool) -> None:
        if ended and (stream.terminal is not None or stream.done):
            stream.end()
        report()

    if response.is_async:
        source: Any = response.streaming_content

        async def passed_async() -> AsyncIterator[bytes]:
            ended = False
            try:
                async for chunk in source:
                    stream.feed(chunk)
                    yield chunk
                ended = True
            finally:
                finish(ended)

        response.streaming_content = passed_async()
    else:
        chunks: Iterator[bytes] = iter(response.streaming_content)  # type: ignore[arg-type]

        def passed() -> Iterator[bytes]:
            ended = False
            try:
                for chunk in chunks:
                    stream.feed(chunk)
                    yield chunk
                ended = True
            finally:
                finish(ended)

        response.streaming_content = passed()


def _answer_check(view: OpenAIView, request: Request, response: Any, answers: Answers) -> None:
    where = f"{request.method} {request.path} ({response.status_code})"
    if response.status_code >= 400:
        answers.add(where, _checked(error_check, _error_body(response)))
        return
    cls = type(view)
    check = JSON_CHECKS.get((f"{cls.__module__}.{cls.__qualname__}", request.method or ""))
    if check is None:
        return
    if isinstance(response, StreamingHttpResponse):
        raw = request.query_params.get("starting_after")
        stream = SseCheck(starting_after=int(raw) if raw and raw.isdigit() else None)
        _stream_wrap(response, stream, lambda: answers.add(where, stream.problems))
        return
    answers.add(where, _checked(check, _as_sent(response.data)))


def open_responses_checks_install(monkeypatch: pytest.MonkeyPatch, answers: Answers) -> None:
    """Check, until the test ends, every answer of an OpenAIView; problems go to
    `answers`."""
    finalize = OpenAIView.finalize_response

    def finalized(
        self: OpenAIView, request: Request, response: Any, *args: Any, **kwargs: Any
    ) -> Any:
        response = finalize(self, request, response, *args, **kwargs)
        _answer_check(self, request, response, answers)
        return response

    monkeypatch.setattr(OpenAIView, "finalize_response", finalized)


def open_responses_violations_fail(answers: Answers) -> None:
    if answers.found:
        pytest.fail(
            "/openai/v1 answers that do not match the Open Responses specification"
            " (tests/support/open_responses.py):\n" + "\n".join(answers.found),
            pytrace=False,
        )
