"""Browser-test fixtures: one stack and one browser per module, a fresh context per test.
A test that drives the browser or the stack is marked slow; the pages rendered without a
browser are not."""

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from accounts.models import User
from conversations.models import Run
from tests.support.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    TIMEOUT_MS,
    Stack,
    log_in,
    page_watched,
)
from tests.support.fake_openai import FakeOpenAI
from tests.support.web_server import web_start
from tests.support.workers import worker_start

# The fixtures that start Chromium or Daphne and a worker.
PROCESS_FIXTURES = {"browser", "stack"}

# Assertions wait as long as actions do: with the suite in two processes, a reply's end
# may take a loaded host more than Playwright's default five seconds to show.
expect.set_options(timeout=TIMEOUT_MS)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (.ci/run does)")
    # Playwright's sync API keeps an event loop registered on this thread (it runs in a
    # greenlet), which trips Django's guard against ORM calls from async code although no
    # coroutine ever runs the test's queries. Allowed for the browser's lifetime only.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            yield browser
            browser.close()


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, django_db_setup, redis_url: str) -> Iterator[Stack]:
    """Daphne and a worker shared by a module's tests (each test's data is flushed after
    it, the processes stay); replies come from the fake OpenAI server. A module's
    `STACK_ENV` adds settings of its own (smaller limits, say)."""
    with FakeOpenAI() as fake:
        env = {
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": fake.base_url,
            "OPENAI_MAX_RETRIES": "0",
            "PARLEY_EVENT_COALESCE_MS": "100",
            **getattr(request.module, "STACK_ENV", {}),
        }
        worker = worker_start(redis_url=redis_url, env=env)
        try:
            web = web_start(redis_url=redis_url, env=env)
        except Exception:
            worker.stop()
            raise
        yield Stack(web=web, worker=worker, fake=fake)
        web.stop()
        worker.stop()


@pytest.fixture
def context(browser: Browser, stack: Stack, transactional_db: None) -> Iterator[BrowserContext]:
    context = browser.new_context(base_url=stack.url, accept_downloads=True)
    context.set_default_timeout(TIMEOUT_MS)
    yield context
    # Before the test's data is flushed (this fixture needs the database, so it ends
    # first): a page still sending requests, or a worker still storing the last reply
    # when the flush runs, deadlocks with it.
    context.close()
    runs_settle(seconds=10)


def runs_settle(*, seconds: float) -> None:
    """Wait until no run is active, for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while Run.objects.filter(status__in=Run.ACTIVE_STATUSES).exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


@pytest.fixture
def page(context: BrowserContext) -> Page:
    # Script errors on the page fail the test: a broken module would otherwise just hang.
    return page_watched(context)


@pytest.fixture(autouse=True)
def _fresh_fake(request: pytest.FixtureRequest) -> None:
    # Scripts a failed test left queued must not answer the next test's requests.
    if "stack" in request.fixturenames:
        request.getfixturevalue("stack").fake.reset()


@pytest.fixture
def chat_page(page: Page, context: BrowserContext, stack: Stack, owner: User) -> Page:
    """A logged-in page of the owner's, not yet on the chat."""
    log_in(context, stack, owner)
    return page
