"""Conversation settings: create, update, delete."""

from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from accounts.services import idempotency_answers_forget
from conversations import notifications, validation
from conversations.errors import Problem
from conversations.models import Conversation, default_tools
from conversations.services.common import UNSET, raise_if
from conversations.services.files import files_release
from conversations.services.organising import conversation_organise, organise_problems
from conversations.services.quotas import conversation_quota_check
from conversations.services.runs import runs_end_with_conversations
from conversations.tools.registry import tool_names_problems


def conversation_create(
    *,
    owner: User,
    title: str = "",
    system_prompt: str = "",
    model: str = "",
    tools: list[str] | None = None,
    metadata: dict[str, str] | None = None,
    temperature: float | None = None,
    max_output_tokens: int | None = None,
    vision: bool = True,
) -> Conversation:
    tools = default_tools() if tools is None else tools
    metadata = {} if metadata is None else metadata
    raise_if(
        validation.title_problems(title)
        + validation.system_prompt_problems(system_prompt)
        + validation.model_problems(model)
        + tool_names_problems(tools, user=owner)
        + validation.metadata_problems(metadata)
        + validation.temperature_problems(temperature)
        + validation.max_output_tokens_problems(max_output_tokens)
        + validation.vision_problems(vision)
    )
    with transaction.atomic():
        conversation_quota_check(owner_id=owner.pk)
        return Conversation.objects.create(
            owner=owner,
            title=title.strip(),
            system_prompt=system_prompt,
            model=model,
            tools=tools,
            metadata=metadata,
            temperature=temperature,
            max_output_tokens=max_output_tokens,
            vision=vision,
        )


def conversation_update(
    *,
    conversation: Conversation,
    title: str = UNSET,
    system_prompt: str = UNSET,
    model: str = UNSET,
    tools: list[str] = UNSET,
    metadata: dict[str, str] = UNSET,
    archived: bool = UNSET,
    temperature: float | None = UNSET,
    max_output_tokens: int | None = UNSET,
    vision: bool = UNSET,
    pinned: bool = UNSET,
    folder_id: UUID | str | None = UNSET,
    tags: list[str] = UNSET,
) -> Conversation:
    """Change the settings that were passed; leave the rest untouched. The pin, folder and
    tags (`conversation_organise`) change in the same transaction: all or nothing."""
    checks: dict[str, Callable[[Any], list[Problem]]] = {
        "title": validation.title_problems,
        "system_prompt": validation.system_prompt_problems,
        "model": validation.model_problems,
        # A tool server's tools must be open to the conversation's owner.
        "tools": lambda value: tool_names_problems(value, user=conversation.owner),
        "metadata": validation.metadata_problems,
        "temperature": validation.temperature_problems,
        "max_output_tokens": validation.max_output_tokens_problems,
        "vision": validation.vision_problems,
    }
    given = {
        "title": title,
        "system_prompt": system_prompt,
        "model": model,
        "tools": tools,
        "metadata": metadata,
        "temperature": temperature,
        "max_output_tokens": max_output_tokens,
        "vision": vision,
    }
    changes: dict[str, Any] = {name: value for name, value in given.items() if value is not UNSET}
    problems: list[Problem] = []
    for name, value in changes.items():
        problems += checks[name](value)
    if archived is not UNSET and not isinstance(archived, bool):
        problems.append(Problem("$.archived", "must be true or false"))
    organising: dict[str, Any] = {
        name: value
        for name, value in {"pinned": pinned, "folder_id": folder_id, "tags": tags}.items()
        if value is not UNSET
    }
    problems += organise_problems(**organising)
    raise_if(problems)

    if "title" in changes:
        changes["title"] = changes["title"].strip()
    if archived is not UNSET and archived != (conversation.archived_at is not None):
        changes["archived_at"] = timezone.now() if archived else None
    if not changes and not organising:
        return conversation
    with transaction.atomic():
        if organising:
            conversation_organise(conversation=conversation, **organising)
        if not changes:
            return conversation
        changes["updated_at"] = timezone.now()
        for name, value in changes.items():
            setattr(conversation, name, value)
        conversation.save(update_fields=list(changes))
        notifications.notify(
            conversation.pk,
            notifications.UPDATED,
            **{
                name: (value.isoformat() if name == "archived_at" and value else value)
                for name, value in changes.items()
                if name != "updated_at"
            },
        )
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    """Hard delete. Messages and runs go as one DELETE each, never row by row in Python.

    That holds because nothing cascades from Message or Run and no delete signals are
    connected to them (tests/conversations/services/test_conversations_and_messages.py
    checks the query shape).
    """
    conversation_id = conversation.pk
    with transaction.atomic():
        runs_end_with_conversations(conversation_ids=[conversation_id])
        files_release(conversation_ids=[conversation_id])
        conversation.delete()
        # Answers kept for Idempotency-Key repeats may quote it: they go with it.
        idempotency_answers_forget(
            owner_ids=[conversation.owner_id], mentioning=[str(conversation_id)]
        )
        notifications.deleted_notify(conversation.owner_id, [conversation_id])
