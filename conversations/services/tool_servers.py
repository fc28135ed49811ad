"""Tool servers registered, changed and removed by staff, each write audited with the
server's name and the fields it changed (a secret only as set, replaced or cleared,
never its value); users' own tokens for `per_user` servers; every stored secret
encrypted again with the newest key.

A shared secret belongs to a `shared` server alone: it is cleared when the server's
auth changes to another mode, and users' tokens are deleted when it stops being
`per_user`, so no secret is kept that nothing sends.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import User
from accounts.secrets import SecretUnreadable, secret_encrypt, secret_rotate
from conversations.errors import NotFound, Problem, ValidationFailed
from conversations.models import AuditEvent, ToolCredential, ToolServer, ToolServerAuth
from conversations.selectors.tool_servers import tool_servers_open
from conversations.services.common import UNSET, raise_if
from conversations.services.tool_server_checks import (
    DEFAULTS,
    secret_problems,
    tool_server_problems,
)
from conversations.tools.servers import server_tools_forget

Progress = Callable[[int], object]


def _audit(*, actor: User | None, action: str, reason: str) -> None:
    AuditEvent.objects.create(
        actor=actor,
        actor_username=actor.get_username() if actor else "",
        action=action,
        reason=reason,
    )


def _given(fields: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not UNSET}


def _apply(server: ToolServer, changes: dict[str, Any]) -> list[str]:
    """Sets `changes` on the unsaved `server`; what changed, as the audit names it."""
    changed = []
    for name in ("name", "url", "auth", "allowed_tools", "timeout_seconds", "enabled"):
        if name in changes and getattr(server, name) != changes[name]:
            setattr(server, name, changes[name])
            changed.append(name)
    had_secret = bool(server.secret_encrypted)
    if "secret" in changes:
        secret = changes["secret"]
        server.secret_encrypted = secret_encrypt(secret) if secret else ""
    if server.auth != ToolServerAuth.SHARED:
        server.secret_encrypted = ""
    if server.secret_encrypted and "secret" in changes:
        changed.append("secret replaced" if had_secret else "secret set")
    elif had_secret and not server.secret_encrypted:
        changed.append("secret cleared")
    return changed


def _groups_set(server: ToolServer, names: list[str] | None) -> bool:
    """Whether the server's groups changed to those named."""
    if names is None:
        return False
    before = set(server.groups.values_list("name", flat=True))
    if before == set(names):
        return False
    server.groups.set(Group.objects.filter(name__in=names))
    return True


def _saved(server: ToolServer, *, creating: bool) -> None:
    try:
        with transaction.atomic():
            server.save(force_insert=creating)
    except IntegrityError:
        # Another request took the name between the check and the write.
        raise ValidationFailed([Problem("$.name", "is taken by another tool server")]) from None


def tool_server_create(
    *,
    actor: User | None,
    name: str,
    url: str,
    auth: str = DEFAULTS["auth"],
    secret: str | None = None,
    groups: list[str] | None = None,
    allowed_tools: list[str] | None = None,
    timeout_seconds: int = DEFAULTS["timeout_seconds"],
    enabled: bool = True,
) -> ToolServer:
    changes: dict[str, Any] = {
        "name": name,
        "url": url,
        "auth": auth,
        "groups": [] if groups is None else groups,
        "allowed_tools": [] if allowed_tools is None else allowed_tools,
        "timeout_seconds": timeout_seconds,
        "enabled": enabled,
    }
    if secret:
        changes["secret"] = secret
    raise_if(tool_server_problems(server=None, changes=changes))
    server = ToolServer()
    with transaction.atomic():
        _apply(server, changes)
        _saved(server, creating=True)
        _groups_set(server, changes["groups"])
        settings = [f"auth {server.auth}"]
        if server.secret_encrypted:
            settings.append("secret set")
        if changes["groups"]:
            settings.append(f"groups {', '.join(sorted(changes['groups']))}")
        if not enabled:
            settings.append("disabled")
        _audit(
            actor=actor,
            action=AuditEvent.Action.SERVER_ADDED,
            reason=f"tool server {server.name!r} added: {'; '.join(settings)}",
        )
    return server


