"""Every read: keyword-only functions that take the requesting user where a user asks,
so another user's rows can never come back (callers get "does not exist", which the API
answers as 404). Split by subject; import them from here."""

from conversations.selectors.conversations import (
    MAX_PAGE,
    MESSAGE_FIELDS,
    Page,
    conversation_get,
    conversation_list,
    conversation_model_input,
    history_tail,
    message_page,
    message_rows_page,
    run_active,
    run_exists,
    run_get,
    run_get_for_user,
)
from conversations.selectors.moderation import (
    DayUsage,
    TranscriptPage,
    UserUsage,
    transcript_page,
    usage_by_day,
    usage_by_user,
)
from conversations.selectors.operations import runs_active_counts
from conversations.selectors.search import (
    HIGHLIGHT,
    SEARCH_MAX,
    SNIPPET_CHARS,
    SearchHit,
    messages_matching,
    search_hits,
    text_snippet,
)

__all__ = [
    "HIGHLIGHT",
    "MAX_PAGE",
    "MESSAGE_FIELDS",
    "SEARCH_MAX",
    "SNIPPET_CHARS",
    "DayUsage",
    "Page",
    "SearchHit",
    "TranscriptPage",
    "UserUsage",
    "conversation_get",
    "conversation_list",
    "conversation_model_input",
    "history_tail",
    "message_page",
    "message_rows_page",
    "messages_matching",
    "run_active",
    "run_exists",
    "run_get",
    "run_get_for_user",
    "runs_active_counts",
    "search_hits",
    "text_snippet",
    "transcript_page",
    "usage_by_day",
    "usage_by_user",
]
