"""When two usernames name one identity, and which name logs in to which account.

Two names are the same identity when they fold to the same key: NFKC with case folding,
then the confusable skeleton of Unicode's security mechanisms (UTS #39, with ICU's copy of
Unicode's confusables data), then case folding again, since the skeleton tells `0` from
`o` only by case. So `Alice`, `ALICE`, `alice` in fullwidth letters and `alice` with a
Cyrillic `a` all fold to `alice`. Every way of making or renaming an account refuses a
name whose key another account holds (User.validate_unique for every form, the User
manager for create_user and createsuperuser), and the database keeps the key unique
(User.username_key).

Log-in is looser in case only: a name logs in to the account it equals after NFKC case
folding (the exact name first), never to a look-alike in another script.

The key depends on the pinned ICU data: a newer Unicode release may fold more names
together. After upgrading it, `manage.py usernames_lookalikes` tells which accounts meet.
"""

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import icu  # type: ignore[import-untyped]
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

if TYPE_CHECKING:
    from accounts.models import User

SIMILAR_USERNAME_MESSAGE = "A user with a similar username already exists."
SIMILAR_USERNAME_CODE = "username_similar"

# Immutable once built, so one of each serves every thread.
_NFKC_CASEFOLD = icu.Normalizer2.getNFKCCasefoldInstance()
_SPOOF_CHECKER = icu.SpoofChecker()
_SOFT_DOTTED = icu.UnicodeSet("[:Soft_Dotted:]")
_DOT_ABOVE = "\u0307"
_CCC_ABOVE = 230
# Accounts read per query when every name is folded anew.
_PAGE = 2000


def username_case_fold(*, username: str) -> str:
    """The name as log-in compares it: NFKC, case folded, default-ignorable characters
    dropped. `ALICE` and fullwidth `alice` give `alice`; a Cyrillic `a` stays Cyrillic."""
    return str(_NFKC_CASEFOLD.normalize(username))


def username_fold(*, username: str) -> str:
    """The name as identity compares it (see the module's docstring). Not for display."""
    skeleton = _SPOOF_CHECKER.getSkeleton(0, username_case_fold(username=username))
    return _drop_absorbed_dots(username_case_fold(username=str(skeleton)))


def username_key(*, username: str) -> str:
    """What the database keeps unique: a digest of the fold, since NFKC alone may make a
    name many times longer than the column that holds it."""
    return hashlib.sha256(
        username_fold(username=username).encode("utf-8", "surrogatepass")
    ).hexdigest()


def _drop_absorbed_dots(text: str) -> str:
    # A dot above on a soft-dotted letter replaces the letter's own dot, so `i` + U+0307
    # (what `İ` case-folds to) looks like `i`. The Unicode casing rules' After_Soft_Dotted:
    # marks between them that are neither base characters nor above keep the dot absorbed.
    out: list[str] = []
    absorbing = False
    for char in text:
        combining = icu.Char.getCombiningClass(char)
        if char == _DOT_ABOVE and absorbing:
            absorbing = False  # a second dot above would show
            continue
        if combining == 0:
            absorbing = _SOFT_DOTTED.contains(char)
        elif combining == _CCC_ABOVE:
            absorbing = False
        out.append(char)
    return "".join(out)


def username_validate_available(*, username: str, user_id: int | None = None) -> None:
    """Refuse a name whose key another account holds (`user_id`, when renaming, is the
    account's own). The message says no more than that such an account exists."""
    users = get_user_model()._default_manager.filter(username_key=username_key(username=username))
    if user_id is not None:
        users = users.exclude(pk=user_id)
    if users.exists():
        raise ValidationError(SIMILAR_USERNAME_MESSAGE, code=SIMILAR_USERNAME_CODE)


def username_login_match(*, username: str, candidates: "list[User]") -> "User | None":
    """Of the accounts sharing `username`'s key, the one whose name equals it after case
    folding, when exactly one does; None otherwise (no account, or several from before
    names were folded)."""
    folded = username_case_fold(username=username)
    matches = [user for user in candidates if username_case_fold(username=user.username) == folded]
    return matches[0] if len(matches) == 1 else None


@dataclass(frozen=True)
class LookalikeAccount:
    id: int
    username: str
    # Holds the key, so a name folding to it is refused; the others came before keys did.
    holds_key: bool


def username_lookalike_groups(
    *, progress: Callable[[int], object] | None = None
) -> list[list[LookalikeAccount]]:
    """The accounts whose names fold to one key, in groups of two or more, oldest first.
    Folds every name anew (not the stored keys), so it also finds the accounts that newer
    confusables data folds together. `progress` hears of each batch of accounts read."""
    users = get_user_model()._default_manager.order_by("pk")
    # The first account per key, by a 64-bit prefix of it: every full key at once would
    # not fit in memory on a large site. Accounts sharing a prefix are compared in full.
    first: dict[int, int] = {}
    sharing: dict[int, list[int]] = {}
    read = 0
    for pk, username in users.values_list("pk", "username").iterator(chunk_size=_PAGE):
        prefix = int(username_key(username=username)[:16], 16)
        earlier = first.setdefault(prefix, pk)
        if earlier != pk:
            sharing.setdefault(prefix, [earlier]).append(pk)
        read += 1
        if progress is not None and read % _PAGE == 0:
            progress(_PAGE)
    if progress is not None and read % _PAGE:
        progress(read % _PAGE)
    ids = [pk for pks in sharing.values() for pk in pks]
    rows = {
        row[0]: row
        for start in range(0, len(ids), _PAGE)
        for row in users.filter(pk__in=ids[start : start + _PAGE]).values_list(
            "pk", "username", "username_key"
        )
    }
    found: list[list[LookalikeAccount]] = []
    for pks in sharing.values():
        by_key: dict[str, list[LookalikeAccount]] = {}
        for pk, username, stored in (rows[pk] for pk in pks if pk in rows):
            key = username_key(username=username)
            by_key.setdefault(key, []).append(LookalikeAccount(pk, username, stored == key))
        found.extend(group for group in by_key.values() if len(group) > 1)
    return sorted(found, key=lambda group: group[0].id)
