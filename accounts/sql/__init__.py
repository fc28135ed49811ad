"""The hand-written SQL of accounts, the one place it may be written: the credential
reads that every API request and every socket frame make (`credentials.py`), and the row
reader that every app's statements use (`rows.py`).

Raw SQL is kept only where it saves a millisecond or more of CPU per call on its path
against the ORM (bench/sql_paths.py); each statement has a test that checks it against
its ORM equivalent (tests/accounts/test_sql.py).
"""

from accounts.sql.credentials import api_key_by_hash, api_key_live, user_session_read
from accounts.sql.rows import Rows, Statement, column, execute, row_update, value_reader

__all__ = [
    "Rows",
    "Statement",
    "api_key_by_hash",
    "api_key_live",
    "column",
    "execute",
    "row_update",
    "user_session_read",
    "value_reader",
]
