"""`folders/` and `tags/`: the caller's folders (list, create, rename or move, delete) and
the tags in use with their counts. A conversation's pin, folder and tags change through
its own `PATCH conversations/{id}/`."""

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from conversations import selectors, services
from conversations.api import organising_serializers as shapes
from conversations.api.base import ApiView, idempotent, page_response
from conversations.api.base import valid_body as _valid
from conversations.api.serializers import page_of
from conversations.models import Folder

FolderPage = page_of(shapes.FolderOut, "FolderPage")
TagPage = page_of(shapes.TagOut, "TagPage")


def folder_payload(folder: Folder, *, conversation_count: int | None = None) -> dict[str, Any]:
    counted = getattr(folder, "conversation_count", 0)
    return {
        "id": str(folder.id),
        "name": folder.name,
        "position": folder.position,
        "conversation_count": counted if conversation_count is None else conversation_count,
        "created_at": folder.created_at.isoformat(),
    }


def _user(request: Request) -> User:
    user: User = request.user  # type: ignore[assignment]
    return user


def _counted(request: Request, folder: Folder) -> dict[str, Any]:
    """The folder as listed, with its count read again (after a change)."""
    found = next(f for f in selectors.folders_for_user(user=_user(request)) if f.pk == folder.pk)
    return folder_payload(found)


class FolderListView(ApiView):
    @extend_schema(
        operation_id="folders_list",
        summary="List your folders",
        description="In your order (`position`), each with how many of your conversations "
        "it holds. One page: there are at most PARLEY_MAX_FOLDERS (200).",
        responses=FolderPage,
    )
    def get(self, request: Request) -> Response:
        folders = selectors.folders_for_user(user=_user(request))
        return page_response(request, [folder_payload(folder) for folder in folders], None)

    @extend_schema(
        operation_id="folders_create",
        summary="Create a folder",
        description="At `position` in your order (the end by default); the folders from "
        "there on move down one. A name one of your folders has in any case is a 400.",
        request=shapes.FolderIn,
        responses={201: shapes.FolderOut},
        examples=[OpenApiExample("Create", value={"name": "Work"}, request_only=True)],
    )
    @idempotent
    def post(self, request: Request) -> Response:
        data = _valid(shapes.FolderIn, request)
        folder = services.folder_create(
            owner=_user(request), name=data["name"], position=data.get("position")
        )
        return Response(folder_payload(folder, conversation_count=0), status=201)


class FolderDetailView(ApiView):
    @extend_schema(
        operation_id="folders_update",
        summary="Rename or move a folder",
        description="`position` moves it in your order and renumbers the others, so "
        "positions stay 0, 1, 2, ...",
        request=shapes.FolderUpdateIn,
        responses=shapes.FolderOut,
        examples=[OpenApiExample("Move first", value={"position": 0}, request_only=True)],
    )
    def patch(self, request: Request, folder_id: str) -> Response:
        folder = selectors.folder_get(user=_user(request), folder_id=folder_id)
        data = _valid(shapes.FolderUpdateIn, request, partial=True)
        folder = services.folder_update(folder=folder, **data)
        return Response(_counted(request, folder))

    @extend_schema(
        operation_id="folders_delete",
        summary="Delete a folder",
        description="Its conversations stay, in no folder.",
        responses={204: None},
    )
    def delete(self, request: Request, folder_id: str) -> Response:
        services.folder_delete(
            folder=selectors.folder_get(user=_user(request), folder_id=folder_id)
        )
        return Response(status=204)


class TagListView(ApiView):
    @extend_schema(
        operation_id="tags_list",
        summary="List your tags",
        description="The tags on at least one of your conversations (archived ones "
        "included), by name whatever its case, each with its count. One page.",
        responses=TagPage,
    )
    def get(self, request: Request) -> Response:
        tags = selectors.tags_with_counts(user=_user(request))
        return page_response(request, [{"name": t.name, "count": t.count} for t in tags], None)
