"""`tool-servers/`: the tool servers open to the caller with their tools, the caller's own
token for a `per_user` one, and, for staff with the model permissions, registering,
changing and removing servers.

A server not open to the caller (disabled, or for groups they are not in) is 404 on
every URL, unless they are staff with the permission the method needs. No answer holds
a secret: users read `credential_set`, staff `secret_set`.
"""

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from conversations import selectors, services
from conversations.api import tool_server_serializers as ts
from conversations.api.base import ApiView, choice_param, idempotent, page_response, valid_body
from conversations.errors import PERMISSION_DENIED, ParleyError
from conversations.models import ToolServer
from conversations.selectors.tool_servers import ServerAction
from conversations.tools import servers as server_tools


def _user(request: Request) -> User:
    user: User = request.user  # type: ignore[assignment]
    return user


def _refused(action: ServerAction) -> ParleyError:
    return ParleyError(
        PERMISSION_DENIED,
        f"This needs staff status and the conversations.{action}_toolserver permission.",
    )


def _managed(request: Request, server_id: str, action: ServerAction) -> ToolServer:
    """The server for a staff write: any server with the permission; else 404 when it is
    not open to the caller, refused when it is."""
    user = _user(request)
    if selectors.tool_server_permitted(user=user, action=action):
        return selectors.tool_server_get(server_id=server_id)
    selectors.tool_server_get_open(user=user, server_id=server_id)
    raise _refused(action)


def _settings(server: ToolServer, groups: list[str]) -> dict[str, Any]:
    return {
        "url": server.url,
        "groups": groups,
        "allowed_tools": list(server.allowed_tools),
        "timeout_seconds": server.timeout_seconds,
        "enabled": server.enabled,
        "secret_set": server.secret_set,
        "created_at": server.created_at.isoformat(),
        "updated_at": server.updated_at.isoformat(),
    }


