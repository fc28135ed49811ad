"""The ORM equivalents of accounts' hand-written statements (accounts/sql): what each
would be without raw SQL, with the same conditions and results. The tests check each
statement against its equivalent (tests/accounts/test_sql.py); bench/sql_paths.py times
both."""

from datetime import datetime
from uuid import UUID

from django.db.models import Model, Subquery
from django.utils import timezone

from accounts.models import ApiKey, User


def api_key_by_hash(*, hashed_secret: str) -> ApiKey | None:
    return (
        ApiKey.objects.select_related("owner")
        .filter(hashed_secret=hashed_secret, revoked_at__isnull=True)
        .first()
    )


def api_key_live(*, user_id: int, api_key_id: UUID) -> bool:
    return ApiKey.objects.filter(
        pk=api_key_id, owner_id=user_id, owner__is_active=True, revoked_at__isnull=True
    ).exists()


def user_session_read(
    *, user_id: int, session_key: str, session_model: type[Model]
) -> tuple[str, str, datetime] | None:
    password = User.objects.filter(pk=user_id, is_active=True).values("password")[:1]
    found = (
        session_model._default_manager.filter(
            session_key=session_key, expire_date__gt=timezone.now()
        )
        .annotate(password=Subquery(password))
        .filter(password__isnull=False)
        .values_list("password", "session_data", "expire_date")
        .first()
    )
    return None if found is None else (found[0], found[1], found[2])
