"""Tables where the end-to-end test tool records what it did (created by the tests)."""

from django.db import connection

SIDE_EFFECTS = "e2e_side_effect"
EXECUTIONS = "e2e_execution"


def tables_reset() -> None:
    """Create the tables if needed and empty them (they are not Django's, so nothing else does)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {SIDE_EFFECTS} "
            "(call_id varchar(200) PRIMARY KEY, label varchar(200) NOT NULL)"
        )
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {EXECUTIONS} "
            "(call_id varchar(200) NOT NULL, is_resume boolean NOT NULL)"
        )
        cursor.execute(f"DELETE FROM {SIDE_EFFECTS}")
        cursor.execute(f"DELETE FROM {EXECUTIONS}")
