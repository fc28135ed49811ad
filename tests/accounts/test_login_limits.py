"""Wrong passwords are capped per account and per client address, on the web log-in, the
admin's log-in and the API's password path; a locked account says so, and for how long."""

import base64

import pytest
from django.core.cache import cache
from django.test import Client

from accounts.models import User

pytestmark = pytest.mark.django_db

WEB = "/accounts/login/"
ADMIN = "/admin/login/"
PASSWORD = "pw-alice-123"


@pytest.fixture(autouse=True)
def fresh_counters(settings):
    settings.PARLEY_LOGIN_MAX_FAILURES = 3
    settings.PARLEY_LOGIN_MAX_FAILURES_PER_ADDRESS = 5
    settings.PARLEY_LOGIN_LOCK_SECONDS = 600
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def staff_owner(owner) -> User:
    owner.is_staff = True
    owner.save()
    return owner


def log_in(url: str, username: str, password: str, address: str = "10.0.0.1"):
    client = Client(REMOTE_ADDR=address)
    response = client.post(url, {"username": username, "password": password})
    logged_in = "_auth_user_id" in client.session
    return response, logged_in


@pytest.mark.parametrize("url", [WEB, ADMIN])
def test_after_the_cap_even_the_right_password_is_refused_and_the_page_says_why(staff_owner, url):
    for _ in range(3):
        _, ok = log_in(url, "alice", "wrong")
        assert not ok
    response, ok = log_in(url, "alice", PASSWORD)
    assert not ok
    body = response.content.decode()
    assert "Too many failed log-in attempts" in body
    assert "Try again in 10 minutes" in body


@pytest.mark.parametrize("url", [WEB, ADMIN])
def test_below_the_cap_the_right_password_works_and_resets_the_account(staff_owner, url):
    for _ in range(2):
        log_in(url, "alice", "wrong")
    assert log_in(url, "alice", PASSWORD)[1]
    for _ in range(2):
        log_in(url, "alice", "wrong")
    assert log_in(url, "alice", PASSWORD)[1]


def test_the_account_cap_holds_across_addresses(owner):
    for index in range(3):
        log_in(WEB, "alice", "wrong", address=f"10.0.1.{index}")
    assert not log_in(WEB, "alice", PASSWORD, address="10.0.2.1")[1]
    # Usernames are matched whatever their case.
    assert not log_in(WEB, "ALICE", PASSWORD, address="10.0.2.2")[1]


def test_the_address_cap_holds_across_usernames(owner, outsider):
    for index in range(5):
        log_in(WEB, f"nobody{index}", "wrong", address="10.0.3.1")
    response, ok = log_in(WEB, "mallory", "pw-mallory-123", address="10.0.3.1")
    assert not ok
    assert "Too many failed log-in attempts" in response.content.decode()
    assert log_in(WEB, "mallory", "pw-mallory-123", address="10.0.3.2")[1]


def test_the_lock_ends_with_its_window(owner, monkeypatch):
    for _ in range(3):
        log_in(WEB, "alice", "wrong")
    assert not log_in(WEB, "alice", PASSWORD)[1]
    import accounts.login_guard as guard

    later = guard.time.time() + 601
    monkeypatch.setattr(guard.time, "time", lambda: later)
    assert log_in(WEB, "alice", PASSWORD)[1]


def test_the_api_password_path_shares_the_cap(owner):
    def create_key(password: str, address: str = "10.0.0.1"):
        token = base64.b64encode(f"alice:{password}".encode()).decode()
        return Client(REMOTE_ADDR=address).post(
            "/api/v1/api-keys/",
            {"name": "ci"},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Basic {token}",
        )

    for _ in range(2):
        assert create_key("wrong").status_code in (401, 403)
    log_in(WEB, "alice", "wrong")  # the third, on another door
    refused = create_key(PASSWORD)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "throttled"
    assert 590 <= int(refused["Retry-After"]) <= 600
    assert not log_in(WEB, "alice", PASSWORD, address="10.9.9.9")[1]
