"""Secrets kept at rest (a tool server's shared secret, each user's token for it),
encrypted with Fernet (the `cryptography` package): AES in CBC mode with an HMAC, so a
stored value can be neither read nor altered without a key.

Keys come from PARLEY_SECRET_KEYS, newest first: the newest encrypts, every one decrypts,
so a key is rotated by putting a new one in front, running `manage.py secrets_rotate`
(which encrypts every stored secret again with it), then dropping the old one. Without
keys, local and test settings derive one from SECRET_KEY (PARLEY_SECRET_KEYS_DERIVED);
production settings refuse to start.
"""

import base64
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Names the derivation, so a key derived here is never the one stateless states use.
_SALT = b"parley-secrets-at-rest"


class SecretUnreadable(Exception):
    """A stored secret no configured key opens (its key was dropped too soon)."""


def _derived(secret: str) -> bytes:
    kdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=b"fernet")
    return base64.urlsafe_b64encode(kdf.derive(secret.encode()))


@cache
def _cipher(keys: tuple[str, ...]) -> MultiFernet:
    try:
        return MultiFernet([Fernet(key.encode()) for key in keys])
    except ValueError as exc:
        raise ImproperlyConfigured(
            "PARLEY_SECRET_KEYS must be Fernet keys (URL-safe base64 of 32 bytes), "
            "comma-separated, newest first"
        ) from exc


def secret_keys() -> tuple[str, ...]:
    keys = tuple(key.strip() for key in settings.PARLEY_SECRET_KEYS if key.strip())
    if keys:
        return keys
    if settings.PARLEY_SECRET_KEYS_DERIVED:
        return (_derived(settings.SECRET_KEY).decode(),)
    raise ImproperlyConfigured("PARLEY_SECRET_KEYS must be set to encrypt secrets at rest")


def secret_encrypt(plain: str) -> str:
    return _cipher(secret_keys()).encrypt(plain.encode()).decode()


def secret_decrypt(stored: str) -> str:
    try:
        return _cipher(secret_keys()).decrypt(stored.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable("no configured key opens this secret") from None


def secret_rotate(stored: str) -> str:
    """The same secret encrypted with the newest key."""
    try:
        return _cipher(secret_keys()).rotate(stored.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable("no configured key opens this secret") from None
