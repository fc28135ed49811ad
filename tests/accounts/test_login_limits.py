"""Wrong passwords are capped per account and per client address, on the web log-in, the
admin's log-in, the password change form and the API's password path; a locked account
says so, and for how long, with a 429."""

import base64
import time

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import aauthenticate, authenticate
from django.core.cache import cache
from django.db import connections
from django.test import Client, RequestFactory

from accounts import login_guard
from accounts.models import User

pytestmark = pytest.mark.django_db

WEB = "/accounts/login/"
ADMIN = "/admin/login/"
PASSWORD = "pw-alice-123"
LOCKED = "Too many failed log-in attempts"


@pytest.fixture(autouse=True)
def fresh_counters(settings):
    settings.PARLEY_LOGIN_MAX_FAILURES = 3
    settings.PARLEY_LOGIN_MAX_FAILURES_PER_ADDRESS = 5
    settings.PARLEY_LOGIN_LOCK_SECONDS = 600
    settings.PARLEY_TRUSTED_PROXY_COUNT = 0
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def staff_owner(owner) -> User:
    owner.is_staff = True
    owner.save()
    return owner


def log_in(url: str, username: str, password: str, address: str = "10.0.0.1", **headers):
    client = Client(REMOTE_ADDR=address, **headers)
    response = client.post(url, {"username": username, "password": password})
    logged_in = "_auth_user_id" in client.session
    return response, logged_in


REAL_TIME = time.time


def later(monkeypatch, seconds: float) -> None:
    """Move the clock (the guard's and the cache's) this far from now."""
    moved = REAL_TIME() + seconds
    monkeypatch.setattr(time, "time", lambda: moved)


@pytest.mark.parametrize("url", [WEB, ADMIN])
def test_after_the_cap_even_the_right_password_is_refused_and_the_page_says_why(staff_owner, url):
    for _ in range(3):
        response, ok = log_in(url, "alice", "wrong")
        assert not ok
        assert response.status_code == 200
        assert LOCKED not in response.content.decode()
    response, ok = log_in(url, "alice", PASSWORD)
    assert not ok
    assert response.status_code == 429
    assert 590 <= int(response["Retry-After"]) <= 600
    body = response.content.decode()
    assert LOCKED in body
    assert "Try again in 10 minutes" in body
    # And it stays refused, with the same answer, while the lock lasts.
    response, ok = log_in(url, "alice", PASSWORD, address="10.0.0.2")
    assert not ok
    assert response.status_code == 429
    assert LOCKED in response.content.decode()


@pytest.mark.parametrize("url", [WEB, ADMIN])
def test_below_the_cap_the_right_password_works_and_resets_the_account(staff_owner, url):
    for _ in range(2):
        log_in(url, "alice", "wrong")
    assert log_in(url, "alice", PASSWORD)[1]
    for _ in range(3):
        log_in(url, "alice", "wrong")
    assert log_in(url, "alice", "wrong")[0].status_code == 429


def test_the_account_cap_holds_across_addresses(owner):
    for index in range(3):
        log_in(WEB, "alice", "wrong", address=f"10.0.1.{index}")
    assert not log_in(WEB, "alice", PASSWORD, address="10.0.2.1")[1]
    # Usernames are matched as Django matches them and whatever their case or spaces.
    for variant in ("ALICE", " alice ", "\uff41\uff4c\uff49\uff43\uff45"):
        response, ok = log_in(WEB, variant, PASSWORD, address="10.0.2.2")
        assert not ok
        assert response.status_code == 429


def test_the_address_cap_holds_across_usernames_and_for_the_admin(staff_owner, outsider):
    for index in range(5):
        log_in(WEB if index % 2 else ADMIN, f"nobody{index}", "wrong", address="10.0.3.1")
    response, ok = log_in(WEB, "mallory", "pw-mallory-123", address="10.0.3.1")
    assert not ok
    assert response.status_code == 429
    assert LOCKED in response.content.decode()
    response, ok = log_in(ADMIN, "alice", PASSWORD, address="10.0.3.1")
    assert not ok
    assert LOCKED in response.content.decode()
    # Another address is not concerned.
    assert log_in(WEB, "mallory", "pw-mallory-123", address="10.0.3.2")[1]


