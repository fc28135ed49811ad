"""Small pieces shared by the admin modules."""

import uuid
from typing import Any, cast

from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from accounts.models import User

TRANSCRIPT_PERMISSION = "conversations.view_transcript"


def can_read_transcripts(request: HttpRequest) -> bool:
    user: Any = request.user
    return bool(user.is_active and user.is_staff and user.has_perm(TRANSCRIPT_PERMISSION))


def actor(request: HttpRequest) -> User:
    """The signed-in staff member (admin views only run for them)."""
    return cast(User, request.user)


def conversation_link(conversation_id: uuid.UUID) -> str:
    """A link to the conversation's detail page, named by its short id (never its title)."""
    url = reverse("admin:conversations_conversation_change", args=[conversation_id])
    return format_html('<a href="{}">{}</a>', url, str(conversation_id)[:8])