def tool_server_update(
    *,
    actor: User | None,
    server: ToolServer,
    name: str = UNSET,
    url: str = UNSET,
    auth: str = UNSET,
    secret: str | None = UNSET,
    groups: list[str] = UNSET,
    allowed_tools: list[str] = UNSET,
    timeout_seconds: int = UNSET,
    enabled: bool = UNSET,
) -> ToolServer:
    """Change the fields that were passed; `secret` None or "" clears it."""
    changes = _given(
        {
            "name": name,
            "url": url,
            "auth": auth,
            "secret": secret,
            "groups": groups,
            "allowed_tools": allowed_tools,
            "timeout_seconds": timeout_seconds,
            "enabled": enabled,
        }
    )
    raise_if(tool_server_problems(server=server, changes=changes))
    before = server.name
    with transaction.atomic():
        locked = ToolServer.objects.select_for_update().get(pk=server.pk)
        was_per_user = locked.auth == ToolServerAuth.PER_USER
        changed = _apply(locked, changes)
        if _groups_set(locked, changes.get("groups")):
            changed.append("groups")
        dropped = 0
        if was_per_user and locked.auth != ToolServerAuth.PER_USER:
            dropped, _ = ToolCredential.objects.filter(server=locked).delete()
        if not changed:
            return locked
        locked.updated_at = timezone.now()
        _saved(locked, creating=False)
        named = [f"name (was {before!r})" if item == "name" else item for item in changed]
        if dropped:
            named.append(f"{dropped} user token(s) deleted")
        _audit(
            actor=actor,
            action=AuditEvent.Action.SERVER_CHANGED,
            reason=f"tool server {locked.name!r} changed: {', '.join(named)}",
        )
    return locked


def tool_server_delete(*, actor: User | None, server: ToolServer) -> None:
    """The server and every user's token for it."""
    with transaction.atomic():
        tokens = ToolCredential.objects.filter(server=server).count()
        name = server.name
        server.delete()
        _audit(
            actor=actor,
            action=AuditEvent.Action.SERVER_DELETED,
            reason=f"tool server {name!r} deleted, with {tokens} user token(s)",
        )


# --- a user's own token ----------------------------------------------------------------


def _listing_forget(server: ToolServer) -> None:
    """After the commit, the server's cached tool list is read afresh: what a token may
    list can differ."""
    transaction.on_commit(lambda: server_tools_forget(server=server))


def _credential_server(server: ToolServer, user: User) -> None:
    """NotFound unless the server is open to `user`; refused unless it is `per_user`."""
    if not tool_servers_open(user=user).filter(pk=server.pk).exists():
        raise NotFound("No such tool server.")
    if server.auth != ToolServerAuth.PER_USER:
        raise ValidationFailed(
            [
                Problem(
                    "$",
                    f"tool server {server.name!r} takes no token of yours (its auth is "
                    f"{server.auth!r})",
                )
            ]
        )


def tool_credential_set(*, server: ToolServer, user: User, token: str) -> ToolCredential:
    """`user`'s token for `server`, replacing theirs if they had one. Sent on their own
    calls to it only."""
    _credential_server(server, user)
    if token == "" or token is None:
        raise_if([Problem("$.token", "is required (to remove yours, clear the credential)")])
    raise_if(secret_problems(token, path="$.token"))
    now, encrypted = timezone.now(), secret_encrypt(token)
    with transaction.atomic():
        credential, _ = ToolCredential.objects.update_or_create(
            server=server,
            user=user,
            defaults={"token_encrypted": encrypted, "updated_at": now},
            create_defaults={"token_encrypted": encrypted, "created_at": now, "updated_at": now},
        )
        _listing_forget(server)
    return credential


def tool_credential_clear(*, server: ToolServer, user: User) -> None:
    """`user`'s token for `server` deleted; none set is not an error."""
    _credential_server(server, user)
    with transaction.atomic():
        if ToolCredential.objects.filter(server=server, user=user).delete()[0]:
            _listing_forget(server)


# --- keys -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RotationResult:
    rotated: int
    # Which secrets no configured key opens, by server and user, never by value.
    unreadable: list[str] = field(default_factory=list)


def secrets_count() -> int:
    """How many secrets are stored (shared secrets and users' tokens)."""
    return ToolServer.objects.exclude(secret_encrypted="").count() + ToolCredential.objects.count()


def secrets_rotate(*, progress: Progress | None = None) -> RotationResult:
    """Every stored secret encrypted again with the newest key of PARLEY_SECRET_KEYS,
    so older keys can then be dropped. Each row is written only if it still holds what
    was read (one set meanwhile was encrypted with the newest key already)."""
    rotated, unreadable = 0, []
    servers = ToolServer.objects.exclude(secret_encrypted="").order_by("pk")
    for pk, name, stored in servers.values_list("pk", "name", "secret_encrypted").iterator():
        try:
            fresh = secret_rotate(stored)
        except SecretUnreadable:
            unreadable.append(f"the shared secret of tool server {name!r}")
        else:
            ToolServer.objects.filter(pk=pk, secret_encrypted=stored).update(secret_encrypted=fresh)
            rotated += 1
        if progress is not None:
            progress(1)
    credentials = ToolCredential.objects.order_by("pk").values_list(
        "pk", "server__name", "user_id", "token_encrypted"
    )
    for pk, name, user_id, stored in credentials.iterator():
        try:
            fresh = secret_rotate(stored)
        except SecretUnreadable:
            unreadable.append(f"user {user_id}'s token for tool server {name!r}")
        else:
            ToolCredential.objects.filter(pk=pk, token_encrypted=stored).update(
                token_encrypted=fresh
            )
            rotated += 1
        if progress is not None:
            progress(1)
    return RotationResult(rotated=rotated, unreadable=unreadable)
