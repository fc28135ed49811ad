import uuid
from collections.abc import Collection
from typing import Any, Self

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.contrib.auth.models import UserManager as DjangoUserManager
from django.core.exceptions import ValidationError
from django.db import models

from accounts.usernames import username_key, username_login_match, username_validate_available


class UserManager(DjangoUserManager["User"]):
    """create_user and create_superuser (so createsuperuser too) refuse a name that looks
    like another account's; log-in finds an account by any case of its name."""

    def _create_user_object(
        self, username: str, email: str | None, password: str | None, **extra_fields: Any
    ) -> "User":
        user: User = super()._create_user_object(  # type: ignore[misc]
            username, email, password, **extra_fields
        )
        username_validate_available(username=user.username)
        return user

    def get_by_natural_key(self, username: str | None) -> "User":
        """The account named exactly `username`, else the one account whose name equals it
        after case folding (accounts.usernames); never a look-alike in another script."""
        try:
            return self.get(username=username)
        except self.model.DoesNotExist:
            if not username:
                raise
        # Accounts that shared a key with an older one before keys existed have none.
        candidates = self.filter(
            models.Q(username_key=username_key(username=username))
            | models.Q(username_key__isnull=True, username__iexact=username)
        )
        user = username_login_match(username=username, candidates=list(candidates[:10]))
        if user is None:
            raise self.model.DoesNotExist(f"No single user is named {username!r} in any case.")
        return user

    async def aget_by_natural_key(self, username: str | None) -> "User":
        return await sync_to_async(self.get_by_natural_key)(username)


class User(AbstractUser):
    """Parley's user. Custom from the first migration so fields can be added later."""

    # The name's identity (accounts.usernames): no two accounts share one, so no name can
    # pass for another's. Empty for accounts that already shared theirs with an older
    # account when keys came (`manage.py usernames_lookalikes` lists them): NULL, not "",
    # since the constraint lets any number of rows be NULL.
    username_key = models.CharField(  # noqa: DJ001
        max_length=64, unique=True, null=True, editable=False
    )

    objects = UserManager()  # type: ignore[misc]

    @classmethod
    def from_db(cls, db: str | None, field_names: Collection[str], values: Collection[Any]) -> Self:
        user = super().from_db(db, field_names, values)
        user._stored_username = user.__dict__.get("username")
        return user

    def _username_changed(self) -> bool:
        """A new account, or a name other than the one loaded: only then is the name
        checked and its key written, so an account that shares a key from before keys
        existed can still save its other fields."""
        if self._state.adding:
            return True
        if "username" not in self.__dict__:  # deferred and never set
            return False
        return self.username != getattr(self, "_stored_username", None)

    def validate_unique(self, exclude: Collection[str] | None = None) -> None:
        # Every form that writes the name (sign-up, the admin's add and change) asks this.
        errors: dict[str, list[ValidationError]] = {}
        try:
            super().validate_unique(exclude)
        except ValidationError as error:
            errors = error.update_error_dict(errors)
        if (
            self.username
            and "username" not in (exclude or ())
            and "username" not in errors
            and self._username_changed()
        ):
            try:
                username_validate_available(username=self.username, user_id=self.pk)
            except ValidationError as error:
                errors["username"] = error.error_list
        if errors:
            raise ValidationError(errors)

    def save(self, *args: Any, **kwargs: Any) -> None:
        update_fields = kwargs.get("update_fields")
        if (update_fields is None or "username" in update_fields) and self._username_changed():
            self.username_key = username_key(username=self.username)
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, "username_key"}
        super().save(*args, **kwargs)
        self._stored_username = self.__dict__.get("username")


class Scope(models.TextChoices):
    """What a credential may do. `chat` makes the model work and writes conversations, and
    includes `read` (a client reads what it wrote); `read` only reads; `keys` manages API
    keys. Sessions hold every scope."""

    CHAT = "chat", "Chat: send, edit, regenerate and change conversations (includes read)"
    READ = "read", "Read: list, read, search, export and follow conversations"
    KEYS = "keys", "Keys: create, list and revoke API keys"


ALL_SCOPES: frozenset[str] = frozenset(Scope.values)
# A scope that grants others along with it.
SCOPE_IMPLIES: dict[str, frozenset[str]] = {Scope.CHAT.value: frozenset({Scope.READ.value})}


def scopes_unknown(names: Any) -> str | None:
    """What is wrong with `names` as a key's scopes, or None: a list of known names."""
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return "Scopes are a list of names."
    unknown = sorted(set(names) - ALL_SCOPES)
    if unknown:
        known = ", ".join(sorted(ALL_SCOPES))
        return f"Unknown scope {', '.join(map(repr, unknown))}; use {known}."
    return None


def scopes_validate(value: Any) -> None:
    """The field's validator (forms, the admin): scopes_unknown as a ValidationError."""
    problem = scopes_unknown(value)
    if problem:
        raise ValidationError(problem, code="invalid")


class ApiKey(models.Model):
    """A secret for programs. Only its SHA-256 is stored; the secret is shown once."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    # The public part of the key, shown in lists so people can tell keys apart.
    prefix = models.CharField(max_length=16, unique=True)
    hashed_secret = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Sorted scope names, implied ones included (accounts.services.scopes_normalize).
    scopes = models.JSONField(default=list, validators=[scopes_validate])
    # The key that created this one, if a key did: revoking it revokes this one too, and
    # a key never outlives the one that made it.
    created_by_key = models.ForeignKey(
        "self",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="created_keys",
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class IdempotencyRecord(models.Model):
    """One `Idempotency-Key` a user sent with a POST, and the answer it got.

    While `completed_at` is empty the first request is still being handled (a repeat gets
    409); afterwards a repeat with the same body gets the stored answer again, and a repeat
    with another body gets 422. Kept for PARLEY_IDEMPOTENCY_TTL_SECONDS.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    # SHA-256 of method, path and body: the same key with another request is a client bug.
    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    body = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="idempotency_unique_key"),
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created")]

    def __str__(self) -> str:
        return f"{self.owner_id}:{self.key}"
