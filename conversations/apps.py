from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "conversations"

    def ready(self) -> None:
        # The built-in tools register themselves on import; they use the services, so
        # they load once every model is ready. The engine's runs module connects to the
        # domain's `runs_ended` signal: deleted conversations end their runs' event logs.
        from conversations import metrics
        from conversations.engine import runs  # noqa: F401
        from conversations.models import RUN_TERMINAL_STATUSES
        from conversations.tools import builtins  # noqa: F401
        from conversations.tools.registry import tool_source_add
        from conversations.tools.servers import ServerTools

        # Tool servers' tools join the registry's, looked up per user.
        tool_source_add(ServerTools())
        # /metrics shows every way a run can end from the start, at zero.
        metrics.run_endings_known(RUN_TERMINAL_STATUSES)
