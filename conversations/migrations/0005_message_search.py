"""Full-text search over message content, on PostgreSQL only.

A stored generated tsvector column (ranking reads it instead of re-parsing every matching
row) and a GIN index on it; the newest matches come from the created_at index (0004). The
column is not a model field: Django never writes it and SQLite, which has no tsvector,
never sees it; the search selectors use a plain case-insensitive match there. The API's
search and the message admin's search both read it.
"""

from django.db import migrations

FORWARD = [
    "ALTER TABLE conversations_message ADD COLUMN IF NOT EXISTS search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED",
    "CREATE INDEX IF NOT EXISTS message_search_vector ON conversations_message "
    "USING gin (search_vector)",
    # Word frequencies for the planner: with the default sample a rare word looks common
    # enough that walking the newest messages seems cheaper than the GIN index.
    "ALTER TABLE conversations_message ALTER COLUMN search_vector SET STATISTICS 1000",
]
BACKWARD = [
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
    dependencies = [("conversations", "0004_admin_governance")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False)]
