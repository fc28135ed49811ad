"""Every message on a branch: the link becomes required and seq unique per branch.

On PostgreSQL a composite foreign key also holds each branch's fork point on its parent:
(parent_id, fork_seq) must name one of the parent's own messages (a fork at 0 names none,
and a NULL column skips the check). It is deferred to commit, like Django's own keys, so
a conversation's messages and branches can be deleted in any order.
"""

import django.db.models.deletion
from django.db import migrations, models

from conversations.migrations._branch_fill import fill

FORK_POINT_SQL = """
ALTER TABLE conversations_branch ADD COLUMN fork_point_seq integer
    GENERATED ALWAYS AS (NULLIF(fork_seq, 0)) STORED;
ALTER TABLE conversations_branch ADD CONSTRAINT branch_fork_point_on_parent
    FOREIGN KEY (parent_id, fork_point_seq) REFERENCES conversations_message (branch_id, seq)
    DEFERRABLE INITIALLY DEFERRED;
"""
FORK_POINT_REVERSE_SQL = """
ALTER TABLE conversations_branch DROP CONSTRAINT IF EXISTS branch_fork_point_on_parent;
ALTER TABLE conversations_branch DROP COLUMN IF EXISTS fork_point_seq;
"""


def fork_point_key(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORK_POINT_SQL)


def fork_point_key_drop(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORK_POINT_REVERSE_SQL)


class Migration(migrations.Migration):
    dependencies = [("conversations", "0016_branches_fill")]

    operations = [
        # Rows written by a server still running the previous release since 0016 ran.
        migrations.RunPython(fill, migrations.RunPython.noop),
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
        migrations.RemoveConstraint(model_name="message", name="message_unique_seq"),
        migrations.AddConstraint(
            model_name="message",
            constraint=models.UniqueConstraint(
                fields=("branch", "seq"), name="message_unique_branch_seq"
            ),
        ),
        migrations.RunPython(fork_point_key, fork_point_key_drop),
    ]
