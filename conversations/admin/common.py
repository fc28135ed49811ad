"""Small pieces shared by the admin modules."""

from typing import Any, cast

from django.http import HttpRequest

from accounts.models import User

TRANSCRIPT_PERMISSION = "conversations.view_transcript"


def can_read_transcripts(request: HttpRequest) -> bool:
    user: Any = request.user
    return bool(user.is_active and user.is_staff and user.has_perm(TRANSCRIPT_PERMISSION))


def actor(request: HttpRequest) -> User:
    """The signed-in staff member (admin views only run for them)."""
    return cast(User, request.user)
