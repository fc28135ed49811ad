"""Logs: JSON lines with LOG_FORMAT=json, a request id on every answer and on every line
logged for it, and no message text in an exception unless PARLEY_LOG_CONTENT is on."""

import io
import json
import logging
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.http import HttpRequest, HttpResponse
from django.urls import path

from config.log_context import (
    LOG_IDS,
    ContentGuardFilter,
    JsonLinesFormatter,
    LogIdsFilter,
    MessageWithheld,
    exception_for_log,
    log_ids_bound,
)

ROOT = Path(__file__).resolve().parents[2]
NEW_ID = re.compile(r"[0-9a-f]{32}")
SECRET = "the-secret-recipe-4711"

log = logging.getLogger("tests.logs")


def a_view(request: HttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    request.user.is_authenticated  # noqa: B018  (looked up, as a view that needs it does)
    log.warning("inside the view")
    return HttpResponse("ok")


urlpatterns = [path("logs/<uuid:conversation_id>/", a_view)]


def json_lines(*configure: logging.Filter) -> tuple[logging.Logger, io.StringIO]:
    """A logger writing through the JSON lines format (and `configure`'s filters)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLinesFormatter())
    handler.addFilter(LogIdsFilter())
    for extra in configure:
        handler.addFilter(extra)
    logger = logging.getLogger(f"tests.logs.json.{uuid.uuid4().hex}")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return logger, stream


def parsed(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


# --- the format ---------------------------------------------------------------------------


def test_a_json_line_has_time_level_logger_message_and_the_ids_in_hand():
    logger, stream = json_lines()
    run_id = uuid.uuid4()
    with log_ids_bound(request_id="req-1", user_id=7, conversation_id="c-1", run_id=run_id):
        logger.info("step %s of %s", 2, 3, extra={"request": object(), "secret": SECRET})
    logger.warning("after the work: no ids")

    first, second = parsed(stream)
    assert list(first) == [
        "time",
        "level",
        "logger",
        "message",
        "request_id",
        "user_id",
        "conversation_id",
        "run_id",
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\+00:00", first["time"])
    assert first["level"] == "INFO"
    assert first["logger"] == logger.name
    assert first["message"] == "step 2 of 3"
    assert (first["request_id"], first["user_id"]) == ("req-1", "7")
    assert (first["conversation_id"], first["run_id"]) == ("c-1", str(run_id))
    # Only those fields: what else a record carries (Django's request object, say) is not
    # written.
    assert SECRET not in stream.getvalue()
    assert set(second) == {"time", "level", "logger", "message"}


def test_an_exception_is_a_field_of_its_line():
    logger, stream = json_lines()
    try:
        raise ConnectionRefusedError("redis at 127.0.0.1:6390 refused")
    except ConnectionRefusedError:
        logger.exception("could not connect")

    (line,) = parsed(stream)
    assert line["message"] == "could not connect"
    assert line["level"] == "ERROR"
    assert line["exception"].startswith("Traceback (most recent call last)")
    assert "ConnectionRefusedError: redis at 127.0.0.1:6390 refused" in line["exception"]
    assert "\n" not in stream.getvalue().rstrip("\n")  # one line, however long the traceback


def python_with_settings(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {
        k: v for k, v in os.environ.items() if k not in ("LOG_FORMAT", "PARLEY_LOG_CONTENT")
    }
    full_env.update(DJANGO_SETTINGS_MODULE="config.settings.test", **env)
    setup = "import django, logging; django.setup(); from config.log_context import log_ids_bound\n"
    return subprocess.run(
        [sys.executable, "-c", setup + code],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


LOG_SOME_LINES = f"""
with log_ids_bound(request_id="req-42", run_id="run-42"):
    logging.getLogger("parley.check").warning("hello %s", "world")
    try:
        raise ValueError("{SECRET}")
    except ValueError:
        logging.getLogger("parley.check").exception("it failed")
"""


def test_log_format_json_makes_the_configured_handler_write_json_lines():
    result = python_with_settings(LOG_SOME_LINES, LOG_FORMAT="json")

    assert result.returncode == 0, result.stderr
    hello, failed = [json.loads(line) for line in result.stderr.splitlines()]
    assert hello["message"] == "hello world"
    assert hello["logger"] == "parley.check"
    assert (hello["request_id"], hello["run_id"]) == ("req-42", "run-42")
    # An exception's message may quote what people wrote: only its type and traceback.
    assert "ValueError" in failed["exception"]
    assert re.search(r'File "<string>", line \d+', failed["exception"])  # where, still
    assert SECRET not in result.stderr


def test_logs_stay_plain_text_by_default_and_refuse_an_unknown_format():
    plain = python_with_settings(LOG_SOME_LINES)
    assert plain.returncode == 0, plain.stderr
    assert re.search(r"WARNING parley\.check: hello world$", plain.stderr, re.MULTILINE)
    assert not plain.stderr.lstrip().startswith("{")
    assert SECRET not in plain.stderr

    refused = python_with_settings("pass", LOG_FORMAT="yaml")
    assert refused.returncode != 0
    assert "LOG_FORMAT must be plain or json" in refused.stderr


def test_with_content_logging_an_exception_keeps_its_message():
    result = python_with_settings(LOG_SOME_LINES, LOG_FORMAT="json", PARLEY_LOG_CONTENT="true")
    assert result.returncode == 0, result.stderr
    assert f"ValueError: {SECRET}" in json.loads(result.stderr.splitlines()[1])["exception"]


# --- what an exception may say ------------------------------------------------------------


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def test_an_exception_message_is_withheld_but_its_type_and_traceback_kept(settings):
    settings.PARLEY_LOG_CONTENT = False
    error = raised(ValueError(f"no row for {SECRET}"))

    shown = exception_for_log(error)

    assert isinstance(shown, MessageWithheld)
    assert SECRET not in str(shown)
    assert "ValueError" in str(shown)
    assert shown.__traceback__ is error.__traceback__
    assert exception_for_log(shown) is shown  # never wrapped twice


def test_connection_errors_keep_their_message_except_a_tools(settings):
    settings.PARLEY_LOG_CONTENT = False
    refused = raised(ConnectionRefusedError("connection refused"))
    assert exception_for_log(refused) is refused
    # A tool's error is made of what it was given, whatever its type.
    assert isinstance(exception_for_log(refused, by_type=False), MessageWithheld)


def test_with_content_logging_every_exception_is_logged_whole(settings):
    settings.PARLEY_LOG_CONTENT = True
    error = raised(ValueError(SECRET))
    assert exception_for_log(error, by_type=False) is error


def test_the_guard_withholds_messages_of_exceptions_others_log(settings):
    settings.PARLEY_LOG_CONTENT = False
    logger, stream = json_lines(ContentGuardFilter())
    error = raised(RuntimeError(f"Failing row contains ({SECRET})"))
    record = logger.makeRecord(logger.name, logging.ERROR, __file__, 1, "boom", (), None)
    record.exc_info = (type(error), error, error.__traceback__)
    record.exc_text = f"cached by another handler: {SECRET}"

    logger.handle(record)

    (line,) = parsed(stream)
    assert "RuntimeError (its message is not logged" in line["exception"]
    assert SECRET not in stream.getvalue()


def test_the_guard_withholds_an_exception_passed_as_an_argument(settings):
    # As Daphne logs an application's crash: "Exception inside application: %s".
    settings.PARLEY_LOG_CONTENT = False
    logger, stream = json_lines(ContentGuardFilter())
    error = raised(KeyError(SECRET))

    logger.error("Exception inside application: %s", error, exc_info=error)

    (line,) = parsed(stream)
    assert line["message"].startswith("Exception inside application: KeyError (its message")
    assert SECRET not in stream.getvalue()


# --- request ids --------------------------------------------------------------------------


@pytest.fixture
def view_lines(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.handler.addFilter(LogIdsFilter())
    caplog.set_level(logging.INFO)
    return caplog


def lines_of(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == message]


def ids(record: logging.LogRecord) -> dict[str, str | None]:
    return {name: record.__dict__.get(name) for name in LOG_IDS}


@pytest.mark.urls(__name__)
@pytest.mark.django_db
def test_an_answer_carries_a_new_request_id_and_so_do_the_lines_logged_for_it(
    client, owner, view_lines
):
    client.force_login(owner)
    conversation_id = uuid.uuid4()

    response = client.get(f"/logs/{conversation_id}/")

    request_id = response["X-Request-ID"]
    assert NEW_ID.fullmatch(request_id)
    (line,) = lines_of(view_lines, "inside the view")
    assert ids(line) == {
        "request_id": request_id,
        "user_id": str(owner.pk),
        "conversation_id": str(conversation_id),
        "run_id": None,
    }
    assert client.get(f"/logs/{conversation_id}/")["X-Request-ID"] != request_id


@pytest.mark.urls(__name__)
@pytest.mark.django_db
def test_a_request_id_from_the_caller_is_kept(client, view_lines):
    response = client.get(f"/logs/{uuid.uuid4()}/", HTTP_X_REQUEST_ID="lb-7f3a:trace.01_x")

    assert response["X-Request-ID"] == "lb-7f3a:trace.01_x"
    (line,) = lines_of(view_lines, "inside the view")
    assert ids(line)["request_id"] == "lb-7f3a:trace.01_x"
    assert ids(line)["user_id"] is None  # nobody logged in


@pytest.mark.urls(__name__)
@pytest.mark.django_db
@pytest.mark.parametrize(
    "offered",
    ["two words", "x" * 65, 'quote"d', "new\\nline", "{}", "caf\u00e9", ""],
)
def test_an_unsafe_request_id_is_replaced(client, view_lines, offered):
    response = client.get(f"/logs/{uuid.uuid4()}/", HTTP_X_REQUEST_ID=offered)

    request_id = response["X-Request-ID"]
    assert NEW_ID.fullmatch(request_id)
    (line,) = lines_of(view_lines, "inside the view")
    assert ids(line)["request_id"] == request_id


@pytest.mark.urls(__name__)
@pytest.mark.django_db
def test_djangos_own_line_about_an_answer_carries_its_request_id(client, view_lines):
    response = client.get("/no-such-page/", HTTP_X_REQUEST_ID="missing-1")

    assert response.status_code == 404
    assert response["X-Request-ID"] == "missing-1"
    # Logged once the request has been handled, from the request it names.
    (line,) = lines_of(view_lines, "Not Found: /no-such-page/")
    assert ids(line)["request_id"] == "missing-1"


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True)
async def test_an_answer_over_asgi_carries_the_request_id_too(async_client, view_lines):
    response = await async_client.get(f"/logs/{uuid.uuid4()}/", headers={"X-Request-ID": "as-1"})

    assert response["X-Request-ID"] == "as-1"
    (line,) = lines_of(view_lines, "inside the view")
    assert ids(line)["request_id"] == "as-1"


@pytest.mark.urls(__name__)
@pytest.mark.django_db
def test_the_request_id_ends_with_its_request(client, view_lines):
    client.get(f"/logs/{uuid.uuid4()}/", HTTP_X_REQUEST_ID="over-1")
    log.warning("after the request")

    (line,) = lines_of(view_lines, "after the request")
    assert ids(line)["request_id"] is None
