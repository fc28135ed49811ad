"""Compaction items: a summary of earlier turns, as `POST /responses/compact` gives it and
clients send it back (in a response's `input`, a conversation's `items`).

`encrypted_content` is a Fernet token (AES with an HMAC: it can be neither read nor
altered without the key) of `{"v", "user", "summary", "covers"}`: the summary, the user
it was made for and the last stored message it covers (or null). Its key is derived from
PARLEY_SECRET_KEYS for this purpose alone, so a token opens nowhere else and a secret at
rest never opens here; it rotates with them (every configured key opens, the newest
seals). A token that does not open, or opens to something else, is refused by its
parameter; one made for another user is refused by the domain when it is placed
(services/compactions.py), named the same way.

A stored compaction reads back as `{type: "compaction", id: "cmp_<message uuid hex>",
encrypted_content}` with a fresh token of its summary.
"""

import base64
import json
from collections.abc import Mapping
from functools import cache
from typing import Any
from uuid import UUID

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from accounts.secrets import secret_keys
from conversations.models import Message
from conversations.openai_api.errors import fields_check, invalid, wrong_type
from conversations.openai_api.ids import ItemRef, item_id
from conversations.services import NewMessage

VERSION = 1
# Names the derivation: a key derived here is no other purpose's.
_SALT = b"parley-compaction-items"
_FIELDS = {"type", "encrypted_content", "id", "created_by"}


@cache
def _cipher(keys: tuple[str, ...]) -> MultiFernet:
    def derived(key: str) -> Fernet:
        kdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=b"fernet")
        return Fernet(base64.urlsafe_b64encode(kdf.derive(key.encode())))

    return MultiFernet([derived(key) for key in keys])


def compaction_token(*, user_id: Any, summary: str, covers: UUID | str | None) -> str:
    """The `encrypted_content` of a summary made for `user_id`."""
    body = {
        "v": VERSION,
        "user": user_id,
        "summary": summary,
        "covers": str(covers) if covers else None,
    }
    return _cipher(secret_keys()).encrypt(json.dumps(body).encode()).decode()


def _opened(token: str) -> dict[str, Any] | None:
    """What a token holds, or None when it does not open to a compaction of ours."""
    try:
        body = json.loads(_cipher(secret_keys()).decrypt(token.encode()))
    except (InvalidToken, ValueError):
        return None
    if (
        not isinstance(body, dict)
        or body.get("v") != VERSION
        or not isinstance(body.get("summary"), str)
        or not isinstance(body.get("user"), int | str)
        or not isinstance(body.get("covers"), str | None)
    ):
        return None
    return body


def compaction_message(item: dict[str, Any], param: str) -> NewMessage:
    """The stored form of a compaction item: a system message of kind `compaction` holding
    the summary, with the message it covers and the user it was made for."""
    fields_check(item, param, required={"encrypted_content"}, known=_FIELDS)
    where = f"{param}.encrypted_content"
    token = item["encrypted_content"]
    if not isinstance(token, str):
        raise wrong_type(where, "a string", token)
    body = _opened(token)
    if body is None:
        raise invalid(
            f"Invalid '{where}': it is not a compaction this server made, or it was altered.",
            param=where,
        )
    return NewMessage(
        role=Message.Role.SYSTEM,
        kind=Message.Kind.COMPACTION,
        content=body["summary"],
        provider_payload={"covers": body["covers"], "user": body["user"]},
    )


def compaction_item(
    ref: ItemRef, row: Mapping[str, Any], *, owner_id: Any = None
) -> dict[str, Any]:
    """A stored compaction (a `selectors.PATH_ROW_FIELDS` row) as its item, sealed for its
    conversation's owner (`owner_id`, read from the message when not given)."""
    if owner_id is None:
        owner_id = (
            Message.objects.filter(pk=row["id"])
            .values_list("conversation__owner_id", flat=True)
            .first()
        )
    payload = row.get("provider_payload")
    covers = payload.get("covers") if isinstance(payload, Mapping) else None
    return {
        "id": item_id(ref),
        "type": "compaction",
        "encrypted_content": compaction_token(
            user_id=owner_id, summary=row["content"], covers=covers
        ),
    }
