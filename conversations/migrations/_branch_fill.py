"""The root-branch fill shared by migrations 0016 (the bulk, in batches) and 0017 (rows a
server still running the previous release wrote in between).

Each batch commits on its own when run outside a transaction, so no lock is held longer
than one batch (a few thousand conversations, or 20,000 rows by primary key). Safe to
run again: it only fills what is still empty. Progress is printed when there is more
than one batch.
"""

import sys
import time
import uuid
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, Subquery

CONVERSATION_BATCH = 2000
ROW_BATCH = 20_000


def _progress(label: str, done: int, total: int, started: float) -> None:
    if total > ROW_BATCH:
        elapsed = time.monotonic() - started
        sys.stdout.write(f"\r  {label}: {done:,}/{total:,} ({elapsed:.1f} s)")
        if done >= total:
            sys.stdout.write("\n")
        sys.stdout.flush()


def _roots(apps: Any) -> None:
    Conversation = apps.get_model("conversations", "Conversation")
    Branch = apps.get_model("conversations", "Branch")
    todo = Conversation.objects.filter(active_branch__isnull=True)
    total, done, started = todo.count(), 0, time.monotonic()
    last = None
    while True:
        page = todo.order_by("pk")
        if last is not None:
            page = page.filter(pk__gt=last)
        rows = list(page.values_list("pk", "message_count", "created_at")[:CONVERSATION_BATCH])
        if not rows:
            break
        last = rows[-1][0]
        with transaction.atomic():
            branches = [
                Branch(
                    id=uuid.uuid4(),
                    conversation_id=pk,
                    fork_seq=0,
                    message_count=count,
                    lineage=[],
                    created_at=created,
                )
                for pk, count, created in rows
            ]
            Branch.objects.bulk_create(branches)
            root = Branch.objects.filter(
                conversation_id=OuterRef("pk"), parent__isnull=True
            ).values("pk")[:1]
            Conversation.objects.filter(pk__in=[pk for pk, _, _ in rows]).update(
                active_branch_id=Subquery(root)
            )
        done += len(rows)
        _progress("root branches", done, total, started)


def _attach(apps: Any, model_name: str) -> None:
    """Point each row of `model_name` without a branch at its conversation's root."""
    Model = apps.get_model("conversations", model_name)
    Branch = apps.get_model("conversations", "Branch")
    root = Branch.objects.filter(
        conversation_id=OuterRef("conversation_id"), parent__isnull=True
    ).values("pk")[:1]
    total = Model.objects.filter(branch__isnull=True).count()
    if not total:
        return
    done, started, low = 0, time.monotonic(), None
    while True:
        keys = Model.objects.order_by("pk")
        if low is not None:
            keys = keys.filter(pk__gt=low)
        bound = list(keys.values_list("pk", flat=True)[ROW_BATCH - 1 : ROW_BATCH])
        batch = Model.objects.filter(branch__isnull=True)
        if low is not None:
            batch = batch.filter(pk__gt=low)
        if bound:
            batch = batch.filter(pk__lte=bound[0])
        done += batch.update(branch_id=Subquery(root))
        _progress(f"{model_name.lower()}s onto branches", min(done, total), total, started)
        if not bound:
            break
        low = bound[0]


def fill(apps: Any, schema_editor: Any) -> None:
    _roots(apps)
    _attach(apps, "Message")
    _attach(apps, "Run")
