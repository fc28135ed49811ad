"""The admin's authorization matrix: every page and action the project registers, for
every kind of visitor, and what each response may contain.

Visitors: anonymous, the owner of the data (not staff), staff without permissions, staff
who may view everything, moderators (view and change, no transcripts), readers (also
`view_transcript`) and a superuser. Every field that holds what people or models wrote
carries a unique marker; no response to anyone without the transcript permission may
contain one.
"""

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from accounts import services as account_services
from accounts.models import ApiKey, User
from conversations import services
from conversations.models import AuditEvent, Conversation, Message, Run, Share, StoredFile
from conversations.services import NewMessage
from tests.support.admin import client_for
from tests.support.files import file_make

pytestmark = pytest.mark.django_db

MARKERS = {
    "title": "MkTitle1q",
    "content": "MkContent2q",
    "draft": "MkDraft3q",
    "system_prompt": "MkPrompt4q",
    "tool_arguments": "MkArgs5q",
    "tool_result": "MkResult6q",
    "metadata": "MkMeta7q",
    "provider_payload": "MkPayload8q",
    "run_error": "MkError9q",
    "client_id": "MkClient0q",
    "filename": "MkFile11q",
}

VIEW = ["view_conversation", "view_message", "view_run", "view_auditevent"]
VIEW += ["view_user", "view_apikey", "view_share"]
MODERATE = [*VIEW, "change_conversation", "delete_conversation", "change_run", "change_apikey"]
MODERATE += ["add_share", "change_share"]
ROLES: dict[str, list[str] | None] = {
    "anonymous": None,
    "owner": None,
    "staff": [],
    "viewer": VIEW,
    "moderator": MODERATE,
    "reader": [*MODERATE, "view_transcript"],
    "superuser": None,
}
STAFF_ROLES = ["staff", "viewer", "moderator", "reader", "superuser"]
TRANSCRIPT_ROLES = {"reader", "superuser"}


@dataclass
class World:
    owner: User
    conversation: Conversation
    message: Message
    run: Run
    event: AuditEvent
    key: ApiKey
    file: StoredFile
    share: Share


def build_world(owner: User) -> World:
    conversation = services.conversation_create(
        owner=owner, title=f"About {MARKERS['title']}", system_prompt=MARKERS["system_prompt"]
    )
    services.conversation_update(conversation=conversation, metadata={"k": MARKERS["metadata"]})
    Conversation.objects.filter(pk=conversation.pk).update(draft=MARKERS["draft"])
    run = Run.objects.create(
        conversation=conversation,
        status=Run.Status.QUEUED,
        client_id=MARKERS["client_id"],
        error={"code": "provider_error", "message": MARKERS["run_error"]},
    )
    services.messages_append(
        conversation=conversation,
        messages=[
            NewMessage(role="user", content=f"Hi {MARKERS['content']}"),
            NewMessage(
                role="assistant",
                tool_calls=[
                    {"id": "call_1", "name": "calculator", "arguments": MARKERS["tool_arguments"]}
                ],
                provider_payload={"raw": MARKERS["provider_payload"]},
                run_id=run.pk,
            ),
            NewMessage(
                role="tool",
                tool_call_id="call_1",
                name="calculator",
                content=MARKERS["tool_result"],
            ),
        ],
    )
    file = file_make(owner, b"A picture of a cake.", f"{MARKERS['filename']}.txt")
    services.user_message_append(
        conversation=conversation, content="See the file.", attachments=[str(file.pk)]
    )
    conversation.refresh_from_db()
    event = services.audit_record(
        actor=None, action=AuditEvent.Action.FLAGGED, conversation=conversation, reason="spam?"
    )
    key, _secret = account_services.api_key_create(owner=owner, name="laptop")
    message = conversation.messages.get(seq=1)
    share, _token = services.share_create(conversation=conversation, user=owner)
    return World(owner, conversation, message, run, event, key, file, share)


def visitor(role: str, owner: User) -> Client:
    codenames = ROLES[role]
    if role == "anonymous":
        return Client()
    if role == "owner":
        return client_for(owner)
    if role == "superuser":
        return client_for(User.objects.create_superuser(username="root", password="pw"))
    user = User.objects.create_user(username=role, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames or []))
    return client_for(User.objects.get(pk=user.pk))


def may(role: str, permission: str | None) -> bool:
    """Whether a staff role holds `permission` (None: any staff member)."""
    if role == "superuser":
        return True
    return permission is None or permission in (ROLES[role] or [])


