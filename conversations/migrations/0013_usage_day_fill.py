"""Fill the usage rollup from the messages already stored, so the dashboard shows the
same figures it computed from the messages before (copies left out, counts that are not
sane whole numbers counted as not reported).

A batch of conversations per transaction (the migration is not atomic), so a large
database is never held in one transaction and a run that stopped can simply be run
again: each batch replaces its conversations' rows. `manage.py rebuild_usage` does the
same with the current code, any time. This copy of the counting rule stays as it is, so
the migration keeps meaning what it meant when it was written.
"""

from datetime import UTC

from django.db import migrations, transaction
from django.db.models import BigIntegerField, Case, Count, Q, Sum, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, TruncDate

BATCH = 1000
COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _summed(name):
    sane = Q(
        **{
            f"usage__{name}__gte": 0,
            f"usage__{name}__lt": 10**13,
            f"usage__{name}__regex": r"^[0-9]{1,13}$",
        }
    )
    count = Case(
        When(sane, then=Cast(KeyTextTransform(name, "usage"), BigIntegerField())),
        default=Value(0),
        output_field=BigIntegerField(),
    )
    return Coalesce(Sum(count), 0)


def fill(apps, schema_editor):
    Conversation = apps.get_model("conversations", "Conversation")
    Message = apps.get_model("conversations", "Message")
    UsageDay = apps.get_model("conversations", "UsageDay")
    ordered = Conversation.objects.order_by("pk").values_list("pk", "owner_id")
    last = None
    while True:
        with transaction.atomic():
            batch = ordered if last is None else ordered.filter(pk__gt=last)
            page = list(batch.select_for_update()[:BATCH])
            if not page:
                return
            owners = dict(page)
            rows = (
                Message.objects.filter(conversation_id__in=list(owners), copied=False)
                .annotate(day=TruncDate("created_at", tzinfo=UTC))
                .values("conversation_id", "day")
                .annotate(
                    messages=Count("pk"),
                    user_messages=Count("pk", filter=Q(role="user")),
                    **{name: _summed(name) for name in COUNTS},
                )
                .order_by()
            )
            UsageDay.objects.filter(conversation_id__in=list(owners)).delete()
            UsageDay.objects.bulk_create(
                [
                    UsageDay(
                        day=row["day"],
                        owner_id=owners[row["conversation_id"]],
                        conversation_id=row["conversation_id"],
                        messages=row["messages"],
                        user_messages=row["user_messages"],
                        **{name: row[name] for name in COUNTS},
                    )
                    for row in rows
                ],
                batch_size=BATCH,
            )
        last = page[-1][0]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("conversations", "0012_usage_day")]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop, elidable=False)]
