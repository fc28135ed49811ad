"""The hand-written SQL of conversations, the one place it may be written: the
statements of the hot paths (a message sent, a reply stored, a worker's step) that the
ORM would cost a millisecond or more of CPU per call (bench/sql_paths.py measures both
ways), and the search column no model field names. Services, selectors and the engine
call these functions; each statement has a test that checks it against its ORM
equivalent (tests/conversations/test_sql.py).

Rows are read into the instances the ORM makes by accounts' row reader (`accounts.sql`).
"""

from conversations.sql.messages import (
    HistoryRow,
    branch_count_advance,
    message_new,
    message_search_vector,
    messages_append_write,
    path_history_read,
)
from conversations.sql.runs import conversation_run_lock, run_lease_take, run_leases_renew

__all__ = [
    "HistoryRow",
    "branch_count_advance",
    "conversation_run_lock",
    "message_new",
    "message_search_vector",
    "messages_append_write",
    "path_history_read",
    "run_lease_take",
    "run_leases_renew",
]
