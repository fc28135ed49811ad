"""Branches: the table, and nullable links from conversations, messages and runs.

The links are filled in batches by 0016 and made required by 0017, so no step holds a
lock on the messages table for longer than one batch.
"""

import uuid

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("conversations", "0014_conversation_search_trigram")]

    operations = [
        migrations.CreateModel(
            name="Branch",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("fork_seq", models.PositiveIntegerField(default=0)),
                ("message_count", models.PositiveIntegerField(default=0)),
                ("lineage", models.JSONField(blank=True, default=list)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "conversation",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="branches",
                        to="conversations.conversation",
                    ),
                ),
                (
                    "parent",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="children",
                        to="conversations.branch",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["parent", "fork_seq"], name="branch_fork_point"),
                    models.Index(fields=["conversation", "created_at", "id"], name="branch_list"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("parent__isnull", True)),
                        fields=("conversation",),
                        name="branch_one_root_per_conversation",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("parent__isnull", False), ("fork_seq", 0), _connector="OR"
                        ),
                        name="branch_root_forks_at_0",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("message_count__gte", models.F("fork_seq"))),
                        name="branch_path_holds_fork_point",
                    ),
                ],
            },
        ),
        migrations.AddField(
            model_name="conversation",
            name="active_branch",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="conversations.branch",
            ),
        ),
        migrations.AddField(
            model_name="conversation",
            name="branch_count",
            # A database default too: the previous release, which never names the
            # column, goes on creating conversations until 0017.
            field=models.PositiveIntegerField(db_default=1, default=1),
        ),
        migrations.AddField(
            model_name="message",
            name="branch",
            field=models.ForeignKey(
                null=True,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="messages",
                to="conversations.branch",
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="branch",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="conversations.branch",
            ),
        ),
    ]
