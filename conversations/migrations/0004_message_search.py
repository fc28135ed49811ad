"""Full-text search over message content, on PostgreSQL only.

A stored generated tsvector column (ranking reads it instead of re-parsing every matching
row), a GIN index on it, and an index on created_at for the newest matches. The column is not a model field: Django never writes it and
SQLite, which has no tsvector, never sees it; the search selector uses a plain
case-insensitive match there.
"""

from django.db import migrations

FORWARD = [
    "ALTER TABLE conversations_message ADD COLUMN IF NOT EXISTS search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED",
    "CREATE INDEX IF NOT EXISTS message_search_vector ON conversations_message "
    "USING gin (search_vector)",
    # Newest matches first: a common word's candidates come from walking this backwards
    # instead of sorting every match.
    "CREATE INDEX IF NOT EXISTS message_created_at ON conversations_message (created_at)",
    # Word frequencies for the planner: with the default sample a rare word looks common
    # enough that walking the newest messages seems cheaper than the GIN index.
    "ALTER TABLE conversations_message ALTER COLUMN search_vector SET STATISTICS 1000",
]
BACKWARD = [
    "DROP INDEX IF EXISTS message_created_at",
    "DROP INDEX IF EXISTS message_search_vector",
    "ALTER TABLE conversations_message DROP COLUMN IF EXISTS search_vector",
]


def _run(statements):
    def operation(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return operation


class Migration(migrations.Migration):
    dependencies = [("conversations", "0003_run_client_id")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False)]
