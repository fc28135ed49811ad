"""The chat page. It renders the shell and its settings; the page's modules then talk to
the REST API and the conversation websocket like any other client."""

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import ensure_csrf_cookie

from accounts.models import User
from conversations import selectors, validation
from conversations.engine import GenerationSettings, provider_is_demo
from conversations.models import Conversation
from web.security import strict_csp


def home(request: HttpRequest) -> HttpResponse:
    return redirect("web:chat" if request.user.is_authenticated else "login")


@strict_csp
@never_cache
@ensure_csrf_cookie
@login_required
def chat(request: HttpRequest, conversation_id: str | None = None) -> HttpResponse:
    assert isinstance(request.user, User)
    defaults = GenerationSettings.effective()
    conversation = None
    if conversation_id is not None:
        try:
            conversation = selectors.conversation_get(
                user=request.user, conversation_id=conversation_id
            )
        except Conversation.DoesNotExist:
            # Someone else's conversation looks exactly like one that does not exist.
            raise Http404("No such conversation.") from None
    config: dict[str, Any] = {
        "conversationId": str(conversation.pk) if conversation else None,
        "username": request.user.get_username(),
        "demo": provider_is_demo(),
        "defaultModel": settings.PARLEY_MODEL,
        "maxMessageChars": settings.PARLEY_MAX_MESSAGE_CHARS,
        "titleMax": validation.TITLE_MAX,
        # The settings dialog shows what an empty field means (the server's defaults).
        "defaultMaxOutputTokens": defaults.max_output_tokens,
        "maxOutputTokensCap": settings.PARLEY_MAX_OUTPUT_TOKENS,
        "defaultTemperature": defaults.temperature,
        # The composer refuses what the server would, before a byte is sent.
        "maxFilesPerMessage": settings.PARLEY_FILE_MAX_PER_MESSAGE,
        "maxFileBytes": settings.PARLEY_FILE_MAX_BYTES,
    }
    return render(
        request,
        "web/chat.html",
        {"config": config, "conversation": conversation, "demo": config["demo"]},
    )
