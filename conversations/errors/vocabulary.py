"""The error vocabulary: every condition a door can refuse with, each once, with its stable
code, a default message and the HTTP status the REST door answers with.

Each door renders these in its own shape: `/api/v1/` as `{"error": {"code", "message",
"details"?}}` with `status`, the OpenAI-compatible door through its one table of OpenAI
statuses, types and aliases (`openai_api/errors.py`), the websocket as an `error` frame.
A new code is added here, with its status, or nowhere.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorCode:
    code: str
    # What /api/v1/ answers with; the other doors map the code to their own statuses.
    status: int
    message: str

    def __str__(self) -> str:
        return self.code


# Every code, by its name; filled by `_entry` as the codes below are declared.
VOCABULARY: dict[str, ErrorCode] = {}


def _entry(code: str, status: int, message: str) -> ErrorCode:
    if code in VOCABULARY:
        raise ValueError(f"error code {code!r} declared twice")
    entry = VOCABULARY[code] = ErrorCode(code, status, message)
    return entry


# --- the input ----------------------------------------------------------------------------

INVALID = _entry("invalid", 400, "Invalid request.")
# Not acceptable JSON at all (syntax, nesting, numbers, unstorable text), told apart from
# a wrong value.
INVALID_JSON = _entry("invalid_json", 400, "The input is not acceptable JSON.")
# An import refused as a whole, with a report of each conversation in it.
INVALID_IMPORT = _entry("invalid_import", 400, "Nothing was imported.")
REQUEST_TOO_LARGE = _entry("request_too_large", 413, "The request is too large.")
# Refused by the web server before any view read it (a malformed Host, too many fields).
BAD_REQUEST = _entry("bad_request", 400, "Bad request.")
UNSUPPORTED_MEDIA_TYPE = _entry(
    "unsupported_media_type", 415, "Send the body as JSON (Content-Type: application/json)."
)
NOT_ACCEPTABLE = _entry("not_acceptable", 406, "The answer can only be JSON.")

# --- who asks, and for what -----------------------------------------------------------------

NOT_AUTHENTICATED = _entry("not_authenticated", 401, "Log in or send Authorization: Bearer <key>.")
AUTHENTICATION_FAILED = _entry("authentication_failed", 401, "Invalid credentials.")
PERMISSION_DENIED = _entry("permission_denied", 403, "You may not do this.")
# The API key lacks the scope this needs (`details.required_scope` names it).
INSUFFICIENT_SCOPE = _entry(
    "insufficient_scope", 403, "This API key does not have the scope this needs."
)
# Unknown, malformed or another user's: never a hint that it exists elsewhere.
NOT_FOUND = _entry("not_found", 404, "Not found.")
UNKNOWN_URL = _entry("unknown_url", 404, "No such endpoint.")
METHOD_NOT_ALLOWED = _entry("method_not_allowed", 405, "Method not allowed.")

# --- budgets and quotas ---------------------------------------------------------------------

# A request budget: it comes back by itself (Retry-After says when).
THROTTLED = _entry("throttled", 429, "Too many requests; slow down.")
# Quotas: used up until the owner deletes something or the day turns.
CONVERSATION_QUOTA_EXCEEDED = _entry(
    "conversation_quota_exceeded",
    429,
    "You have reached your limit of conversations; delete one to start another.",
)
MESSAGE_QUOTA_EXCEEDED = _entry(
    "message_quota_exceeded",
    429,
    "You have sent the maximum of messages for today; the limit resets at midnight UTC.",
)

# --- the conversation's state ---------------------------------------------------------------

RUN_ACTIVE = _entry(
    "run_active",
    409,
    "A reply is still being generated in this conversation; wait for it or cancel it.",
)
NO_ACTIVE_RUN = _entry("no_active_run", 409, "There is no reply being generated to cancel.")
DRAFT_EDITED_MEANWHILE = _entry(
    "draft_edited_meanwhile", 409, "The user edited the draft after the model read it."
)
EVENTS_EXPIRED = _entry(
    "events_expired",
    410,
    "This run's events have expired; read the run and the conversation's messages instead.",
)
STREAM_UNAVAILABLE = _entry(
    "stream_unavailable", 503, "The reply's event stream was lost; reconnect to resume it."
)

# --- Idempotency-Key ------------------------------------------------------------------------

IDEMPOTENCY_IN_FLIGHT = _entry(
    "idempotency_in_flight",
    409,
    "A request with this Idempotency-Key is still being processed; retry later.",
)
IDEMPOTENCY_KEY_REUSED = _entry(
    "idempotency_key_reused",
    422,
    "This Idempotency-Key was used with a different request; use a new key.",
)
IDEMPOTENCY_ANSWER_NOT_KEPT = _entry(
    "idempotency_answer_not_kept",
    409,
    "A request with this Idempotency-Key was already answered, and this endpoint keeps "
    "nothing of its answers, so it cannot be sent again. Send the request again with a new "
    "Idempotency-Key.",
)
# The stored answer named something deleted since, and was dropped with it.
IDEMPOTENCY_ANSWER_GONE = _entry(
    "gone",
    410,
    "What this request's answer showed has been deleted since, and the answer with it.",
)

# --- files ----------------------------------------------------------------------------------

FILE_TOO_LARGE = _entry("file_too_large", 413, "The file is larger than the limit.")
UNSUPPORTED_FILE_TYPE = _entry(
    "unsupported_file_type",
    415,
    "This type of file is not accepted: send an image (PNG, JPEG, GIF, WebP), a PDF or "
    "UTF-8 text (plain, Markdown, CSV, JSON).",
)
IMAGE_TOO_LARGE = _entry("image_too_large", 400, "The image has more pixels than the limit.")
FILE_QUOTA_EXCEEDED = _entry(
    "file_quota_exceeded",
    413,
    "Your files take all the storage you are allowed; delete some to upload more.",
)
FILE_IN_USE = _entry(
    "file_in_use", 409, "A message uses this file; delete the message (or its conversation) first."
)

# --- the server -----------------------------------------------------------------------------

# A model call made inside the request failed; `details.reason` is the run error code.
MODEL_CALL_FAILED = _entry("model_call_failed", 502, "The model call failed.")
SERVER_ERROR = _entry("server_error", 500, "Internal server error.")
