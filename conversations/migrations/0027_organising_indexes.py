"""The sidebar's indexes over conversations (pinned first; a folder's listing).

Not atomic, so the conversation table keeps taking writes: on PostgreSQL each index is
built CONCURRENTLY (see _online.py); elsewhere Django builds it as usual. Running it again
after an interruption finishes the job: a half-built index is dropped first.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

from conversations.migrations._online import OnPostgresql

OWNER_PINNED = models.Index(
    fields=["owner", "-pinned", "-last_activity_at", "-id"], name="conversation_owner_pinned"
)
FOLDER = models.Index(
    condition=models.Q(folder__isnull=False),
    fields=["folder", "-pinned", "-last_activity_at", "-id"],
    name="conversation_folder",
)
# An interrupted CONCURRENTLY build leaves an invalid index under the name.
DROP_INVALID = [
    "DROP INDEX CONCURRENTLY IF EXISTS conversation_owner_pinned",
    "DROP INDEX CONCURRENTLY IF EXISTS conversation_folder",
]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("conversations", "0026_organising")]

    operations = [
        OnPostgresql(
            state_operations=[
                migrations.AddIndex(model_name="conversation", index=OWNER_PINNED),
                migrations.AddIndex(model_name="conversation", index=FOLDER),
            ],
            database_operations=[
                migrations.RunSQL(DROP_INVALID, migrations.RunSQL.noop),
                AddIndexConcurrently(model_name="conversation", index=OWNER_PINNED),
                AddIndexConcurrently(model_name="conversation", index=FOLDER),
            ],
        ),
    ]
