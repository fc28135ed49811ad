"""One identity per name: with `alice` registered, no door makes an account whose name
only looks like it (another case, fullwidth or Cyrillic letters, a dotted capital I, a
ligature), the database refuses one too, and `alice` logs in by any case of her name but
never by a look-alike."""

import base64
import os
from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import Client

from accounts import usernames
from accounts.models import User
from accounts.usernames import SIMILAR_USERNAME_MESSAGE, username_fold, username_key
from accounts.users import user_create
from tests.support.admin import client_for

pytestmark = pytest.mark.django_db

PASSWORD = "pw-alice-123"
NEW_PASSWORD = "a-long-passphrase-42"
CYRILLIC_A = "\u0430"
LOOKALIKES = [
    "Alice",
    "ALICE",
    f"{CYRILLIC_A}lice",
    "\uff41\uff4c\uff49\uff43\uff45",  # fullwidth
    "AL\u0130CE",  # a capital I with a dot above
    "\uff21L\u0406CE",  # fullwidth A, Cyrillic I, upper case: all at once
]
# Names NFKC turns into `fiona` (a ligature) or the skeleton into `olga` (a zero).
OTHER_LOOKALIKES = [("fiona", "\ufb01ona"), ("olga", "0LGA"), ("bill", "bi11")]


@pytest.fixture(autouse=True)
def fresh_counters():
    cache.clear()
    yield
    cache.clear()


def legacy_lookalike(username: str) -> User:
    """An account made before look-alikes were refused: it has no key."""
    user = User.objects.create_user(username=f"legacy-{username.encode().hex()}", password="pw")
    User.objects.filter(pk=user.pk).update(username=username, username_key=None)
    return User.objects.get(pk=user.pk)


def test_look_alikes_fold_to_one_key_and_other_names_do_not():
    for name in LOOKALIKES:
        assert username_fold(username=name) == "alice", name
    for registered, name in OTHER_LOOKALIKES:
        assert username_key(username=name) == username_key(username=registered)
    for other in ["alicia", "alice2", "al1ce", "bob", "ali"]:
        assert username_key(username=other) != username_key(username="alice"), other


# --- Every door that makes or renames an account -------------------------------------


