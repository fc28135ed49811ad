"""Branched conversations for the admin tests, built the ways users make them: the
engine's regenerate and edit, and the services' fork, append and switch."""

from dataclasses import dataclass

from django.urls import reverse

from accounts.models import User
from conversations import engine, services
from conversations.models import Branch, Conversation, Message, Run
from conversations.services import NewMessage
from tests.support.admin import chat

OLD_REPLY = "Noted, turn 1."
NEW_REPLY = "A fresh take on turn 1, with more words than the first."


@dataclass
class Regenerated:
    conversation: Conversation
    root: Branch
    branch: Branch


def transcript_url(conversation: Conversation) -> str:
    return reverse("admin:conversations_conversation_transcript", args=[conversation.pk])


def change_url(conversation: Conversation) -> str:
    return reverse("admin:conversations_conversation_change", args=[conversation.pk])


def regenerated(owner: User, title: str = "Baking") -> Regenerated:
    """chat() (user, assistant, user, assistant) whose last reply was regenerated: the
    engine forks a branch after the second user message (seq 3) and makes it active;
    its run's reply is stored there as the runner would, and the run ends."""
    conversation = chat(owner, title)
    root = Branch.objects.get(conversation=conversation, parent__isnull=True)
    old = Message.objects.get(branch=root, seq=4)
    branch, run = engine.reply_regenerate(conversation=conversation, message_id=old.pk)
    services.message_append(
        conversation=conversation,
        message=NewMessage(role="assistant", content=NEW_REPLY, run_id=run.pk),
        branch_id=branch.pk,
    )
    Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETED)
    conversation.refresh_from_db()
    return Regenerated(
        conversation=conversation,
        root=Branch.objects.get(pk=root.pk),
        branch=Branch.objects.get(pk=branch.pk),
    )


def tree(owner: User, title: str = "Tree") -> tuple[Conversation, list[Branch]]:
    """A tree of four branches built with the services, no runs involved:

    root:  u1 a2 u3 a4
    b1:          (after 2)  u3' a4' u5' a6'   (an edit of u3)
    b2:    (after 1)  a2''                    (another reply to u1)
    b3:                            (b1 after 4) u5''' (an edit of u5', active)
    """
    conversation = services.conversation_create(owner=owner, title=title, system_prompt="Hi.")

    def add(branch: Branch, *texts: str) -> None:
        # Roles alternate along a path: a text starting with "u" is the user's.
        services.messages_append(
            conversation=conversation,
            messages=[
                NewMessage(role="user" if text.startswith("u") else "assistant", content=text)
                for text in texts
            ],
            branch_id=branch.pk,
        )
        branch.refresh_from_db()  # the append moved its counter in the database

    root = Branch.objects.get(conversation=conversation, parent__isnull=True)
    add(root, "u1", "a2", "u3", "a4")
    b1 = services.branch_fork(conversation=conversation, source=root, fork_seq=2)
    add(b1, "u3'", "a4'", "u5'", "a6'")
    b2 = services.branch_fork(conversation=conversation, source=root, fork_seq=1)
    add(b2, "a2''")
    b3 = services.branch_fork(conversation=conversation, source=b1, fork_seq=4)
    add(b3, "u5'''")
    services.branch_switch(conversation=conversation, branch_id=b3.pk)
    conversation.refresh_from_db()
    branches = [Branch.objects.get(pk=b.pk) for b in (root, b1, b2, b3)]
    return conversation, branches
