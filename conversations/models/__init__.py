"""The conversations app's models, one module per capability: conversations with their
branches and messages (`conversations.py`), the tool loop's runs (`runs.py`), the audit
trail (`audit.py`), the daily counters (`usage.py`), uploaded files and attachments
(`files.py`), tool servers and users' credentials for them (`tool_servers.py`), share
links (`shares.py`), folders and tags (`organising.py`). Import them from here."""

from conversations.models.audit import AuditAction, AuditEvent
from conversations.models.conversations import (
    Branch,
    Conversation,
    Message,
    MessageKind,
    MessageRole,
    default_tools,
)
from conversations.models.files import Attachment, FileText, StoredFile
from conversations.models.organising import ConversationTag, Folder, Tag
from conversations.models.runs import RUN_ACTIVE_STATUSES, RUN_TERMINAL_STATUSES, Run, RunStatus
from conversations.models.shares import Share, ShareAudience
from conversations.models.tool_servers import ToolCredential, ToolServer, ToolServerAuth
from conversations.models.usage import DailyMessageCount, UsageDay

__all__ = [
    "RUN_ACTIVE_STATUSES",
    "RUN_TERMINAL_STATUSES",
    "Attachment",
    "AuditAction",
    "AuditEvent",
    "Branch",
    "Conversation",
    "ConversationTag",
    "DailyMessageCount",
    "FileText",
    "Folder",
    "Message",
    "MessageKind",
    "MessageRole",
    "Run",
    "RunStatus",
    "Share",
    "ShareAudience",
    "StoredFile",
    "Tag",
    "ToolCredential",
    "ToolServer",
    "ToolServerAuth",
    "UsageDay",
    "default_tools",
]
