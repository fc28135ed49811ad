"""Seeding for `bench.admin`: users, conversations with their root branches, long
conversations' messages and runs, loaded with COPY on PostgreSQL (bulk inserts elsewhere),
then the usage rollup filled the way migration 0013 fills it on an existing database.

Every row is written directly, bypassing the services, so each conversation's root
branch is written here too (Conversation.save() would make it).
"""

import argparse
import json
import secrets
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from random import Random
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone
from tqdm import tqdm

from accounts.models import User
from bench.common import analyze
from bench.state import prose
from conversations import services
from conversations.models import Branch, Conversation, Message, Run, UsageDay

ACTIVITY_DAYS = 90
BATCH = 5000


def copy_rows(model: type[models.Model], rows: Iterable[dict[str, Any]]) -> int:
    """Write rows into the model's table, fields a row leaves out at their defaults: with
    COPY on PostgreSQL, in bulk inserts elsewhere. No save() or signal runs."""
    if connection.vendor != "postgresql":
        return _insert_rows(model, rows)
    fields = model._meta.concrete_fields
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(model._meta.db_table)
    defaults = {f.attname: f.get_default() for f in fields}
    json_fields = {f.attname for f in fields if isinstance(f, models.JSONField)}
    written = 0
    connection.ensure_connection()
    raw: Any = connection.connection
    with raw.cursor() as cursor, cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            values = []
            for field in fields:
                value = row.get(field.attname, defaults[field.attname])
                if field.attname in json_fields and value is not None:
                    value = json.dumps(value)
                values.append(value)
            copy.write_row(values)
            written += 1
    return written


def _insert_rows(model: type[models.Model], rows: Iterable[dict[str, Any]]) -> int:
    written = 0
    batch: list[models.Model] = []
    for row in rows:
        batch.append(model(**row))
        if len(batch) >= BATCH:
            written += len(model._default_manager.bulk_create(batch))
            batch = []
    return written + len(model._default_manager.bulk_create(batch))


def texts(rng: Random, count: int, chars: int) -> list[str]:
    return [prose(rng, chars) for _ in range(count)]


def long_conversation_rows(
    conversation_id: uuid.UUID,
    branch_id: uuid.UUID,
    size: int,
    end: datetime,
    rng: Random,
    pool: list[str],
) -> Iterator[tuple[str, dict[str, Any]]]:
    """("message" | "run", row) for one long conversation, all on its root branch: user
    turn, sometimes a tool call and its result, then the assistant's reply with usage; a
    completed run per turn."""
    seq = 0
    start = end - timedelta(seconds=size * 30)
    run_id: uuid.UUID | None = None

    def message(**fields: Any) -> tuple[str, dict[str, Any]]:
        nonlocal seq
        seq += 1
        at = start + timedelta(seconds=seq * 30)
        return "message", {
            "id": uuid.uuid4(),
            "conversation_id": conversation_id,
            "branch_id": branch_id,
            "seq": seq,
            "created_at": at,
            "run_id": run_id,
            **fields,
        }

    while seq < size:
        run_id = None
        user = message(role="user", content=rng.choice(pool))
        yield user
        run_id = uuid.uuid4()
        at = user[1]["created_at"]
        yield (
            "run",
            {
                "id": run_id,
                "conversation_id": conversation_id,
                "branch_id": branch_id,
                "trigger_message_id": user[1]["id"],
                "status": Run.Status.COMPLETED,
                "model": "gpt-4o-mini",
                "iterations": 1,
                "usage": {"prompt_tokens": 900, "completion_tokens": 120, "total_tokens": 1020},
                "created_at": at,
                "started_at": at,
                "finished_at": at,
                "updated_at": at,
            },
        )
        if rng.random() < 0.2 and seq + 3 <= size:
            call = f"call_{secrets.token_hex(6)}"
            arguments = json.dumps({"expression": f"{rng.randint(1, 999)} * 1.2"})
            yield message(
                role="assistant",
                tool_calls=[{"id": call, "name": "calculator", "arguments": arguments}],
            )
            yield message(role="tool", tool_call_id=call, name="calculator", content="42.0")
        if seq < size:
            yield message(
                role="assistant",
                content=rng.choice(pool),
                usage={"prompt_tokens": 450, "completion_tokens": 60, "total_tokens": 510},
            )


def seed(prefix: str, args: argparse.Namespace, rng: Random) -> tuple[User, list[uuid.UUID]]:
    """Users, conversations with their root branches, then the long conversations'
    messages and runs."""
    root = User.objects.create_superuser(username=f"{prefix}root", password=secrets.token_hex())
    User.objects.bulk_create(
        [
            User(username=f"{prefix}{i:04d}", email=f"{prefix}{i:04d}@example.com")
            for i in range(args.users)
        ]
    )
    owner_ids = list(
        User.objects.filter(username__startswith=prefix, is_superuser=False).values_list(
            "pk", flat=True
        )
    )
    now = timezone.now()
    titles = texts(rng, 500, 40)
    long_ids = [uuid.uuid4() for _ in range(args.long)]
    roots: list[dict[str, Any]] = []

    def conversations() -> Iterator[dict[str, Any]]:
        for index in tqdm(range(args.conversations), desc="conversations", unit="conv"):
            long = index < args.long
            active = now - timedelta(seconds=rng.randint(0, ACTIVITY_DAYS * 86400))
            conversation_id = long_ids[index] if long else uuid.uuid4()
            created_at = active - timedelta(days=rng.randint(0, 30))
            root_id = uuid.uuid4()
            roots.append(
                {
                    "id": root_id,
                    "conversation_id": conversation_id,
                    "message_count": args.long_messages if long else 0,
                    "created_at": created_at,
                }
            )
            yield {
                "id": conversation_id,
                "owner_id": owner_ids[index % len(owner_ids)],
                "title": rng.choice(titles)[:80],
                "system_prompt": "You are a concise assistant for a small analytics team.",
                "model": "gpt-4o-mini" if index % 7 else "llama3.1:8b",
                "message_count": args.long_messages if long else 0,
                "active_branch_id": root_id,
                "created_at": created_at,
                "updated_at": active,
                "last_activity_at": active,
                "flagged": index % 500 == 0,
                "flag_reason": "reported" if index % 500 == 0 else "",
                "archived_at": active if index % 11 == 0 else None,
            }

    # One transaction: a conversation and its root point at each other, checked at commit.
    with transaction.atomic():
        copy_rows(Conversation, conversations())
        copy_rows(Branch, roots)
    root_of = {row["conversation_id"]: row["id"] for row in roots[: args.long]}

    pool = texts(rng, 2000, 200)
    runs: list[dict[str, Any]] = []

    def messages() -> Iterator[dict[str, Any]]:
        with tqdm(total=args.long * args.long_messages, desc="messages", unit="msg") as bar:
            for conversation_id in long_ids:
                for kind, row in long_conversation_rows(
                    conversation_id, root_of[conversation_id], args.long_messages, now, rng, pool
                ):
                    if kind == "run":
                        runs.append(row)
                    else:
                        bar.update()
                        yield row

    copy_rows(Message, messages())
    copy_rows(Run, runs)
    analyze(User, Conversation, Branch, Message, Run)
    return root, long_ids


def usage_fill() -> float:
    """COPY bypasses the services, so the usage rollup is filled as the migration fills it
    on an existing database; returns the seconds that took."""
    started = time.perf_counter()
    with tqdm(total=Conversation.objects.count(), desc="usage rollup", unit="conv") as bar:
        services.usage_rebuild(progress=bar.update)
    seconds = time.perf_counter() - started
    analyze(UsageDay)
    return seconds
