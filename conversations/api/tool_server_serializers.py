"""Request and response shapes of `tool-servers/` (the rest: conversations/api/serializers.py).

No answer holds a secret: staff read `secret_set`, users `credential_set`."""

from rest_framework import serializers

from conversations.api.serializers import page_of
from conversations.api.strict import (
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictSerializer,
)
from conversations.models import ToolServerAuth

AUTH_HELP = (
    "`none`: no credential; `shared`: one secret an admin sets, sent on every user's calls; "
    "`per_user`: each user's own token (`PUT tool-servers/{id}/credential/`)."
)
# Besides the listing's own: the server was not read because it is disabled or not open
# to the caller (only staff see such servers).
NOT_OPEN = "not_open"
STATUSES = ["ok", "unreachable", "credential_missing", "credential_refused", "error", NOT_OPEN]


def _text(**kwargs: object) -> StrictCharField:
    # Never trimmed: a name or a token with spaces is refused, not silently changed.
    return StrictCharField(trim_whitespace=False, **kwargs)  # type: ignore[arg-type]


class ServerToolOut(serializers.Serializer):
    name = serializers.CharField(
        help_text="The server's own name of the tool; the model sees `<server>__<name>`."
    )
    description = serializers.CharField()
    parameters = serializers.DictField(help_text="JSON Schema of the arguments.")


def _staff_fields(*, required: bool) -> dict[str, serializers.Field]:
    """What staff with the view permission on tool servers read besides."""
    staff = "" if required else " Staff only."
    return {
        "url": serializers.CharField(required=required, help_text=f"The MCP endpoint.{staff}"),
        "groups": serializers.ListField(
            child=serializers.CharField(),
            required=required,
            help_text=f"Who may use it; none means every user.{staff}",
        ),
        "allowed_tools": serializers.ListField(
            child=serializers.CharField(),
            required=required,
            help_text=f"The tools offered; none means all of them.{staff}",
        ),
        "timeout_seconds": serializers.IntegerField(
            min_value=1, max_value=600, required=required, help_text=staff.strip()
        ),
        "enabled": serializers.BooleanField(required=required, help_text=staff.strip()),
        "secret_set": serializers.BooleanField(
            required=required, help_text=f"Whether a shared secret is set.{staff}"
        ),
        "created_at": serializers.DateTimeField(required=required, help_text=staff.strip()),
        "updated_at": serializers.DateTimeField(required=required, help_text=staff.strip()),
    }


def _server_fields() -> dict[str, serializers.Field]:
    return {
        "id": serializers.IntegerField(),
        "name": serializers.CharField(),
        "auth": serializers.ChoiceField(choices=ToolServerAuth.choices, help_text=AUTH_HELP),
        "credential_set": serializers.BooleanField(
            help_text="Whether you have set your own token (`per_user` servers only)."
        ),
    }


ToolServerOut = type(
    "ToolServerOut",
    (serializers.Serializer,),
    {
        **_server_fields(),
        "tools": ServerToolOut(many=True),
        "status": serializers.ChoiceField(
            choices=STATUSES,
            help_text="`ok`, or why the tools could not be read: `unreachable`, "
            "`credential_missing` (set your token), `credential_refused`, `error`; "
            "`not_open` for a server staff see that is disabled or not open to them.",
        ),
        **_staff_fields(required=False),
    },
)
# What staff writes answer: the server's settings, its tools not read.
ToolServerManagedOut = type(
    "ToolServerManagedOut",
    (serializers.Serializer,),
    {**_server_fields(), **_staff_fields(required=True)},
)


class ToolServerIn(StrictSerializer):
    name = _text(
        help_text="Lowercase letters and digits joined by single `-` or `_`; the model "
        "sees the server's tools as `<name>__<tool>`."
    )
    url = _text(help_text="The server's MCP streamable HTTP endpoint (http or https).")
    auth = StrictChoiceField(choices=ToolServerAuth.choices, required=False, help_text=AUTH_HELP)
    secret = _text(
        required=False,
        allow_null=True,
        allow_blank=True,
        write_only=True,
        help_text="A `shared` server's secret (required for one), sent as a bearer token. "
        "Write-only: answers say `secret_set`. Null or empty clears it.",
    )
    groups = serializers.ListField(
        child=_text(),
        required=False,
        help_text="Names of the groups whose members may use it; none means every user.",
    )
    allowed_tools = serializers.ListField(
        child=_text(), required=False, help_text="The tools offered; none means all of them."
    )
    timeout_seconds = StrictIntegerField(required=False, help_text="1 to 600; default 30.")
    enabled = StrictBooleanField(required=False)


class ToolCredentialIn(StrictSerializer):
    token = _text(
        write_only=True,
        help_text="Your own token for this server, sent as a bearer token on your calls "
        "only. Write-only: answers say `credential_set`.",
    )


class ToolCredentialOut(serializers.Serializer):
    credential_set = serializers.BooleanField()


ToolServerPage = page_of(ToolServerOut, "ToolServerPage")