def test_successful_log_ins_do_not_buy_an_address_more_guesses(owner, outsider, settings):
    """A guesser who logs into an account of their own between guesses, or signs up new
    accounts, gets no guess back: only a success gives back its own place."""
    settings.PARLEY_SIGNUP_ENABLED = True
    for index in range(4):
        log_in(WEB, f"nobody{index}", "wrong", address="10.0.4.1")
        assert log_in(WEB, "mallory", "pw-mallory-123", address="10.0.4.1")[1]
    signup = Client(REMOTE_ADDR="10.0.4.1").post(
        "/accounts/signup/",
        {"username": "newcomer", "password1": "a-long-pass-9", "password2": "a-long-pass-9"},
    )
    assert signup.status_code == 302
    log_in(WEB, "nobody5", "wrong", address="10.0.4.1")  # the fifth failure
    assert log_in(WEB, "alice", PASSWORD, address="10.0.4.1")[0].status_code == 429


def test_the_lock_lasts_its_duration_from_the_attempt_that_started_it(owner, monkeypatch):
    for _ in range(3):
        log_in(WEB, "alice", "wrong")
    later(monkeypatch, 500)  # the failures' window is nearly over
    assert log_in(WEB, "alice", PASSWORD)[0].status_code == 429  # the lock starts now
    later(monkeypatch, 500 + 590)
    response, ok = log_in(WEB, "alice", PASSWORD)
    assert not ok
    assert "Try again in 1 minute." in response.content.decode()
    later(monkeypatch, 500 + 601)
    assert log_in(WEB, "alice", PASSWORD)[1]


def test_failures_older_than_the_window_are_forgotten(owner, monkeypatch):
    for _ in range(3):
        log_in(WEB, "alice", "wrong")
    later(monkeypatch, 601)
    assert log_in(WEB, "alice", PASSWORD)[1]


def test_parallel_guesses_each_take_a_place_before_their_password_is_checked(owner, rf):
    """A burst sent at once cannot all pass the check before the first failure counts:
    every check in flight already holds its place."""
    started = [
        login_guard.login_attempt_begin(username="alice", address="10.0.5.1") for _ in range(4)
    ]
    assert started[:3] == [0, 0, 0]
    assert 590 <= started[3] <= 600
    request = rf.post(WEB, REMOTE_ADDR="10.0.5.9")
    assert authenticate(request, username="alice", password=PASSWORD) is None


def test_the_password_change_form_counts_against_the_account(owner):
    client = Client(REMOTE_ADDR="10.0.6.1")
    client.force_login(owner)

    def change(old: str):
        return client.post(
            "/accounts/password/",
            {
                "old_password": old,
                "new_password1": "n3w-pass-word",
                "new_password2": "n3w-pass-word",
            },
        )

    for _ in range(3):
        assert change("wrong").status_code == 200
    refused = change(PASSWORD)
    assert refused.status_code == 429
    assert LOCKED in refused.content.decode()
    owner.refresh_from_db()
    assert owner.check_password(PASSWORD)
    # The guesses counted for the account's log-in too.
    assert log_in(WEB, "alice", PASSWORD, address="10.0.6.2")[0].status_code == 429


