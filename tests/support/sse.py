"""Reading the REST event stream (`GET /api/v1/runs/<id>/events/`) in tests: its events
as a client parses them, a signed-in client, and a run still waiting for its events."""

import json
from typing import Any

from django.test import AsyncClient

from conversations.engine import eventlog
from conversations.models import Run
from conversations.serializers import run_payload


async def sse_events(response) -> list[dict[str, Any]]:
    body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    return sse_parse(body)


def sse_parse(body: str) -> list[dict[str, Any]]:
    got = []
    for block in body.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        fields = dict(line.split(": ", 1) for line in lines if ": " in line)
        if "data" in fields:
            event = json.loads(fields["data"])
            assert int(fields["id"]) == event["sequence_number"]
            assert fields["event"] == event["type"]
            got.append(event)
    return got


async def logged_in(user) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


def live_run(conversation) -> Run:
    """A run in progress whose log has only its first event."""
    run = Run.objects.create(conversation=conversation, status="in_progress")
    eventlog.EventWriter.open(str(run.pk)).emit("run.created", run=run_payload(run))
    return run
