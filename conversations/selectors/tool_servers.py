"""Reads of tool servers and users' credentials for them.

A server is open to a user when it is enabled and either names no groups or names one
the user belongs to; staff are held to the same rule. A server not open to the user
does not exist for them (the API answers 404), whatever its id. Secrets are read in
the clear only through `tool_server_secret` and `tool_credential_token`, for the call
to their server.
"""

from collections.abc import Iterable
from typing import Literal

from django.db.models import Exists, OuterRef, QuerySet

from accounts.models import User
from accounts.secrets import secret_decrypt
from conversations.models import ToolCredential, ToolServer

# What a staff member does with a server, each needing the model permission of that name.
ServerAction = Literal["view", "add", "change", "delete"]


def _server_id(server_id: int | str) -> int:
    """The id as a number, or ToolServer.DoesNotExist for a malformed one."""
    text = str(server_id)
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise ToolServer.DoesNotExist
    return int(text)


def tool_servers_open(*, user: User) -> QuerySet[ToolServer]:
    """The enabled servers `user` may use, by name."""
    memberships = ToolServer.groups.through.objects.filter(toolserver=OuterRef("pk"))
    return ToolServer.objects.filter(enabled=True).filter(
        ~Exists(memberships) | Exists(memberships.filter(group__user=user))
    )


def tool_server_get_open(*, user: User, server_id: int | str) -> ToolServer:
    """A server open to `user`, or ToolServer.DoesNotExist (a 404) for any other id."""
    return tool_servers_open(user=user).get(pk=_server_id(server_id))


def tool_server_get(*, server_id: int | str) -> ToolServer:
    """Any server, open or not: for staff who manage them."""
    return ToolServer.objects.get(pk=_server_id(server_id))


def tool_servers_all() -> QuerySet[ToolServer]:
    """Every server, disabled ones too: for staff who manage them."""
    return ToolServer.objects.all()


def tool_server_permitted(*, user: User, action: ServerAction) -> bool:
    """Whether `user` is active staff holding the model permission for `action` (a
    change permission implies viewing, as in the admin)."""
    if not (user.is_active and user.is_staff):
        return False
    if action == "view" and user.has_perm("conversations.change_toolserver"):
        return True
    return user.has_perm(f"conversations.{action}_toolserver")


def tool_server_group_names(*, servers: Iterable[ToolServer]) -> dict[int, list[str]]:
    """Each server's group names, sorted, in one query."""
    ids = [server.pk for server in servers]
    names: dict[int, list[str]] = {pk: [] for pk in ids}
    rows = ToolServer.groups.through.objects.filter(toolserver_id__in=ids)
    for server_id, name in rows.order_by("group__name").values_list("toolserver_id", "group__name"):
        names[server_id].append(name)
    return names


def tool_credentials_set(*, user: User, servers: Iterable[ToolServer]) -> set[int]:
    """The ids of those servers for which `user` has set a credential, in one query."""
    ids = [server.pk for server in servers]
    if not ids:
        return set()
    return set(
        ToolCredential.objects.filter(user=user, server_id__in=ids).values_list(
            "server_id", flat=True
        )
    )


def tool_credential_token(*, server: ToolServer, user: User) -> str | None:
    """`user`'s own token for `server` in the clear, or None when they set none (or the
    server takes no per-user token). SecretUnreadable when no configured key opens it."""
    if server.auth != ToolServer.Auth.PER_USER:
        return None
    stored = (
        ToolCredential.objects.filter(server=server, user=user)
        .values_list("token_encrypted", flat=True)
        .first()
    )
    return secret_decrypt(stored) if stored else None


def tool_server_secret(*, server: ToolServer) -> str | None:
    """A `shared` server's secret in the clear, or None. SecretUnreadable when no
    configured key opens it."""
    if server.auth != ToolServer.Auth.SHARED or not server.secret_encrypted:
        return None
    return secret_decrypt(server.secret_encrypted)


def tool_server_names() -> set[str]:
    """Every registered server's name, enabled or not: the prefixes (`<server>__`) of the
    tool names Parley keeps for server tools."""
    return set(ToolServer.objects.values_list("name", flat=True))
