"""Every way into Parley, read from where it is declared: the URL conf's patterns (each
DRF view's method handlers, and the plain views under /api/ and /openai/) and the
websocket's frame types; and whether each makes the model work, from its handler's
`@model_work` declaration (conversations.limits). Then what exercising them needs: a
world of the owner's things, requests with its ids filled in, and a snapshot of what is
stored."""

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient
from rest_framework.views import APIView

from accounts import services as account_services
from accounts.models import ApiKey, User
from conversations import services
from conversations.consumers import ConversationConsumer
from conversations.engine import eventlog
from conversations.formats import exporting
from conversations.limits import makes_model_work
from conversations.models import (
    Branch,
    Conversation,
    DailyMessageCount,
    Message,
    Run,
    StoredFile,
)
from conversations.serializers import run_payload
from tests.support.files import file_make

# A plain view answers every method alike: one entry point whatever the method.
ANY = "ANY"
# Where the API doors are; the rest of the site is pages (web, admin, operations).
API_PREFIXES = ("api/", "openai/")


def _patterns(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, Callable[..., Any]]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _patterns(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern.callback


def _drf_view(callback: Callable[..., Any]) -> type[APIView] | None:
    cls = getattr(callback, "cls", None)
    return cls if isinstance(cls, type) and issubclass(cls, APIView) else None


def _handlers(cls: type[APIView]) -> dict[str, Any]:
    """A DRF view's own method handlers (OPTIONS and HEAD are DRF's, for every view)."""
    return {
        method.upper(): getattr(cls, method)
        for method in cls.http_method_names
        if method not in ("options", "head") and hasattr(cls, method)
    }


def http_entry_points() -> dict[tuple[str, str], bool]:
    """(URL pattern, method) of every DRF view, and (pattern, ANY) of every plain view
    under the API prefixes, each with whether it makes the model work."""
    found: dict[tuple[str, str], bool] = {}
    for route, callback in _patterns(get_resolver().url_patterns):
        cls = _drf_view(callback)
        if cls is not None:
            for method, handler in _handlers(cls).items():
                found[(route, method)] = makes_model_work(handler)
        elif route.lstrip("^").startswith(API_PREFIXES):
            found[(route, ANY)] = makes_model_work(callback)
    return found


def page_views() -> dict[str, Callable[..., Any]]:
    """The other patterns (web pages, the admin, operations), by pattern."""
    return {
        route: callback
        for route, callback in _patterns(get_resolver().url_patterns)
        if _drf_view(callback) is None and not route.lstrip("^").startswith(API_PREFIXES)
    }


def frame_entry_points() -> dict[str, bool]:
    """Every websocket frame type the consumer handles, with whether it makes the model
    work."""
    handlers = ConversationConsumer()._handlers()
    return {kind: makes_model_work(handler) for kind, handler in handlers.items()}


# --- exercising them ----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One request; "{name}" in the path or in body strings is the world's id of that name,
    and the body EXPORT is the world conversation's export document."""

    method: str
    path: str
    body: Any = None


EXPORT = object()
# The body UPLOAD is a multipart upload of a small text file as `file`; OPENAI_UPLOAD the
# same with OpenAI's `purpose`.
UPLOAD = object()
OPENAI_UPLOAD = object()


@dataclass(frozen=True)
class Exercise:
    """How to use an entry point: `calls` are well-formed uses (the first for the budget
    tests; every one for the refusals of model work); `invalid` is a use its handler
    refuses after the budgets, given exactly when it makes the model work; `spends` is
    False for the paths that match no endpoint, which answer without doing anything."""

    calls: tuple[Any, ...]
    invalid: Any = None
    spends: bool = True


def exercise(*calls: Any, invalid: Any = None, spends: bool = True) -> Exercise:
    return Exercise(calls, invalid, spends)


@dataclass
class World:
    """The owner's things every entry point is exercised on: a conversation holding one
    finished turn (whose run is also a response) and a share link of it, a spare API key,
    a file and a folder."""

    conversation: Conversation
    ids: dict[str, str]
    export: str


def world_build(owner: User) -> World:
    conversation = services.conversation_create(owner=owner, title="Cats")
    run = Run.objects.create(
        conversation=conversation,
        status=Run.Status.COMPLETED,
        branch_id=conversation.active_branch_id,
    )
    user, reply = services.messages_append(
        conversation=conversation,
        messages=[
            services.NewMessage(role="user", content="What is a cat?", run_id=run.pk),
            services.NewMessage(role="assistant", content="A small feline.", run_id=run.pk),
        ],
    )
    Run.objects.filter(pk=run.pk).update(trigger_message=user)
    writer = eventlog.EventWriter(str(run.pk))
    writer.emit("run.created", run=run_payload(run))
    writer.emit("run.completed", run=run_payload(run))
    key, _ = account_services.api_key_create(owner=owner, name="spare")
    stored = file_make(owner, b"A note about cats.", "note.txt")
    conversation.refresh_from_db()
    share, token = services.share_create(conversation=conversation, user=owner)
    folder = services.folder_create(owner=owner, name="Pets")
    ids = {
        "conversation": str(conversation.pk),
        "user": str(user.pk),
        "reply": str(reply.pk),
        "run": str(run.pk),
        "branch": str(conversation.active_branch_id),
        "key": str(key.pk),
        "conv": f"conv_{conversation.pk.hex}",
        "resp": f"resp_{run.pk.hex}",
        "item": f"msg_{user.pk.hex}",
        "file": str(stored.pk),
        "file_oai": f"file-{stored.pk.hex}",
        "share": str(share.pk),
        "token": token,
        "folder": str(folder.pk),
    }
    export = "".join(exporting.export_json_chunks(conversation))
    return World(conversation=conversation, ids=ids, export=export)


def filled(value: Any, ids: dict[str, str]) -> Any:
    """`value` with each "{name}" in its strings replaced by that id."""
    if isinstance(value, str):
        return value.format(**ids) if "{" in value else value
    if isinstance(value, dict):
        return {key: filled(item, ids) for key, item in value.items()}
    if isinstance(value, list):
        return [filled(item, ids) for item in value]
    return value


def http_call(client: APIClient, call: Call, world: World) -> Any:
    path = filled(call.path, world.ids)
    if call.body is None:
        return client.generic(call.method, path)
    if call.body is UPLOAD or call.body is OPENAI_UPLOAD:
        part = SimpleUploadedFile("upload.txt", b"Uploaded words.", content_type="text/plain")
        form: dict[str, Any] = {"file": part}
        if call.body is OPENAI_UPLOAD:
            form["purpose"] = "user_data"
        return client.post(path, form, format="multipart")
    body = world.export if call.body is EXPORT else json.dumps(filled(call.body, world.ids))
    return client.generic(call.method, path, body, content_type="application/json")


def stored() -> tuple[Any, ...]:
    """Everything a request could have written: unchanged after a refused one."""
    return (
        list(Conversation.objects.order_by("pk").values()),
        Message.objects.count(),
        list(Branch.objects.order_by("pk").values_list("pk", flat=True)),
        list(Run.objects.order_by("pk").values_list("pk", "status")),
        list(ApiKey.objects.order_by("pk").values_list("pk", "revoked_at")),
        list(DailyMessageCount.objects.values_list("user_id", "day", "messages")),
        list(StoredFile.objects.order_by("pk").values_list("pk", flat=True)),
    )


def runs_started(before: set[Any]) -> set[Any]:
    return set(Run.objects.values_list("pk", flat=True)) - before
