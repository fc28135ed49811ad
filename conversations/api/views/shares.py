"""Share links: the owner makes, lists and revokes them; whoever holds one reads the
snapshot (`shared/<token>/`) and, signed in, continues it in their own account."""

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from conversations import selectors, services
from conversations.api import share_serializers as ss
from conversations.api.base import ApiView, idempotent, int_param, page_response
from conversations.api.base import conversation_for as _conversation
from conversations.api.base import valid_body as _valid
from conversations.api.serializers import ConversationOut
from conversations.models import Conversation, Share
from conversations.serializers import conversation_payload, shared_message_payload
from conversations.throttles import ShareViews

PAGE_PARAMETERS = [
    OpenApiParameter("cursor", str, description="The `next` link's cursor."),
    OpenApiParameter("limit", int, description="1..200, default 50."),
]


def share_payload(share: Share, *, token: str | None = None) -> dict[str, Any]:
    """A share as its owner sees it; `url` only with the token, when it is made."""

    def when(value: Any) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": str(share.id),
        "url": selectors.share_link_path(token) if token else None,
        "audience": share.audience,
        "expires_at": when(share.expires_at),
        "revoked_at": when(share.revoked_at),
        "created_at": when(share.created_at),
        "conversation_id": str(share.conversation_id),
        "message_count": share.message_count,
        "view_count": share.view_count,
    }


def _shares_page(request: Request, *, conversation: Conversation | None) -> Response:
    page = selectors.share_page(
        user=request.user,
        conversation=conversation,
        cursor=request.query_params.get("cursor") or None,
        limit=int_param(request, "limit", 50, minimum=1),
    )
    return page_response(
        request,
        [share_payload(share) for share in page.items],
        {"cursor": page.next_cursor} if page.next_cursor else None,
    )


def shared_payload(share: Share) -> dict[str, Any]:
    """What a link shows: the title and the snapshot's messages, nothing of the owner."""
    rows = selectors.share_rows(share=share)
    return {
        "title": share.conversation.title,
        "created_at": share.created_at.isoformat(),
        "messages": [shared_message_payload(row) for row in rows],
    }


def shared_open(*, token: str, user: Any) -> Share:
    """`services.share_open`, a `signed_in` share refused to an anonymous caller as
    every not-signed-in request is."""
    try:
        return services.share_open(token=token, user=user)
    except services.ShareNeedsSignIn:
        raise NotAuthenticated from None


class ConversationShareListView(ApiView):
    @extend_schema(
        operation_id="conversation_shares_list",
        summary="List a conversation's share links",
        description="Newest first, revoked and expired ones included; no `url`.",
        parameters=PAGE_PARAMETERS,
        responses=ss.SharePage,
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        return _shares_page(request, conversation=conversation)

    @extend_schema(
        operation_id="conversation_shares_create",
        summary="Share a conversation",
        description="A read-only link to the active path as it is now: later messages, "
        "edits and branch switches do not show. `url` holds the token, shown this once "
        "(only its hash is stored).",
        request=ss.ShareIn,
        responses={201: ss.ShareOut},
        examples=[
            OpenApiExample(
                "Colleagues only, for a week",
                value={"audience": "signed_in", "expires_at": "2026-05-01T12:00:00Z"},
                request_only=True,
            )
        ],
    )
    @idempotent
    def post(self, request: Request, conversation_id: str) -> Response:
        conversation = _conversation(request, conversation_id)
        data = _valid(ss.ShareIn, request)
        share, token = services.share_create(
            conversation=conversation,
            user=request.user,
            audience=data.get("audience") or Share.Audience.PUBLIC,
            expires_at=data.get("expires_at"),
        )
        return Response(share_payload(share, token=token), status=201)

    # The link is shown once: a repeat answers the share without it.
    idempotency_withheld = ("url",)


class ShareListView(ApiView):
    @extend_schema(
        operation_id="shares_list",
        summary="List your share links",
        description="Of every conversation, newest first, revoked and expired ones included.",
        parameters=PAGE_PARAMETERS,
        responses=ss.SharePage,
    )
    def get(self, request: Request) -> Response:
        return _shares_page(request, conversation=None)


class ShareDetailView(ApiView):
    @extend_schema(
        operation_id="shares_revoke",
        summary="Revoke a share link",
        description="The link answers 404 from now on, as an unknown one does.",
        responses={204: None},
    )
    def delete(self, request: Request, share_id: str) -> Response:
        services.share_revoke(share=selectors.share_get(user=request.user, share_id=share_id))
        return Response(status=204)


class SharedView(ApiView):
    throttle_classes = [*ApiView.throttle_classes, ShareViews]

    def check_permissions(self, request: Request) -> None:
        # Anyone may read; a signed-in caller's key still needs its scope.
        if request.user and request.user.is_authenticated:
            super().check_permissions(request)

    @extend_schema(
        operation_id="shared_read",
        summary="Read a shared conversation",
        description="The snapshot behind a link, with no owner identity, draft or system "
        "prompt. Anyone may read a `public` link; a `signed_in` one answers 401 to "
        "anonymous callers. Unknown, revoked and expired links are 404 alike. Each read "
        "counts a view.",
        auth=[],
        responses=ss.SharedOut,
    )
    def get(self, request: Request, token: str) -> Response:
        return Response(shared_payload(shared_open(token=token, user=request.user)))


class SharedContinueView(ApiView):
    throttle_classes = [*ApiView.throttle_classes, ShareViews]

    @extend_schema(
        operation_id="shared_continue",
        summary="Continue a shared conversation in your account",
        description="A new conversation of yours with copies of the link's messages.",
        request=None,
        responses={201: ConversationOut},
    )
    @idempotent
    def post(self, request: Request, token: str) -> Response:
        share = shared_open(token=token, user=request.user)
        copy = services.share_continue(share=share, user=request.user)
        return Response(conversation_payload(copy), status=201)