@pytest.mark.parametrize("name", LOOKALIKES)
def test_sign_up_refuses_a_look_alike_and_says_only_that_one_exists(client: Client, owner, name):
    response = client.post(
        "/accounts/signup/",
        {"username": name, "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert (
        "A user with a similar username already exists." in body
        or "A user with that username already exists." in body
    )
    assert "alice" not in body.replace(name, "")  # the existing name is not shown
    assert User.objects.count() == 1
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize(("registered", "name"), OTHER_LOOKALIKES)
def test_sign_up_refuses_ligatures_and_digit_look_alikes(client: Client, registered, name):
    User.objects.create_user(username=registered, password="pw")
    response = client.post(
        "/accounts/signup/",
        {"username": name, "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert response.status_code == 200
    assert User.objects.count() == 1


def test_sign_up_of_an_unrelated_name_still_works(client: Client, owner):
    response = client.post(
        "/accounts/signup/",
        {"username": "alicia", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert response["Location"] == "/"
    assert User.objects.filter(username="alicia").exists()


def test_a_sign_up_racing_another_for_a_look_alike_gets_the_message(
    client: Client, owner, monkeypatch
):
    # The other request passed the form's check first; the database has the last word.
    monkeypatch.setattr(User, "validate_unique", lambda self, exclude=None: None)
    response = client.post(
        "/accounts/signup/",
        {"username": f"{CYRILLIC_A}lice", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert response.status_code == 200
    assert SIMILAR_USERNAME_MESSAGE in response.content.decode()
    assert User.objects.count() == 1


@pytest.fixture
def admin_client(db) -> Client:
    root = User.objects.create_superuser(username="root", password="pw-root-123")
    return client_for(root)


@pytest.mark.parametrize("name", LOOKALIKES)
def test_the_admin_add_form_refuses_a_look_alike(admin_client: Client, owner, name):
    response = admin_client.post(
        "/admin/accounts/user/add/",
        {
            "username": name,
            "usable_password": "true",
            "password1": NEW_PASSWORD,
            "password2": NEW_PASSWORD,
        },
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["username"]
    assert User.objects.count() == 2  # alice and root


def change_data(user: User, **changes: str) -> dict[str, str]:
    data = {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on",
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
    }
    data.update(changes)
    return data


@pytest.mark.parametrize("name", LOOKALIKES)
def test_the_admin_refuses_renaming_an_account_to_a_look_alike(admin_client, owner, name):
    bob = User.objects.create_user(username="bob", password="pw")
    response = admin_client.post(
        f"/admin/accounts/user/{bob.pk}/change/", change_data(bob, username=name)
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["username"] in (
        [SIMILAR_USERNAME_MESSAGE],
        ["A user with that username already exists."],  # the same name after NFKC
    )
    bob.refresh_from_db()
    assert bob.username == "bob"


def test_an_account_may_be_renamed_to_another_case_of_its_own_name(admin_client, owner):
    response = admin_client.post(
        f"/admin/accounts/user/{owner.pk}/change/", change_data(owner, username="Alice")
    )
    assert response.status_code == 302
    owner.refresh_from_db()
    assert owner.username == "Alice"
    assert owner.username_key == username_key(username="alice")


def test_an_older_look_alike_can_still_be_edited_without_renaming(admin_client, owner):
    legacy = legacy_lookalike("Alice")
    response = admin_client.post(
        f"/admin/accounts/user/{legacy.pk}/change/",
        change_data(legacy, email="alice@example.com"),
    )
    assert response.status_code == 302
    legacy.refresh_from_db()
    assert legacy.email == "alice@example.com"
    legacy.set_password(NEW_PASSWORD)  # a password change saves every field
    legacy.save()
    assert User.objects.get(pk=legacy.pk).username_key is None


@pytest.mark.parametrize("name", LOOKALIKES)
def test_the_service_and_create_user_refuse_a_look_alike(owner, name):
    with pytest.raises(ValidationError) as caught:
        user_create(username=name, password=NEW_PASSWORD)
    assert caught.value.messages in (
        [SIMILAR_USERNAME_MESSAGE],
        ["A user with that username already exists."],
    )
    with pytest.raises(ValidationError):
        User.objects.create_user(username=name, password=NEW_PASSWORD)
    assert User.objects.count() == 1


def test_the_database_refuses_a_look_alike_that_skipped_every_check(owner):
    with pytest.raises(IntegrityError), transaction.atomic():
        User(username=f"{CYRILLIC_A}lice").save()


def test_a_race_lost_at_the_database_becomes_the_message(owner, monkeypatch):
    monkeypatch.setattr("accounts.models.username_validate_available", lambda **kwargs: None)
    with pytest.raises(ValidationError) as caught:
        user_create(username="ALICE", password=NEW_PASSWORD)
    assert caught.value.messages == [SIMILAR_USERNAME_MESSAGE]


@pytest.mark.parametrize("name", [f"{CYRILLIC_A}lice", "AL\u0130CE", "ALICE"])
def test_createsuperuser_refuses_a_look_alike(owner, name, monkeypatch):
    monkeypatch.setitem(os.environ, "DJANGO_SUPERUSER_PASSWORD", NEW_PASSWORD)
    with pytest.raises(CommandError):
        call_command("createsuperuser", "--noinput", username=name, email="", stdout=StringIO())
    assert User.objects.count() == 1


def test_the_demo_user_is_never_a_look_alike_of_another_account(owner, settings):
    settings.PARLEY_DEMO_USERNAME = "ALICE"
    with pytest.raises(CommandError, match="similar username"):
        call_command("ensure_demo_user", stdout=StringIO())
    owner.refresh_from_db()
    assert not owner.is_superuser
    assert owner.check_password(PASSWORD)
    settings.PARLEY_DEMO_USERNAME = "demo"
    out = StringIO()
    call_command("ensure_demo_user", stdout=out)
    call_command("ensure_demo_user", stdout=out)
    assert out.getvalue().splitlines() == ["Created demo user 'demo'.", "Reset demo user 'demo'."]


# --- Log-in: any case of one's own name, never a look-alike ----------------------------


def web_log_in(username: str, password: str) -> Client:
    client = Client(REMOTE_ADDR="10.0.0.1")
    client.post("/accounts/login/", {"username": username, "password": password})
    return client


def basic(username: str, password: str) -> int:
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return (
        Client(REMOTE_ADDR="10.0.0.1")
        .get("/api/v1/api-keys/", HTTP_AUTHORIZATION=f"Basic {token}")
        .status_code
    )


@pytest.mark.parametrize("name", ["ALICE", "Alice", "\uff41\uff4c\uff49\uff43\uff45"])
def test_log_in_by_any_case_of_ones_own_name(owner, name):
    client = web_log_in(name, PASSWORD)
    assert client.session["_auth_user_id"] == str(owner.pk)
    assert basic(name, PASSWORD) == 200
    assert authenticate(username=name, password=PASSWORD) == owner


@pytest.mark.parametrize("name", [f"{CYRILLIC_A}lice", "AL\u0130CE", "al1ce"])
def test_a_look_alike_never_logs_in_to_the_account(owner, name):
    assert "_auth_user_id" not in web_log_in(name, PASSWORD).session
    assert basic(name, PASSWORD) in (401, 403)
    assert authenticate(username=name, password=PASSWORD) is None


def test_a_name_two_older_accounts_share_by_case_logs_in_only_exactly(owner):
    legacy = legacy_lookalike("Alice")
    legacy.set_password(NEW_PASSWORD)
    legacy.save()
    assert authenticate(username="Alice", password=NEW_PASSWORD) == legacy
    assert authenticate(username="alice", password=PASSWORD) == owner
    # Which one `ALICE` means cannot be told: neither logs in by it.
    assert authenticate(username="ALICE", password=PASSWORD) is None
    assert authenticate(username="ALICE", password=NEW_PASSWORD) is None


def test_every_case_of_a_name_counts_against_one_lock(owner, settings):
    settings.PARLEY_LOGIN_MAX_FAILURES = 3
    for name in ["Alice", "ALICE", "aLiCe"]:
        assert "_auth_user_id" not in web_log_in(name, "wrong").session
    response = Client(REMOTE_ADDR="10.0.0.9").post(
        "/accounts/login/", {"username": "alice", "password": PASSWORD}
    )
    assert response.status_code == 429


def test_the_lock_follows_case_not_look_alikes(owner, settings):
    # A look-alike is another name: its guesses cannot lock the account out.
    settings.PARLEY_LOGIN_MAX_FAILURES = 3
    for _ in range(3):
        web_log_in(f"{CYRILLIC_A}lice", "wrong")
    client = Client(REMOTE_ADDR="10.0.0.9")
    client.post("/accounts/login/", {"username": "ALICE", "password": PASSWORD})
    assert client.session["_auth_user_id"] == str(owner.pk)


# --- The report of older look-alikes ----------------------------------------------------


def test_the_report_says_nothing_alarming_without_look_alikes(owner):
    User.objects.create_user(username="bob", password="pw")
    out, err = StringIO(), StringIO()
    call_command("usernames_lookalikes", stdout=out, stderr=err)
    assert out.getvalue() == "No look-alike usernames among 2 account(s).\n"


def test_the_report_lists_each_group_of_look_alikes_once(owner, monkeypatch):
    monkeypatch.setattr(usernames, "_PAGE", 2)  # several pages, and one left over
    for name in ["bob", "carol", "dave"]:
        User.objects.create_user(username=name, password="pw")
    cyrillic = legacy_lookalike(f"{CYRILLIC_A}lice")
    upper = legacy_lookalike("ALICE")
    b0b = legacy_lookalike("B0B")
    out, err = StringIO(), StringIO()
    call_command("usernames_lookalikes", stdout=out, stderr=err)
    bob = User.objects.get(username="bob")
    assert out.getvalue().splitlines() == [
        "2 group(s) of look-alike usernames, 5 account(s) in all:",
        f"  alice (id {owner.pk}, holds the name); \\u0430lice (id {cyrillic.pk}); "
        f"ALICE (id {upper.pk})",
        f"  bob (id {bob.pk}, holds the name); B0B (id {b0b.pk})",
    ]
    assert "7/7" in err.getvalue()  # the progress bar went through every account
