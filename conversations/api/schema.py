"""OpenAPI details shared by the views, and a hook that documents what every endpoint
has in common (errors, Idempotency-Key) so each view does not repeat it."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter

from conversations.errors import VOCABULARY

IDEMPOTENCY_PARAMETER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description=(
        "Any unique string (a UUID). A repeat with the same key and body within 24 hours gets "
        "the first answer again (header `Idempotent-Replayed: true`), without any secret it "
        "held (those fields are null and named in `Idempotent-Withheld`); 409 while the first "
        "is still running, or when the endpoint keeps nothing of its answers (stateless chat); "
        "422 if the body differs."
    ),
)

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                # The one vocabulary every door speaks (conversations.errors).
                "code": {"type": "string", "enum": sorted(VOCABULARY)},
                "message": {"type": "string"},
                "details": {"type": "object", "additionalProperties": {}},
            },
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}

RUN_EVENTS_PATH: dict[str, Any] = {
    "get": {
        "operationId": "runs_events",
        "summary": "Follow a run's events (Server-Sent Events)",
        "description": (
            "Each event is `id: <sequence_number>`, `event: <type>`, `data: <JSON>`; the "
            "stream replays from after `after` (or `Last-Event-ID`), then follows live and "
            "closes after the terminal event (`run.completed`, `run.failed`, "
            "`run.cancelled` or `run.incomplete`)."
        ),
        "tags": ["v1"],
        "parameters": [
            {
                "in": "path",
                "name": "run_id",
                "required": True,
                "schema": {"type": "string", "format": "uuid"},
            },
            {
                "in": "query",
                "name": "after",
                "required": False,
                "schema": {"type": "integer", "minimum": -1},
                "description": "Replay events after this sequence number.",
            },
            {
                "in": "header",
                "name": "Last-Event-ID",
                "required": False,
                "schema": {"type": "integer", "minimum": -1},
            },
        ],
        "security": [{"apiKey": []}, {"cookieAuth": []}],
        "responses": {
            "200": {
                "description": "The event stream.",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }
        },
    }
}

_COMMON_ERRORS = {
    "400": "Invalid request (each problem with its JSON path).",
    "401": "Not authenticated: log in or send `Authorization: Bearer <key>`.",
    "403": "Forbidden (for example a missing CSRF token with a session).",
    "404": "No such object among yours.",
    "405": "Method not allowed.",
    "406": "Not acceptable.",
    "429": "Too many requests, or a quota reached; see `Retry-After`.",
    "500": "Internal server error.",
}
_WRITE_ERRORS = {
    "409": "Conflicts with the current state (a run is active, a key in flight).",
    "413": "Request body (or uploaded file) too large, or a storage quota reached.",
    "415": "Unsupported media type: send JSON (or, for an upload, a file of an accepted type).",
    "422": "Idempotency-Key reused with a different request.",
}


def _error_response() -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def postprocess(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict:
    """Every operation documents the JSON error answers; every POST its Idempotency-Key."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("Error", ERROR_SCHEMA)
    # The SSE endpoint is a plain async Django view, which DRF's generator cannot see.
    result.setdefault("paths", {}).setdefault("/api/v1/runs/{run_id}/events/", RUN_EVENTS_PATH)
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            responses = operation.setdefault("responses", {})
            errors = dict(_COMMON_ERRORS)
            if method != "get":
                errors.update(_WRITE_ERRORS)
            for code, description in errors.items():
                if code not in responses:
                    responses[code] = {"description": description, **_error_response()}
            if method == "post":
                parameters = operation.setdefault("parameters", [])
                if not any(p.get("name") == "Idempotency-Key" for p in parameters):
                    parameters.append(
                        {
                            "in": "header",
                            "name": "Idempotency-Key",
                            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                            "description": IDEMPOTENCY_PARAMETER.description,
                        }
                    )
    return result


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """Documents `Authorization: Bearer <key>` (registered by being defined)."""

    target_class = "accounts.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key from `POST /api/v1/api-keys/`.",
        }


class PasswordScheme(OpenApiAuthenticationExtension):
    """Documents HTTP Basic, accepted by `api-keys/` only (for a program's first key)."""

    target_class = "accounts.authentication.PasswordAuthentication"
    name = "basicAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "basic",
            "description": "Username and password; at most 10 failures per 15 minutes.",
        }
