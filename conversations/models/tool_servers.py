"""Tool servers (Model Context Protocol over streamable HTTP) registered by admins, and each
user's own credential for those that take one.

Secrets are stored encrypted (accounts/secrets.py) and never leave the process but in
the request to their server: every read of them says only whether one is set.
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

SERVER_NAME_MAX = 40
# A tool reaches the model as `<server>__<tool>`.
TOOL_SEPARATOR = "__"


class ToolServerAuth(models.TextChoices):
    NONE = "none", "no credential"
    SHARED = "shared", "one secret for every user (set by an admin)"
    PER_USER = "per_user", "each user's own token"


class ToolServer(models.Model):
    Auth = ToolServerAuth

    # A slug: it names the server's tools to the model (`<name>__<tool>`).
    name = models.SlugField(max_length=SERVER_NAME_MAX, unique=True)
    url = models.URLField(max_length=500)
    auth = models.CharField(max_length=8, choices=ToolServerAuth.choices, default="none")
    # Fernet-encrypted (accounts.secrets); empty when none is set.
    secret_encrypted = models.TextField(blank=True, default="")
    # Who may use it: members of these groups; none means every user.
    groups = models.ManyToManyField(Group, blank=True, related_name="+")
    # The server's tools offered to the model; empty means all of them.
    allowed_tools = models.JSONField(default=list, blank=True)
    timeout_seconds = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(600)]
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(auth__in=ToolServerAuth.values), name="tool_server_auth_valid"
            ),
            models.CheckConstraint(
                condition=Q(timeout_seconds__gte=1, timeout_seconds__lte=600),
                name="tool_server_timeout_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def secret_set(self) -> bool:
        return bool(self.secret_encrypted)


class ToolCredential(models.Model):
    """One user's token for one `per_user` server."""

    server = models.ForeignKey(ToolServer, on_delete=models.CASCADE, related_name="credentials")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tool_credentials"
    )
    # Fernet-encrypted (accounts.secrets).
    token_encrypted = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["server", "user"], name="tool_credential_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.server_id} for user {self.user_id}"
