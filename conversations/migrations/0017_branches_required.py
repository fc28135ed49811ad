"""Every message on a branch: the link becomes required and seq unique per branch.

On PostgreSQL a constraint trigger also holds each branch's fork point on its parent: a
new branch's (parent_id, fork_seq) must name one of the parent's own messages, or be 0 on
the root. It is deferred to commit, like Django's own keys, so an import may store its
branches before their messages. A trigger on branches rather than a foreign key into the
messages: a key would make PostgreSQL check every deleted message at commit (0.86 s per
100,000 when a conversation is deleted), while the messages a fork point names are only
ever deleted with their whole conversation.

Not atomic, so the messages table keeps taking writes: on PostgreSQL each step holds its
lock on the table only for a moment (see _online.py). NOT NULL is proved by a check
constraint validated while writes go on (SET NOT NULL then needs no scan), and the
unique index is built CONCURRENTLY before it becomes the constraint. Done in one
transaction, as Django does it, writers waited 1.8 s at 1,000,000 messages (the scan for
NOT NULL, Django's foreign key dropped and validated again, the index build), a time that
grows with the table (docs/PERFORMANCE.md, History, "Branches"). Every step may run
again: an interrupted run is finished by running the migration again.
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
    """CREATE OR REPLACE FUNCTION conversations_branch_fork_point_check() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        -- Checked at commit: a branch deleted by then (with its conversation) has no
        -- fork point left to hold.
        IF NEW.parent_id IS NULL
            OR NOT EXISTS (SELECT 1 FROM conversations_branch WHERE id = NEW.id) THEN
            RETURN NULL;
        END IF;
        IF NEW.fork_seq = 0 AND EXISTS (
            SELECT 1 FROM conversations_branch WHERE id = NEW.parent_id AND parent_id IS NULL
        ) THEN
            RETURN NULL;
        END IF;
        IF NEW.fork_seq > 0 AND EXISTS (
            SELECT 1 FROM conversations_message
            WHERE branch_id = NEW.parent_id AND seq = NEW.fork_seq
        ) THEN
            RETURN NULL;
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'foreign_key_violation',
            CONSTRAINT = 'branch_fork_point_on_parent',
            MESSAGE = format(
                'branch %%s forks at %%s, which is not one of its parent''s own messages',
                NEW.id, NEW.fork_seq
            );
    END $$""",
    "DROP TRIGGER IF EXISTS branch_fork_point_on_parent ON conversations_branch",
    """CREATE CONSTRAINT TRIGGER branch_fork_point_on_parent
    AFTER INSERT OR UPDATE OF parent_id, fork_seq ON conversations_branch
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION conversations_branch_fork_point_check()""",
]
FORK_POINT_REVERSE_SQL = """
DROP TRIGGER IF EXISTS branch_fork_point_on_parent ON conversations_branch;
DROP FUNCTION IF EXISTS conversations_branch_fork_point_check();
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
