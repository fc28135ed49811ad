"""Small helpers shared by the conversation tests."""

from conversations.models import AuditEvent, Conversation, Message

# The built-in tools a new conversation enables, in the order the product lists them.
BUILTIN_TOOLS = ("calculator", "current_time", "update_draft", "search_conversations")


def tool_call(call_id: str, name: str = "calculator", arguments: str = "{}") -> dict[str, str]:
    return {"id": call_id, "name": name, "arguments": arguments}


def row_counts() -> tuple[int, int, int]:
    """Conversations, messages and audit events: unchanged after a refused write."""
    return Conversation.objects.count(), Message.objects.count(), AuditEvent.objects.count()


def refetch(conversation: Conversation) -> Conversation:
    return Conversation.objects.get(pk=conversation.pk)
