"""Tools the end-to-end tests register in their worker processes only (`--include`).

`record_side_effect` stands for any tool that changes the world: it keys its write on the
call id (tools are idempotent by call id), so running it again after a crash changes nothing.
Every execution is also logged, so tests can tell how often a call really ran.
"""

import time

from django.db import connection

from conversations.tools.registry import ToolContext, tool
from tests.support.side_effects import EXECUTIONS, SIDE_EFFECTS


@tool(mutating=True, timeout=30)
def record_side_effect(context: ToolContext, label: str, seconds: float = 0.0) -> str:
    """Record a side effect once per call id, then take `seconds` to finish."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {EXECUTIONS} (call_id, is_resume) VALUES (%s, %s)",
            [context.call_id, context.is_resume],
        )
        cursor.execute(
            f"INSERT INTO {SIDE_EFFECTS} (call_id, label) VALUES (%s, %s) "
            "ON CONFLICT (call_id) DO NOTHING",
            [context.call_id, label],
        )
    time.sleep(seconds)
    return f"recorded {label}"
