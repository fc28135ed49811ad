from django.urls import path, re_path

from conversations.api import schema, sse
from conversations.api.errors import api_not_found
from conversations.api.views import (
    api_keys,
    branches,
    chat,
    conversations,
    exports,
    files,
    imports,
    organising,
    runs,
    search,
    shares,
    tool_servers,
    tools,
)

# Imported for its side effect: the schema learns the API-key authentication.
__all__ = ["schema", "urlpatterns"]

urlpatterns = [
    path("conversations/", conversations.ConversationListView.as_view(), name="conversations"),
    path(
        "conversations/import/",
        imports.ImportView.as_view(),
        name="conversation-import",
    ),
    path(
        "conversations/<str:conversation_id>/",
        conversations.ConversationDetailView.as_view(),
        name="conversation",
    ),
    path(
        "conversations/<str:conversation_id>/messages/",
        conversations.MessageListView.as_view(),
        name="conversation-messages",
    ),
    path(
        "conversations/<str:conversation_id>/messages/<str:message_id>/regenerate/",
        branches.RegenerateView.as_view(),
        name="message-regenerate",
    ),
    path(
        "conversations/<str:conversation_id>/messages/<str:message_id>/edit/",
        branches.EditView.as_view(),
        name="message-edit",
    ),
    path(
        "conversations/<str:conversation_id>/branches/",
        branches.BranchListView.as_view(),
        name="conversation-branches",
    ),
    path(
        "conversations/<str:conversation_id>/events/",
        conversations.ContextEventView.as_view(),
        name="conversation-events",
    ),
    path(
        "conversations/<str:conversation_id>/draft/",
        conversations.DraftView.as_view(),
        name="conversation-draft",
    ),
    path(
        "conversations/<str:conversation_id>/fork/",
        conversations.ForkView.as_view(),
        name="conversation-fork",
    ),
    path(
        "conversations/<str:conversation_id>/export/",
        exports.ExportView.as_view(),
        name="conversation-export",
    ),
    path(
        "conversations/<str:conversation_id>/shares/",
        shares.ConversationShareListView.as_view(),
        name="conversation-shares",
    ),
    path("shares/", shares.ShareListView.as_view(), name="shares"),
    path("shares/<str:share_id>/", shares.ShareDetailView.as_view(), name="share"),
    path("shared/<str:token>/", shares.SharedView.as_view(), name="shared"),
    path(
        "shared/<str:token>/continue/",
        shares.SharedContinueView.as_view(),
        name="shared-continue",
    ),
    path("folders/", organising.FolderListView.as_view(), name="folders"),
    path("folders/<str:folder_id>/", organising.FolderDetailView.as_view(), name="folder"),
    path("tags/", organising.TagListView.as_view(), name="tags"),
    path("runs/<str:run_id>/", runs.RunDetailView.as_view(), name="run"),
    path("runs/<str:run_id>/cancel/", runs.RunCancelView.as_view(), name="run-cancel"),
    path("runs/<uuid:run_id>/events/", sse.run_events, name="run-events"),
    path("search/", search.SearchView.as_view(), name="search"),
    path("chat/", chat.ChatView.as_view(), name="chat"),
    path("stateless/chat/", chat.StatelessChatView.as_view(), name="stateless-chat"),
    path("api-keys/", api_keys.ApiKeyListView.as_view(), name="api-keys"),
    path("api-keys/<str:key_id>/", api_keys.ApiKeyDetailView.as_view(), name="api-key"),
    path("tools/", tools.ToolListView.as_view(), name="tools"),
    path("tool-servers/", tool_servers.ToolServerListView.as_view(), name="tool-servers"),
    path(
        "tool-servers/<str:server_id>/",
        tool_servers.ToolServerDetailView.as_view(),
        name="tool-server",
    ),
    path(
        "tool-servers/<str:server_id>/credential/",
        tool_servers.ToolCredentialView.as_view(),
        name="tool-server-credential",
    ),
    path("files/", files.FileListView.as_view(), name="files"),
    path("files/<str:file_id>/", files.FileDetailView.as_view(), name="file"),
    path("files/<str:file_id>/content", files.FileContentView.as_view(), name="file-content"),
    # Anything else under /api/v1/ is a JSON 404, never an HTML page.
    re_path(r"^.*$", api_not_found),
]
