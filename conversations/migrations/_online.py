"""An operation whose schema change PostgreSQL makes differently, without blocking writers.

`OnPostgresql(state_operations=[...], database_operations=[...])` changes the migration
state as its state operations say. On PostgreSQL the database gets `database_operations`
(the same change made online: an index built CONCURRENTLY, NOT NULL proved by a check
constraint validated while writes go on); on every other database the state operations
make their own schema change, as Django would have made it.
"""

from django.db import migrations


class OnPostgresql(migrations.SeparateDatabaseAndState):
    def _operations(self, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            return self.database_operations
        return self.state_operations

    def database_forwards(self, app_label, schema_editor, from_state, to_state) -> None:
        for operation in self._operations(schema_editor):
            to_state = from_state.clone()
            operation.state_forwards(app_label, to_state)
            operation.database_forwards(app_label, schema_editor, from_state, to_state)
            from_state = to_state

    def database_backwards(self, app_label, schema_editor, from_state, to_state) -> None:
        operations = self._operations(schema_editor)
        to_states = {}
        for operation in operations:
            to_states[operation] = to_state
            to_state = to_state.clone()
            operation.state_forwards(app_label, to_state)
        for operation in reversed(operations):
            from_state = to_state
            to_state = to_states[operation]
            operation.database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return "Online on PostgreSQL: " + "; ".join(op.describe() for op in self.state_operations)
