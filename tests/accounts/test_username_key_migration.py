"""The migration that gives every account its name's key: the oldest of look-alike
accounts holds it, the later ones are left without one (and reported), and the migration
never fails on names that were allowed before."""

import importlib

import pytest

from accounts.models import User
from accounts.usernames import username_key
from tests.support.migrations import migrate

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("accounts", "0003_api_key_scopes")]


def test_existing_accounts_get_keys_and_later_look_alikes_are_reported(capsys, monkeypatch):
    fill = importlib.import_module("accounts.migrations.0004_username_key")
    monkeypatch.setattr(fill, "BATCH", 2)  # several batches
    executor = migrate(BEFORE)
    OldUser = executor.loader.project_state(BEFORE).apps.get_model("accounts", "User")
    names = ["alice", "bob", "Alice", "\u0430lice", "carol", "BOB", "dave"]
    ids = {name: OldUser.objects.create(username=name).pk for name in names}

    migrate(executor.loader.graph.leaf_nodes())

    keys = dict(User.objects.values_list("username", "username_key"))
    for name in ["alice", "bob", "carol", "dave"]:
        assert keys[name] == username_key(username=name)
    for name in ["Alice", "\u0430lice", "BOB"]:
        assert keys[name] is None
    assert "3 account(s) have a name like an older account's" in capsys.readouterr().out
    # The accounts keep working: the key-less ones log in by their exact name.
    assert User.objects.get_by_natural_key("\u0430lice").pk == ids["\u0430lice"]
    assert User.objects.get_by_natural_key("CAROL").pk == ids["carol"]