def _payloads(user: User, servers: list[ToolServer], *, staff: bool) -> list[dict[str, Any]]:
    """Each server as `user` reads it, its tools read for those open to them."""
    credentials = selectors.tool_credentials_set(user=user, servers=servers)
    groups = selectors.tool_server_group_names(servers=servers) if staff else {}
    # Only staff are shown servers that are not open to them.
    open_ids = {server.pk for server in servers}
    if staff:
        open_ids = set(
            selectors.tool_servers_open(user=user)
            .filter(pk__in=open_ids)
            .values_list("pk", flat=True)
        )
    found = []
    for server in servers:
        item: dict[str, Any] = {
            "id": server.pk,
            "name": server.name,
            "auth": server.auth,
            "credential_set": server.pk in credentials,
            "tools": [],
            "status": ts.NOT_OPEN,
        }
        if server.pk in open_ids:
            listing = server_tools.server_tools_for(server=server, user=user)
            item["status"] = listing.status
            item["tools"] = [
                {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
                for tool in listing.tools
            ]
        if staff:
            item.update(_settings(server, groups[server.pk]))
        found.append(item)
    return found


def _managed_payload(user: User, server: ToolServer) -> dict[str, Any]:
    groups = selectors.tool_server_group_names(servers=[server])
    return {
        "id": server.pk,
        "name": server.name,
        "auth": server.auth,
        "credential_set": server.pk in selectors.tool_credentials_set(user=user, servers=[server]),
        **_settings(server, groups[server.pk]),
    }


class ToolServerListView(ApiView):
    @extend_schema(
        operation_id="tool_servers_list",
        summary="List the tool servers open to you, with their tools",
        description="Enabled servers whose groups include one of yours (or that name no "
        "group), by name, each with its tools as the model is offered them "
        "(`<server>__<tool>`) and `status` saying whether they could be read. Staff with "
        "the view permission on tool servers also read each server's settings, and with "
        "`all=true` every server, disabled ones too.",
        parameters=[
            OpenApiParameter("all", str, enum=["true", "false"], description="Staff: every server.")
        ],
        responses=ts.ToolServerPage,
    )
    def get(self, request: Request) -> Response:
        user = _user(request)
        staff = selectors.tool_server_permitted(user=user, action="view")
        every = choice_param(request, "all", ["true", "false"], "false") == "true"
        if every and not staff:
            raise _refused("view")
        servers = selectors.tool_servers_all() if every else selectors.tool_servers_open(user=user)
        return page_response(request, _payloads(user, list(servers), staff=staff), None)

    @extend_schema(
        operation_id="tool_servers_create",
        summary="Register a tool server (staff)",
        description="Needs staff status and the `conversations.add_toolserver` permission "
        "(else 403 `permission_denied`). Audited. The answer says `secret_set`, never the "
        "secret.",
        request=ts.ToolServerIn,
        responses={201: ts.ToolServerManagedOut},
    )
    @idempotent
    def post(self, request: Request) -> Response:
        user = _user(request)
        if not selectors.tool_server_permitted(user=user, action="add"):
            raise _refused("add")
        data = valid_body(ts.ToolServerIn, request)
        server = services.tool_server_create(actor=user, **data)
        return Response(_managed_payload(user, server), status=201)


class ToolServerDetailView(ApiView):
    @extend_schema(
        operation_id="tool_servers_get",
        summary="Get a tool server open to you, with its tools",
        description="404 for a server not open to you (staff with the view permission on "
        "tool servers read any).",
        responses=ts.ToolServerOut,
    )
    def get(self, request: Request, server_id: str) -> Response:
        user = _user(request)
        staff = selectors.tool_server_permitted(user=user, action="view")
        server = (
            selectors.tool_server_get(server_id=server_id)
            if staff
            else selectors.tool_server_get_open(user=user, server_id=server_id)
        )
        return Response(_payloads(user, [server], staff=staff)[0])

    @extend_schema(
        operation_id="tool_servers_update",
        summary="Change a tool server (staff)",
        description="Changes the fields given. Needs staff status and the "
        "`conversations.change_toolserver` permission. `secret` null or empty clears it "
        "(refused while the server's auth is `shared`); a server whose auth stops being "
        "`per_user` loses every user's token, and one that stops being `shared` its "
        "secret. Audited.",
        request=ts.ToolServerIn,
        responses=ts.ToolServerManagedOut,
    )
    def patch(self, request: Request, server_id: str) -> Response:
        user = _user(request)
        server = _managed(request, server_id, "change")
        data = valid_body(ts.ToolServerIn, request, partial=True)
        server = services.tool_server_update(actor=user, server=server, **data)
        return Response(_managed_payload(user, server))

    @extend_schema(
        operation_id="tool_servers_delete",
        summary="Remove a tool server (staff)",
        description="With every user's token for it. Needs staff status and the "
        "`conversations.delete_toolserver` permission. Audited.",
        responses={204: None},
    )
    def delete(self, request: Request, server_id: str) -> Response:
        server = _managed(request, server_id, "delete")
        services.tool_server_delete(actor=_user(request), server=server)
        return Response(status=204)


class ToolCredentialView(ApiView):
    @extend_schema(
        operation_id="tool_servers_credential_set",
        summary="Set your own token for a tool server",
        description="For a `per_user` server open to you (another auth mode is 400). The "
        "token is stored encrypted and sent, as a bearer token, on your calls only; no "
        "answer shows it again.",
        request=ts.ToolCredentialIn,
        responses=ts.ToolCredentialOut,
    )
    def put(self, request: Request, server_id: str) -> Response:
        user = _user(request)
        server = selectors.tool_server_get_open(user=user, server_id=server_id)
        data = valid_body(ts.ToolCredentialIn, request)
        services.tool_credential_set(server=server, user=user, token=data["token"])
        return Response({"credential_set": True})

    @extend_schema(
        operation_id="tool_servers_credential_clear",
        summary="Delete your own token for a tool server",
        description="Deleting none is not an error.",
        responses={
            200: OpenApiResponse(ts.ToolCredentialOut, description="`credential_set: false`.")
        },
    )
    def delete(self, request: Request, server_id: str) -> Response:
        user = _user(request)
        server = selectors.tool_server_get_open(user=user, server_id=server_id)
        services.tool_credential_clear(server=server, user=user)
        return Response({"credential_set": False})
