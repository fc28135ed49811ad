"""Running the project's migrations backwards and forwards in a test, to check what a
migration does to rows made before it."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    """Migrate the test database to `targets`; the executor, for the state it reached."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


def latest() -> list[tuple[str, str]]:
    """The newest migration of every app."""
    return MigrationExecutor(connection).loader.graph.leaf_nodes()
