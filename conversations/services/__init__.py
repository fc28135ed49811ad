"""Every write to conversations: keyword-only functions named `<thing>_<action>`.

Split by subject; import them from here.
"""

from conversations.services.audit import (
    audit_record,
    audit_record_each,
    audit_record_many,
    audit_search_record,
)
from conversations.services.branches import (
    branch_fork,
    branch_switch,
    message_edit_prepare,
    reply_regenerate_prepare,
)
from conversations.services.chatgpt_import import (
    ChatGPTImportReport,
    ChatGPTImportResult,
    conversations_import_chatgpt,
)
from conversations.services.common import UNSET
from conversations.services.compactions import compaction_place
from conversations.services.conversations import (
    conversation_create,
    conversation_delete,
    conversation_update,
)
from conversations.services.drafts import conversation_draft_update
from conversations.services.file_staging import FileStager, StagedFile, file_stage
from conversations.services.files import (
    file_delete,
    file_store,
    files_orphans_sweep,
    files_owner_forget,
    files_release,
    files_released_sweep,
    files_storage,
)
from conversations.services.forks import conversation_fork
from conversations.services.governance import (
    PurgeResult,
    conversations_delete,
    conversations_export_record,
    conversations_flag,
    conversations_purge,
    conversations_unflag,
    user_delete,
)
from conversations.services.imports import (
    conversation_import,
    conversation_import_bundle,
    imports_abandoned_delete,
)
from conversations.services.inline_files import InlineFiles, files_inline
from conversations.services.message_batches import (
    conversation_create_with_messages,
    message_batch_append,
    message_batch_pairing_problems,
    message_replace,
)
from conversations.services.messages import (
    NewMessage,
    context_event_add,
    draft_edit_notice,
    message_append,
    messages_append,
    title_from_message,
    user_message_append,
)
from conversations.services.organising import (
    conversation_organise,
    folder_create,
    folder_delete,
    folder_update,
    organise_problems,
)
from conversations.services.quotas import conversation_quota_check, message_quota_take
from conversations.services.responses import response_delete, response_input_store
from conversations.services.shares import (
    ShareNeedsSignIn,
    share_continue,
    share_create,
    share_open,
    share_revoke,
    share_view_count,
    shares_revoke,
)
from conversations.services.tool_server_checks import tool_server_problems
from conversations.services.tool_servers import (
    RotationResult,
    secrets_count,
    secrets_rotate,
    tool_credential_clear,
    tool_credential_set,
    tool_server_create,
    tool_server_delete,
    tool_server_update,
)
from conversations.services.usage import usage_rebuild

__all__ = [
    "UNSET",
    "ChatGPTImportReport",
    "ChatGPTImportResult",
    "FileStager",
    "InlineFiles",
    "NewMessage",
    "PurgeResult",
    "RotationResult",
    "ShareNeedsSignIn",
    "StagedFile",
    "audit_record",
    "audit_record_each",
    "audit_record_many",
    "audit_search_record",
    "branch_fork",
    "branch_switch",
    "compaction_place",
    "context_event_add",
    "conversation_create",
    "conversation_create_with_messages",
    "conversation_delete",
    "conversation_draft_update",
    "conversation_fork",
    "conversation_import",
    "conversation_import_bundle",
    "conversation_organise",
    "conversation_quota_check",
    "conversation_update",
    "conversations_delete",
    "conversations_export_record",
    "conversations_flag",
    "conversations_import_chatgpt",
    "conversations_purge",
    "conversations_unflag",
    "draft_edit_notice",
    "file_delete",
    "file_stage",
    "file_store",
    "files_inline",
    "files_orphans_sweep",
    "files_owner_forget",
    "files_release",
    "files_released_sweep",
    "files_storage",
    "folder_create",
    "folder_delete",
    "folder_update",
    "imports_abandoned_delete",
    "message_append",
    "message_batch_append",
    "message_batch_pairing_problems",
    "message_edit_prepare",
    "message_quota_take",
    "message_replace",
    "messages_append",
    "organise_problems",
    "reply_regenerate_prepare",
    "response_delete",
    "response_input_store",
    "secrets_count",
    "secrets_rotate",
    "share_continue",
    "share_create",
    "share_open",
    "share_revoke",
    "share_view_count",
    "shares_revoke",
    "title_from_message",
    "tool_credential_clear",
    "tool_credential_set",
    "tool_server_create",
    "tool_server_delete",
    "tool_server_problems",
    "tool_server_update",
    "usage_rebuild",
    "user_delete",
    "user_message_append",
]
