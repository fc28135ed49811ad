"""Every message on a branch: the link becomes required and seq unique per branch.

On PostgreSQL a composite foreign key also holds each branch's fork point on its parent:
(parent_id, fork_seq) must name one of the parent's own messages (a fork at 0 names none,
and a NULL column skips the check). It is deferred to commit, like Django's own keys, so
a conversation's messages and branches can be deleted in any order.

Not atomic, so the messages table keeps taking writes: on PostgreSQL each step holds its
lock on the table only for a moment (see _online.py). NOT NULL is proved by a check
constraint validated while writes go on (SET NOT NULL then needs no scan), and the
unique index is built CONCURRENTLY before it becomes the constraint. Done in one
transaction, as Django does it, writers waited 1.8 s at 1,000,000 messages (the scan for
NOT NULL, Django's foreign key dropped and validated again, the index build), a time that
grows with the table (bench/migrate_branches.py). Every step may run again: an
interrupted run is finished by running the migration again.
"""

import django.db.models.deletion
from django.db import migrations, models

from conversations.migrations._branch_fill import fill
from conversations.migrations._online import OnPostgresql

NOT_NULL_SQL = [
    "ALTER TABLE conversations_message DROP CONSTRAINT IF EXISTS message_branch_not_null",
    "ALTER TABLE conversations_message ADD CONSTRAINT message_branch_not_null "
    "CHECK (branch_id IS NOT NULL) NOT VALID",
    "ALTER TABLE conversations_message VALIDATE CONSTRAINT message_branch_not_null",
    "ALTER TABLE conversations_message ALTER COLUMN branch_id SET NOT NULL",
    "ALTER TABLE conversations_message DROP CONSTRAINT message_branch_not_null",
]
NOT_NULL_REVERSE_SQL = ["ALTER TABLE conversations_message ALTER COLUMN branch_id DROP NOT NULL"]
OLD_UNIQUE_SQL = ["ALTER TABLE conversations_message DROP CONSTRAINT IF EXISTS message_unique_seq"]
OLD_UNIQUE_REVERSE_SQL = [
    "ALTER TABLE conversations_message ADD CONSTRAINT message_unique_seq "
    "UNIQUE (conversation_id, seq)"
]
UNIQUE_SQL = [
    # What an interrupted concurrent build leaves behind: an invalid index, built again.
    """DO $$ BEGIN
        IF EXISTS (SELECT 1 FROM pg_index
                   WHERE indexrelid = to_regclass('message_unique_branch_seq') AND NOT indisvalid)
        THEN DROP INDEX message_unique_branch_seq; END IF;
    END $$""",
    "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS message_unique_branch_seq "
    "ON conversations_message (branch_id, seq)",
    """DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'message_unique_branch_seq')
        THEN ALTER TABLE conversations_message ADD CONSTRAINT message_unique_branch_seq
            UNIQUE USING INDEX message_unique_branch_seq; END IF;
    END $$""",
]
UNIQUE_REVERSE_SQL = ["ALTER TABLE conversations_message DROP CONSTRAINT message_unique_branch_seq"]
FORK_POINT_SQL = [
    "ALTER TABLE conversations_branch ADD COLUMN IF NOT EXISTS fork_point_seq integer "
    "GENERATED ALWAYS AS (NULLIF(fork_seq, 0)) STORED",
    # Validated apart, so the messages table takes writes while the branches are checked.
    """DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'branch_fork_point_on_parent')
        THEN ALTER TABLE conversations_branch ADD CONSTRAINT branch_fork_point_on_parent
            FOREIGN KEY (parent_id, fork_point_seq)
            REFERENCES conversations_message (branch_id, seq)
            DEFERRABLE INITIALLY DEFERRED NOT VALID; END IF;
    END $$""",
    "ALTER TABLE conversations_branch VALIDATE CONSTRAINT branch_fork_point_on_parent",
]
FORK_POINT_REVERSE_SQL = """
ALTER TABLE conversations_branch DROP CONSTRAINT IF EXISTS branch_fork_point_on_parent;
ALTER TABLE conversations_branch DROP COLUMN IF EXISTS fork_point_seq;
"""


def fork_point_key(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        for statement in FORK_POINT_SQL:
            schema_editor.execute(statement)


def fork_point_key_drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORK_POINT_REVERSE_SQL)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("conversations", "0016_branches_fill")]

    operations = [
        # Rows written by a server still running the previous release since 0016 ran.
        migrations.RunPython(fill, migrations.RunPython.noop),
        OnPostgresql(
            state_operations=[
                migrations.AlterField(
                    model_name="message",
                    name="branch",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="messages",
                        to="conversations.branch",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(NOT_NULL_SQL, NOT_NULL_REVERSE_SQL)],
        ),
        OnPostgresql(
            state_operations=[
                migrations.RemoveConstraint(model_name="message", name="message_unique_seq"),
            ],
            database_operations=[migrations.RunSQL(OLD_UNIQUE_SQL, OLD_UNIQUE_REVERSE_SQL)],
        ),
        OnPostgresql(
            state_operations=[
                migrations.AddConstraint(
                    model_name="message",
                    constraint=models.UniqueConstraint(
                        fields=("branch", "seq"), name="message_unique_branch_seq"
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(UNIQUE_SQL, UNIQUE_REVERSE_SQL)],
        ),
        migrations.RunPython(fork_point_key, fork_point_key_drop),
    ]
