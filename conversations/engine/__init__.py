"""The engine: the tool loop and the event log. No HTTP, no templates.

This module is its public surface for the transports (API, websocket consumers, admin,
tasks, web pages), with the event log's own face, `conversations.engine.eventlog`; the
other modules here are the engine's insides (an import-linter contract keeps them so).

- runs.py: run_start, run_cancel, chat_start and the one run_finish every ending uses
- branching.py: edits and regenerations (a new branch and the run answering on it)
- loop.py: the one model-and-tools loop, writing to a sink: a stored run's step
  (step.py) or a run kept nowhere (unstored.py)
- runner.py: one step of a stored run (a model call or the pending tools), under a lease
- model_call.py, inflight.py: a model call's reply streams holding no worker thread
- watchdog.py: the periodic sweep that restarts runs whose worker died
- stateless.py: a chat whose whole history travels with the request, stored nowhere
- responses.py: responses of the OpenAI-compatible API (a run with its request's
  instructions, client tools and settings), and those that store nothing
- compaction.py: a conversation's context summarised by one model call, nothing stored
- llm/: the providers (OpenAI-compatible, the offline demo) and stream parsing
- eventlog/: each run's append-only event log on a Redis Stream
- following.py: a run followed for as long as the caller's credential allows (the HTTP
  streams)
"""

from conversations.engine.branching import message_edit, reply_regenerate
from conversations.engine.compaction import Compacted, context_compact
from conversations.engine.following import run_follow_as, run_follow_as_sync
from conversations.engine.inflight import replies_drain
from conversations.engine.llm import provider_get, provider_is_demo
from conversations.engine.llm.base import GenerationSettings, ProviderError
from conversations.engine.responses import ResponseAsk, response_start, response_unstored
from conversations.engine.runner import run_step
from conversations.engine.runs import (
    chat_start,
    run_cancel,
    run_finish,
    run_start,
)
from conversations.engine.stateless import RESET_MESSAGES, stateless_chat
from conversations.engine.watchdog import runs_watchdog

__all__ = [
    "RESET_MESSAGES",
    "Compacted",
    "GenerationSettings",
    "ProviderError",
    "ResponseAsk",
    "chat_start",
    "context_compact",
    "message_edit",
    "provider_get",
    "provider_is_demo",
    "replies_drain",
    "reply_regenerate",
    "response_start",
    "response_unstored",
    "run_cancel",
    "run_finish",
    "run_follow_as",
    "run_follow_as_sync",
    "run_start",
    "run_step",
    "runs_watchdog",
    "stateless_chat",
]
