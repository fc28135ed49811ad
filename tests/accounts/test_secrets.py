"""Secrets at rest: encrypted so the stored text reveals nothing, readable with any
configured key, rotated to the newest, and refused clearly when no key opens them."""

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from accounts.secrets import SecretUnreadable, secret_decrypt, secret_encrypt, secret_rotate

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def test_a_secret_is_stored_unreadable_and_read_back(settings):
    settings.PARLEY_SECRET_KEYS = [NEW]
    stored = secret_encrypt("tok-alice-123")

    assert "tok-alice-123" not in stored
    assert secret_encrypt("tok-alice-123") != stored  # a fresh nonce every time
    assert secret_decrypt(stored) == "tok-alice-123"


def test_a_new_key_in_front_reads_old_secrets_and_rotation_moves_them_to_it(settings):
    settings.PARLEY_SECRET_KEYS = [OLD]
    stored = secret_encrypt("shared-secret")
    settings.PARLEY_SECRET_KEYS = [NEW, OLD]

    assert secret_decrypt(stored) == "shared-secret"
    rotated = secret_rotate(stored)
    settings.PARLEY_SECRET_KEYS = [NEW]  # the old key dropped

    assert secret_decrypt(rotated) == "shared-secret"
    with pytest.raises(SecretUnreadable):
        secret_decrypt(stored)


def test_development_settings_derive_a_key_and_production_has_none(settings):
    settings.PARLEY_SECRET_KEYS = []
    settings.PARLEY_SECRET_KEYS_DERIVED = True
    assert secret_decrypt(secret_encrypt("x")) == "x"

    settings.PARLEY_SECRET_KEYS_DERIVED = False
    with pytest.raises(ImproperlyConfigured, match="PARLEY_SECRET_KEYS"):
        secret_encrypt("x")


def test_a_key_that_is_not_a_fernet_key_is_refused_clearly(settings):
    settings.PARLEY_SECRET_KEYS = ["not-a-key"]
    with pytest.raises(ImproperlyConfigured, match="Fernet keys"):
        secret_encrypt("x")