def pages(world: World) -> list[tuple[str, str, str | None]]:
    """(name, url, permission needed; "never" for pages nobody may open)."""
    c, m, r, e, k, u = (
        world.conversation.pk,
        world.message.pk,
        world.run.pk,
        world.event.pk,
        world.key.pk,
        world.owner.pk,
    )
    autocomplete = reverse("admin:autocomplete")
    found: list[tuple[str, str, str | None]] = [
        ("index", reverse("admin:index"), None),
        ("group list", reverse("admin:auth_group_changelist"), "view_group"),
        ("usage", reverse("admin:conversations_conversation_usage"), "view_conversation"),
        (
            "transcript",
            reverse("admin:conversations_conversation_transcript", args=[c]),
            "view_transcript",
        ),
        (
            "file",
            reverse("admin:conversations_conversation_file", args=[c, world.file.pk]),
            "view_transcript",
        ),
        ("conversation add", reverse("admin:conversations_conversation_add"), "never"),
        (
            "conversation delete",
            reverse("admin:conversations_conversation_delete", args=[c]),
            "delete_conversation",
        ),
        ("user delete", reverse("admin:accounts_user_delete", args=[u]), "delete_user"),
        ("user add", reverse("admin:accounts_user_add"), "add_user"),
        ("user password", reverse("admin:auth_user_password_change", args=[u]), "change_user"),
        (
            "autocomplete conversation",
            f"{autocomplete}?app_label=conversations&model_name=message"
            f"&field_name=conversation&term=Mk",
            "view_conversation",
        ),
        (
            "autocomplete owner",
            f"{autocomplete}?app_label=conversations&model_name=conversation"
            f"&field_name=owner&term=alice",
            "view_user",
        ),
    ]
    for app, model, pk, permission in [
        ("conversations", "conversation", c, "view_conversation"),
        ("conversations", "message", m, "view_message"),
        ("conversations", "run", r, "view_run"),
        ("conversations", "auditevent", e, "view_auditevent"),
        ("accounts", "user", u, "view_user"),
        ("accounts", "apikey", k, "view_apikey"),
        ("conversations", "share", world.share.pk, "view_share"),
    ]:
        found += [
            (f"{model} list", reverse(f"admin:{app}_{model}_changelist"), permission),
            (f"{model} detail", reverse(f"admin:{app}_{model}_change", args=[pk]), permission),
            (f"{model} history", reverse(f"admin:{app}_{model}_history", args=[pk]), permission),
        ]
    for model, pk in [("message", m), ("run", r), ("auditevent", e), ("share", world.share.pk)]:
        found += [
            (f"{model} add", reverse(f"admin:conversations_{model}_add"), "never"),
            (
                f"{model} delete",
                reverse(f"admin:conversations_{model}_delete", args=[pk]),
                "never",
            ),
        ]
    return found


def assert_no_text(role: str, name: str, body: bytes) -> None:
    if role in TRANSCRIPT_ROLES:
        return
    for field, marker in MARKERS.items():
        assert marker.encode() not in body, (role, name, field)


@pytest.mark.parametrize("role", list(ROLES))
def test_every_admin_page_for_every_visitor(role, owner):
    world = build_world(owner)
    client = visitor(role, owner)
    for name, url, permission in pages(world):
        response = client.get(url)
        streamed = getattr(response, "streaming_content", None)
        body = b"".join(streamed) if streamed is not None else response.content
        if role in ("anonymous", "owner"):
            assert response.status_code == 302, (role, name)
            assert response["Location"].startswith(reverse("admin:login")), (role, name)
        elif permission != "never" and may(role, permission):
            assert response.status_code == 200, (role, name, response.status_code)
        else:
            assert response.status_code == 403, (role, name, response.status_code)
        assert_no_text(role, name, body)
    # Looking is never a change, and only reading text is audited.
    assert Conversation.objects.filter(pk=world.conversation.pk, flagged=False).exists()
    viewed = AuditEvent.objects.filter(action=AuditEvent.Action.VIEWED)
    assert viewed.exists() == (role in TRANSCRIPT_ROLES)


