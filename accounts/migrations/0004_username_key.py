import sys

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

import accounts.models
from accounts.usernames import username_key

BATCH = 1000


def keys_fill(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Every account gets its name's key, the oldest first: an account whose name looks
    like an older one's keeps no key (the constraint allows several empty ones), so the
    migration never fails on names that were allowed before, and they are reported."""
    User = apps.get_model("accounts", "User")
    users = User.objects.using(schema_editor.connection.alias)
    quote = schema_editor.quote_name
    # One statement run for many rows: an ORM bulk update's CASE per row is far slower.
    update = (
        f"UPDATE {quote(User._meta.db_table)} SET {quote('username_key')} = %s "
        f"WHERE {quote(User._meta.pk.column)} = %s"
    )
    seen: set[bytes] = set()
    later = 0
    last = None
    with schema_editor.connection.cursor() as cursor:
        # Page by id, not through one open cursor: the updates go between the reads.
        while True:
            page = users.order_by("pk").values_list("pk", "username")
            rows = list((page if last is None else page.filter(pk__gt=last))[:BATCH])
            if not rows:
                break
            last = rows[-1][0]
            batch: list[tuple[str, int]] = []
            for pk, username in rows:
                key = username_key(username=username)
                digest = bytes.fromhex(key)
                if digest in seen:
                    later += 1
                    continue
                seen.add(digest)
                batch.append((key, pk))
            if batch:
                cursor.executemany(update, batch)
    if later:
        sys.stdout.write(
            f"\n  {later} account(s) have a name like an older account's and were left "
            "without a key; `manage.py usernames_lookalikes` lists them.\n"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_api_key_scopes"),
    ]

    operations = [
        migrations.AlterModelManagers(
            name="user",
            managers=[
                ("objects", accounts.models.UserManager()),
            ],
        ),
        migrations.AddField(
            model_name="user",
            name="username_key",
            field=models.CharField(editable=False, max_length=64, null=True, unique=True),
        ),
        migrations.RunPython(keys_fill, migrations.RunPython.noop),
    ]