def basic_create_key(username: str, password: str, address: str = "10.0.0.1", **headers):
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return Client(REMOTE_ADDR=address, **headers).post(
        "/api/v1/api-keys/",
        {"name": "ci"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Basic {token}",
    )


def test_the_api_password_path_shares_the_cap(owner):
    for _ in range(2):
        assert basic_create_key("alice", "wrong").status_code in (401, 403)
    log_in(WEB, "alice", "wrong")  # the third, on another door
    refused = basic_create_key("alice", PASSWORD)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "throttled"
    assert LOCKED in refused.json()["error"]["message"]
    assert 590 <= int(refused["Retry-After"]) <= 600
    assert not log_in(WEB, "alice", PASSWORD, address="10.9.9.9")[1]


def test_right_passwords_on_the_api_path_do_not_count(owner):
    for _ in range(8):
        assert basic_create_key("alice", PASSWORD).status_code == 201
    assert log_in(WEB, "alice", PASSWORD)[1]


def test_behind_a_proxy_the_address_is_the_one_the_proxy_saw(owner, outsider, settings):
    """The left of X-Forwarded-For is written by the client: changing it for each guess
    gains nothing. Without trusted proxies the header is ignored altogether."""
    settings.PARLEY_TRUSTED_PROXY_COUNT = 1
    for index in range(5):
        log_in(
            WEB,
            f"nobody{index}",
            "wrong",
            address="127.0.0.1",
            HTTP_X_FORWARDED_FOR=f"192.0.2.{index}, 203.0.113.7",
        )
    through_proxy = {"address": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.7"}
    assert log_in(WEB, "mallory", "pw-mallory-123", **through_proxy)[0].status_code == 429
    other_client = {"address": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.8"}
    assert log_in(WEB, "mallory", "pw-mallory-123", **other_client)[1]

    settings.PARLEY_TRUSTED_PROXY_COUNT = 0
    for index in range(5):
        log_in(
            WEB, f"x{index}", "wrong", address="10.0.7.1", HTTP_X_FORWARDED_FOR=f"10.8.0.{index}"
        )
    assert log_in(WEB, "mallory", "pw-mallory-123", address="10.0.7.1")[0].status_code == 429


@pytest.mark.parametrize(
    ("meta", "proxies", "expected"),
    [
        ({"REMOTE_ADDR": "10.1.2.3"}, 0, "10.1.2.3"),
        ({"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "1.1.1.1"}, 0, "10.1.2.3"),
        ({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "6.6.6.6, 1.1.1.1"}, 1, "1.1.1.1"),
        (
            {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "6.6.6.6,1.1.1.1, 10.0.0.2"},
            2,
            "1.1.1.1",
        ),
        ({"REMOTE_ADDR": "2001:db8:1:2:3:4:5:6"}, 0, "2001:db8:1:2::/64"),
        ({"REMOTE_ADDR": "::ffff:10.1.2.3"}, 0, "10.1.2.3"),
    ],
)
def test_client_address(settings, meta, proxies, expected):
    settings.PARLEY_TRUSTED_PROXY_COUNT = proxies
    assert login_guard.client_address(RequestFactory().get("/", **meta)) == expected
    assert login_guard.client_address(None) == ""


def test_one_ipv6_block_counts_as_one_address(owner, outsider):
    for index in range(5):
        log_in(WEB, f"nobody{index}", "wrong", address=f"2001:db8:0:1::{index + 1:x}")
    assert (
        log_in(WEB, "mallory", "pw-mallory-123", address="2001:db8:0:1::ff")[0].status_code == 429
    )
    assert log_in(WEB, "mallory", "pw-mallory-123", address="2001:db8:0:2::1")[1]


def test_the_test_clients_login_and_force_login_are_not_limited(owner):
    """Log-ins without a request (the shell, tests) are nobody guessing remotely."""
    client = Client()
    for _ in range(5):
        assert not client.login(username="alice", password="wrong")
    assert client.login(username="alice", password=PASSWORD)
    assert log_in(WEB, "alice", PASSWORD)[1]


def test_the_admins_password_change_counts_against_the_account(staff_owner):
    client = Client(REMOTE_ADDR="10.0.8.1")
    client.force_login(staff_owner)

    def change(old: str):
        return client.post(
            "/admin/password_change/",
            {
                "old_password": old,
                "new_password1": "n3w-pass-word",
                "new_password2": "n3w-pass-word",
            },
        )

    for _ in range(3):
        response = change("wrong")
        assert response.status_code == 200
        assert "incorrect" in response.content.decode()
    refused = change(PASSWORD)
    assert refused.status_code == 429
    assert LOCKED in refused.content.decode()
    staff_owner.refresh_from_db()
    assert staff_owner.check_password(PASSWORD)
    # Not a page for anyone but staff, as before.
    other = Client()
    other.force_login(User.objects.create_user(username="plain", password="pw-plain-123"))
    assert other.get("/admin/password_change/").status_code == 302


def test_below_the_cap_the_admins_password_change_works(staff_owner):
    client = Client(REMOTE_ADDR="10.0.8.2")
    client.force_login(staff_owner)
    page = client.get("/admin/password_change/")
    assert page.status_code == 200
    assert 'name="old_password"' in page.content.decode()
    response = client.post(
        "/admin/password_change/",
        {
            "old_password": PASSWORD,
            "new_password1": "n3w-pass-word",
            "new_password2": "n3w-pass-word",
        },
    )
    assert response.status_code == 302
    assert response["Location"] == "/admin/password_change/done/"
    staff_owner.refresh_from_db()
    assert staff_owner.check_password("n3w-pass-word")


def test_a_user_without_staff_rights_is_refused_by_the_admin_and_it_counts(owner):
    """The right password of an account that may not use the admin is a failed admin
    log-in: it is refused, and counts like one."""
    for _ in range(3):
        response, ok = log_in(ADMIN, "alice", PASSWORD)
        assert not ok
        assert response.status_code == 200
    assert log_in(WEB, "alice", PASSWORD)[0].status_code == 429


@pytest.mark.django_db(transaction=True)
async def test_asynchronous_authentication_is_capped_too(owner):
    request = RequestFactory().post(WEB, REMOTE_ADDR="10.0.9.1")
    for _ in range(3):
        assert await aauthenticate(request, username="alice", password="wrong") is None
    assert await aauthenticate(request, username="alice", password=PASSWORD) is None
    assert login_guard.login_lock_remaining(username="alice", address="10.0.9.1") > 0
    await sync_to_async(connections.close_all)()  # the helper thread's, before teardown