@pytest.mark.parametrize("role", list(ROLES))
def test_readers_alone_read_every_kind_of_text(role, owner):
    """The markers are really on the pages for those who may read them, so the absence
    above means something."""
    world = build_world(owner)
    client = visitor(role, owner)
    c = world.conversation.pk
    seen = b"".join(
        client.get(url).content
        for url in [
            reverse("admin:conversations_conversation_transcript", args=[c]),
            reverse("admin:conversations_conversation_change", args=[c]),
            reverse("admin:conversations_conversation_changelist"),
            reverse(
                "admin:conversations_message_change",
                args=[world.conversation.messages.get(seq=2).pk],
            ),
            reverse("admin:conversations_run_change", args=[world.run.pk]),
        ]
    )
    readable = ["title", "content", "draft", "system_prompt", "tool_arguments", "tool_result"]
    readable += ["metadata", "provider_payload", "run_error", "filename"]
    for field in readable:
        assert (MARKERS[field].encode() in seen) == (role in TRANSCRIPT_ROLES), (role, field)


# --- actions ---------------------------------------------------------------------------

ACTIONS = {
    # action: (changelist, permission, extra POST data)
    "flag": ("conversations_conversation", "change_conversation", {"reason": "look"}),
    "unflag": ("conversations_conversation", "change_conversation", {"reason": ""}),
    "delete_selected": ("conversations_conversation", "delete_conversation", {}),
    "export_json_zip": ("conversations_conversation", "view_transcript", {}),
    "export_jsonl": ("conversations_conversation", "view_transcript", {}),
    "export_markdown_zip": ("conversations_conversation", "view_transcript", {}),
    "export_csv": ("conversations_conversation", "view_transcript", {}),
    "cancel_runs": ("conversations_run", "change_run", {}),
    "revoke_keys": ("accounts_apikey", "change_apikey", {}),
    # Making a link shows the transcript to whoever holds it.
    "create_share_link": (
        "conversations_conversation",
        "view_transcript",
        {"audience": "signed_in", "expires": "7"},
    ),
    "revoke_shares": ("conversations_share", "change_share", {}),
    "user delete_selected": ("accounts_user", "delete_user", {"post": "yes"}),
}


def selected(action: str, world: World) -> str:
    changelist = ACTIONS[action][0]
    if changelist == "conversations_run":
        return str(world.run.pk)
    if changelist == "accounts_apikey":
        return str(world.key.pk)
    if changelist == "accounts_user":
        return str(world.owner.pk)
    if changelist == "conversations_share":
        return str(world.share.pk)
    return str(world.conversation.pk)


def happened(action: str, world: World) -> bool:
    conversation = Conversation.objects.filter(pk=world.conversation.pk).first()
    if action == "flag":
        return bool(conversation and conversation.flagged)
    if action == "unflag":
        return bool(conversation and not conversation.flagged)
    if action == "delete_selected":
        return conversation is None
    if action == "cancel_runs":
        return Run.objects.get(pk=world.run.pk).status == Run.Status.CANCELLED
    if action == "revoke_keys":
        return ApiKey.objects.get(pk=world.key.pk).revoked_at is not None
    if action == "user delete_selected":
        return not User.objects.filter(pk=world.owner.pk).exists()
    if action == "create_share_link":
        return Share.objects.filter(conversation=world.conversation).count() == 2
    if action == "revoke_shares":
        return Share.objects.get(pk=world.share.pk).revoked_at is not None
    return AuditEvent.objects.filter(action=AuditEvent.Action.EXPORTED).exists()


@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize("role", list(ROLES))
def test_every_action_for_every_visitor(role, action, owner):
    world = build_world(owner)
    if action == "unflag":
        Conversation.objects.filter(pk=world.conversation.pk).update(flagged=True)
    changelist, permission, extra = ACTIONS[action]
    client = visitor(role, owner)
    data = {
        "action": action.split()[-1],
        "_selected_action": [selected(action, world)],
        "index": "0",
        **extra,
    }
    if extra and "post" not in extra:
        data["apply"] = "yes"
    response = client.post(reverse(f"admin:{changelist}_changelist"), data)
    allowed = role in STAFF_ROLES and may(role, permission)
    if role in ("anonymous", "owner"):
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))
    elif role == "staff":
        assert response.status_code == 403
    streamed = getattr(response, "streaming_content", None)
    body = b"".join(streamed) if streamed is not None else response.content
    # The delete of a conversation asks first; the answer to that page does it.
    if allowed and action == "delete_selected":
        assert b"This permanently deletes" in body
        response = client.post(reverse(f"admin:{changelist}_changelist"), {**data, "apply": "yes"})
    assert happened(action, world) == allowed, (role, action)
    assert_no_text(role, action, body)
