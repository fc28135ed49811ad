import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache

from accounts.models import User
from conversations import services
from conversations.models import Conversation
from tests.support.fake_openai import FakeOpenAI
from tests.support.open_responses_check import (
    Answers,
    open_responses_checks_install,
    open_responses_violations_fail,
)
from tests.support.protocol_check import (
    Violations,
    protocol_checks_install,
    protocol_violations_fail,
)


@pytest.fixture
def owner(db) -> User:
    return User.objects.create_user(username="alice", password="pw-alice-123")


@pytest.fixture
def outsider(db) -> User:
    return User.objects.create_user(username="mallory", password="pw-mallory-123")


@pytest.fixture
def conversation(owner) -> Conversation:
    return services.conversation_create(owner=owner, title="Cats")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """With REDIS_URL set, the cache (request budgets, log-in counters) lives in this test
    process's own database too, as the rest does (tests/support/redis_server.py): user ids
    repeat between processes, and one process's `cache.clear()` must not reset another's."""
    from django.conf import settings

    from tests.support.redis_server import redis_database_per_test_process

    cache_config = settings.CACHES["default"]
    if cache_config["BACKEND"].endswith("SharedRedisCache"):
        cache_config["LOCATION"] = redis_database_per_test_process(cache_config["LOCATION"])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test needs a node id of its own: the parallel run hands tests out by id and
    would run only one of two that share it, silently."""
    shared = [nodeid for nodeid, count in Counter(i.nodeid for i in items).items() if count > 1]
    if shared:
        raise pytest.UsageError(f"tests share node ids: {', '.join(shared[:5])}")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test database, dropped at the end only once nothing else holds it:
    a child process of the last test may still be closing its connection, and a thread of
    this process may keep one open, either of which would make the drop fail."""
    yield
    with django_db_blocker.unblock():
        database_others_end(seconds=5)


def database_others_end(*, seconds: float) -> None:
    """Wait up to `seconds` for other sessions on the test database to end, then end those
    left (PostgreSQL; SQLite has no sessions to wait for)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    others = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid()"
    )
    deadline = time.monotonic() + seconds
    with connection.cursor() as cursor:
        while True:
            cursor.execute(others)
            if not cursor.fetchall() or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        cursor.execute(f"SELECT pg_terminate_backend(pid) FROM ({others}) AS left_over")
    connection.close()


def pytest_report_header(config: pytest.Config) -> str:
    from django.conf import settings

    database = settings.DATABASES["default"]
    return f"database: {database['ENGINE'].rsplit('.', 1)[-1]} ({database['NAME']})"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis-protocol server: the one in REDIS_URL (CI, a developer's machine), or an
    embedded Valkey started for this test session, as `make run` does."""
    from tests.support.redis_server import redis_start

    url, stop = redis_start()
    yield url
    stop()


@pytest.fixture(autouse=True)
def protocol_checked(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Violations]:
    """Every run event, notification and frame a test makes is checked against its
    declaration (tests/support/protocol_check.py), unless the test writes hand-made events
    to a log to test the log itself."""
    violations = Violations()
    if request.node.get_closest_marker("synthetic_events"):
        yield violations
        return
    protocol_checks_install(monkeypatch, violations)
    yield violations
    protocol_violations_fail(violations)


@pytest.fixture(autouse=True)
def open_responses_checked(monkeypatch: pytest.MonkeyPatch) -> Iterator[Answers]:
    """Every answer of /openai/v1 a test gets is checked against the Open Responses
    specification (tests/support/open_responses_check.py), whatever the test sent."""
    answers = Answers()
    open_responses_checks_install(monkeypatch, answers)
    yield answers
    open_responses_violations_fail(answers)


@pytest.fixture(autouse=True)
def file_storage(settings: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Uploaded files' bytes go to a directory of this test's own."""
    root = tmp_path_factory.mktemp("media")
    settings.STORAGES = {
        **settings.STORAGES,
        "files": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(root), "base_url": None},
        },
    }
    return root


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """A local S3-compatible server process for this test session, stopped after."""
    from tests.support.s3_server import s3_server_start

    server = s3_server_start()
    yield server
    server.stop()


@pytest.fixture
def s3_files(file_storage: Any, s3_server: Any, settings: Any, monkeypatch: Any) -> Any:
    """Uploaded files' bytes go to a new bucket of the local S3 server (an `S3Bucket`
    of tests/support/s3_server.py) instead of this test's directory."""
    from tests.support.s3_server import s3_files_use

    return s3_files_use(server=s3_server, settings=settings, monkeypatch=monkeypatch)


@pytest.fixture
def fresh_throttles() -> None:
    """Throttle counters are keyed by user id, and SQLite reuses the ids of rolled-back
    users: without this, one test would spend the next one's request budget."""
    cache.clear()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started fake OpenAI-compatible server (see tests/support/fake_openai.py), stopped
    after."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def event_log_redis(redis_url: str, settings: Any) -> Iterator[Any]:
    """A Redis-protocol server for the run event logs alone, which the test may restart
    (its data dropped, as a restarted cache-only Redis does); the channel layer, the broker
    and the caches stay on the session's server."""
    from tests.support.faults import RestartableRedis

    server = RestartableRedis()
    server.start()
    settings.REDIS_URL = server.url
    yield server
    server.stop()
