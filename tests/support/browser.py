"""The real stack for browser tests (Daphne + a Celery worker + Redis + the test database +
the fake OpenAI server) and Debian's Chromium driven by Playwright.

Playwright's own browser download is never used: CI installs the distribution's package.
"""

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.test import Client
from playwright.sync_api import BrowserContext, Page

from accounts.models import User
from tests.support.fake_openai import FakeOpenAI
from tests.support.web_server import WebServer
from tests.support.workers import Worker

CHROMIUM = Path(os.environ.get("PARLEY_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Generous for a loaded 2-core CI machine, short enough that a hang fails quickly.
TIMEOUT_MS = 15_000


@dataclass
class Stack:
    web: WebServer
    worker: Worker
    fake: FakeOpenAI

    @property
    def url(self) -> str:
        return self.web.http_url

    def logs(self) -> str:
        web, worker = self.web.log()[-3000:], self.worker.log()[-3000:]
        return f"--- daphne ---\n{web}\n--- worker ---\n{worker}"


def log_in(context: BrowserContext, stack: Stack, user: User) -> None:
    """A session made server-side and handed to the browser (the login form has its own test)."""
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    context.add_cookies(
        [{"name": cookie.key, "value": cookie.value, "url": stack.url, "httpOnly": True}]
    )


def page_watched(context: BrowserContext) -> Page:
    """A new page that keeps its script errors in `page.errors`: a broken module would
    otherwise just hang or show an empty page."""
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors  # type: ignore[attr-defined]
    return page


def assistant_texts(page: Page) -> list[str]:
    return page.locator("article.message.assistant .content").all_inner_texts()


def record_assistant_states(page: Page) -> None:
    """Remember every distinct text the last assistant message shows (window.__states)."""
    page.evaluate(
        """() => {
          window.__states = [];
          const box = document.getElementById("messages");
          new MutationObserver(() => {
            const all = box.querySelectorAll("article.message.assistant .content");
            const text = all.length ? all[all.length - 1].textContent : "";
            if (text && window.__states[window.__states.length - 1] !== text) {
              window.__states.push(text);
            }
          }).observe(box, { childList: true, subtree: true, characterData: true });
        }"""
    )


def wait_idle(page: Page) -> None:
    """Until no reply is running and every streamed text has been fully revealed."""
    page.wait_for_function(
        """() => document.getElementById("stop").hidden
              && !document.querySelector("article.message.streaming")
              && !document.getElementById("composer-input").disabled"""
    )


def pages(context: BrowserContext) -> Iterator[Page]:
    yield from context.pages


def send(page: Page, text: str) -> None:
    """Type a message into the box and press Enter, as a person sends it."""
    box = page.get_by_label("Message", exact=True)
    box.fill(text)
    box.press("Enter")
