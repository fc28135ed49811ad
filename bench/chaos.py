"""Chaos benchmark: SIGKILL the worker at random moments of a tool-using run.

Each trial starts a real Celery worker and a run whose fake upstream streams some text and
a round of `record_side_effect` calls (sometimes two in parallel, one slow), then a
streamed final answer. After a random delay it SIGKILLs the worker, starts a fresh one and
sweeps the watchdog (as Celery beat would) until the run ends (the recovery time includes
the fresh worker's start), then checks that nothing was lost or done twice. Kill delays
are drawn over the measured length of a run (one run, left alone, is timed first), so
they land inside runs however fast the machine is. Trial i uses seed N+i: `--seed S
--trials 1` replays the trial shown with seed S (at the same share of the run). It runs against
DATABASE_URL (PostgreSQL; SQLite only with --allow-sqlite) and REDIS_URL (an embedded
Valkey when unset), as a throwaway `chaos-*` user whose data is deleted at the end, also
on error. Exit code 1 if any trial failed.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_chaos \\
        .venv/bin/python -m bench.chaos --trials 20 [--seed N]
"""

import argparse
import json
import secrets
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from random import Random
from typing import Any

from bench.common import django_setup, owner_delete, progress

django_setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from accounts.models import User  # noqa: E402
from conversations import (  # noqa: E402
    engine,
    services,
)
from conversations.engine import eventlog, watchdog  # noqa: E402
from conversations.models import Conversation, Message, Run  # noqa: E402
from tests.support.fake_openai import FakeOpenAI, Script  # noqa: E402
from tests.support.redis_server import redis_start  # noqa: E402
from tests.support.side_effects import EXECUTIONS, SIDE_EFFECTS, tables_reset  # noqa: E402
from tests.support.workers import Worker, worker_start  # noqa: E402

STORY = "The quick brown fox jumps over the lazy dog. " * 12
PREAMBLE = ["Let ", "me ", "record ", "that."]
PREAMBLE_RATE = 20.0  # chunks per second of the tool round (text and tool-call pieces)
STORY_RATE = 100.0
ANSWER = Script(text=STORY, tokens_per_second=STORY_RATE)
LATE_SHARE = 1.15  # kill delays reach this far past the expected duration ("after end")
RECOVERY_TIMEOUT = 60.0
SWEEP_SECONDS = 0.3
LOCATIONS = ("before start", "mid-stream", "in tool", "between steps", "after end")


@dataclass(frozen=True)
class Call:
    id: str
    label: str
    seconds: float

    def spec(self) -> tuple[str, str, str]:
        arguments = json.dumps({"label": self.label, "seconds": self.seconds})
        return (self.id, "record_side_effect", arguments)


@dataclass(frozen=True)
class Plan:
    """One trial's script and kill delay, drawn from the trial's RNG."""

    calls: tuple[Call, ...]
    delay: float

    @classmethod
    def draw(cls, rng: Random, trial: int, overhead: float) -> "Plan":
        """`overhead`: the seconds a run takes beyond its scripts (dispatch, steps, a fresh
        worker's first model call), measured once by `overhead_measure`."""
        two = (Call(f"call_{trial}_fast", "fast", 0.1), Call(f"call_{trial}_slow", "slow", 1.2))
        calls = two if rng.random() < 0.5 else (Call(f"call_{trial}_one", "one", 0.3),)
        expected = cls(calls, 0.0).scripted_seconds() + overhead
        return cls(calls, rng.uniform(0.0, LATE_SHARE * expected))

    def scripted_seconds(self) -> float:
        """How long the upstream's scripts and the tools take, with no overhead at all."""
        chunks = len(PREAMBLE) + 4 * len(self.calls)  # a header + 3 argument pieces per call
        tools = sum(call.seconds for call in self.calls)
        return chunks / PREAMBLE_RATE + tools + len(STORY) / 4 / STORY_RATE

    def tool_round(self) -> Script:
        calls = [call.spec() for call in self.calls]
        return Script(text=PREAMBLE, tokens_per_second=PREAMBLE_RATE, tool_calls=calls)


def answering(plan: Plan) -> Callable[[dict[str, Any]], Script]:
    """A deterministic model: the tool round until tool results are in the input, then
    the final answer, so a step retried after a kill gets the same script again."""

    def respond(body: dict[str, Any]) -> Script:
        answered = any(m.get("role") == "tool" for m in body.get("messages", []))
        return ANSWER if answered else plan.tool_round()

    return respond


@dataclass
class Snapshot:
    """The run when the worker died (nothing moves until the next one starts)."""

    active: bool
    log: list[dict[str, Any]]
    messages: list[Message]
    executed: list[str]  # a call id per execution of the tool


@dataclass
class Outcome:
    trial: int
    seed: int
    delay: float
    landed: str = "?"
    recovery: float | None = None
    problems: list[str] = field(default_factory=list)
    logs: str = ""


def rows(sql: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


def stored(run: Run) -> list[Message]:
    return list(Message.objects.filter(conversation_id=run.conversation_id).order_by("seq"))


def snapshot(run: Run) -> Snapshot:
    run.refresh_from_db()
    executed = [call_id for (call_id,) in rows(f"SELECT call_id FROM {EXECUTIONS}")]
    return Snapshot(run.is_active, eventlog.events_all(str(run.id)), stored(run), executed)


def kill_location(before: Snapshot) -> str:
    if not before.active:  # ended in the database; its terminal event may be unpublished
        logged = before.log and before.log[-1]["type"] in eventlog.TERMINAL_TYPES
        return "after end" if logged else "between steps"
    created = [e["message_id"] for e in before.log if e["type"] == eventlog.MESSAGE_CREATED]
    if not created:
        return "before start"
    if created[-1] not in {str(m.id) for m in before.messages}:
        return "mid-stream"
    assistant = [m for m in before.messages if m.role == Message.Role.ASSISTANT][-1]
    answered = {m.tool_call_id for m in before.messages if m.role == Message.Role.TOOL}
    pending = {call["id"] for call in assistant.tool_calls or []} - answered
    return "in tool" if pending & set(before.executed) else "between steps"


def recover(run: Run) -> str | None:
    """Sweep as beat does until the run has ended in the database and in its log (the
    watchdog publishes the terminal event of a worker that died after committing)."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT
    while True:
        run.refresh_from_db()
        last = (eventlog.event_log_last(str(run.id)) or {}).get("type")
        if not run.is_active and last in eventlog.TERMINAL_TYPES:
            return None
        if time.monotonic() > deadline:
            return f"run {run.status}, log ends with {last}, {RECOVERY_TIMEOUT:.0f}s after kill"
        watchdog.runs_watchdog()
        time.sleep(SWEEP_SECONDS)


def problems(run: Run, plan: Plan, before: Snapshot) -> list[str]:
    """Every broken invariant, as a short reason."""
    found: list[str] = []
    messages = stored(run)
    call_ids = [call.id for call in plan.calls]
    shape = [(m.role, [call["id"] for call in m.tool_calls or []]) for m in messages]
    tools: list[tuple[str, list[str]]] = [("tool", [])] * len(call_ids)
    if run.status != Run.Status.COMPLETED:
        found.append(f"run {run.status}: {run.error}")
    if shape != [("user", []), ("assistant", call_ids), *tools, ("assistant", [])]:
        found.append(f"messages {shape}")
    if [m.seq for m in messages] != list(range(1, len(messages) + 1)):
        found.append(f"seq {[m.seq for m in messages]}")
    tool_ids = [m.tool_call_id for m in messages if m.role == Message.Role.TOOL]
    if sorted(tool_ids) != sorted(call_ids):
        found.append(f"tool messages for {sorted(tool_ids)}")
    effects = sorted(rows(f"SELECT call_id, label FROM {SIDE_EFFECTS}"))
    if effects != sorted((call.id, call.label) for call in plan.calls):
        found.append(f"side effects {effects}")
    executions = Counter(call_id for (call_id,) in rows(f"SELECT call_id FROM {EXECUTIONS}"))
    done = [m.tool_call_id for m in before.messages if m.role == Message.Role.TOOL]
    found += [f"{c} (done before the kill) ran {n}x" for c in done if (n := executions[c]) != 1]
    log = eventlog.events_all(str(run.id))
    if [e["sequence_number"] for e in log] != list(range(len(log))):
        found.append("event log has gaps")
    if not log or log[-1]["type"] != eventlog.RUN_COMPLETED:
        found.append(f"log ends with {log[-1]['type'] if log else 'nothing'}")
    texts = eventlog.message_texts(log)
    for message in messages:
        if message.role == Message.Role.ASSISTANT and texts.get(str(message.id)) != message.content:
            found.append(f"streamed text of seq {message.seq} differs from the stored one")
    if not messages or messages[-1].content != STORY:
        found.append("final text differs from the scripted one")
    return found


def conversation_prepare(owner: User, upstream: FakeOpenAI, plan: Plan) -> Conversation:
    """Fresh tool tables, the upstream scripted for `plan`, a conversation with the tool."""
    tables_reset()
    upstream.reset()
    upstream.respond_with(answering(plan))
    conversation = services.conversation_create(owner=owner, model="gpt-test")
    Conversation.objects.filter(pk=conversation.pk).update(
        tools=[*conversation.tools, "record_side_effect"]
    )
    return conversation


def overhead_measure(owner: User, upstream: FakeOpenAI) -> float:
    """One run left alone: its duration beyond the scripts. Kill delays are drawn over the
    real length of a run, so they land inside it however fast this machine and the code
    are (a fixed guess once sent most kills past the end)."""
    plan = Plan((Call("call_calibration", "calibration", 0.3),), 0.0)
    conversation = conversation_prepare(owner, upstream, plan)
    started = worker(upstream)
    try:
        began = time.monotonic()
        _, run = engine.run_start(conversation=conversation, content="Record, then tell")
        if stuck := recover(run):
            raise RuntimeError(f"the calibration run did not end: {stuck}")
        return max(0.1, time.monotonic() - began - plan.scripted_seconds())
    finally:
        started.stop()
        started.log_path.unlink(missing_ok=True)


def trial(number: int, seed: int, owner: User, upstream: FakeOpenAI, overhead: float) -> Outcome:
    plan = Plan.draw(Random(seed), number, overhead)
    outcome = Outcome(number, seed, plan.delay)
    conversation = conversation_prepare(owner, upstream, plan)
    workers: list[Worker] = []
    try:
        workers.append(worker(upstream))
        _, run = engine.run_start(conversation=conversation, content="Record, then tell")
        time.sleep(plan.delay)
        workers[0].kill()
        killed_at = time.monotonic()
        before = snapshot(run)
        outcome.landed = kill_location(before)
        workers.append(worker(upstream))
        if stuck := recover(run):
            outcome.problems.append(stuck)
        else:
            done = outcome.landed == "after end"
            outcome.recovery = 0.0 if done else time.monotonic() - killed_at
            outcome.problems += problems(run, plan, before)
    except Exception:
        outcome.problems.append(traceback.format_exc().strip().splitlines()[-1])
        outcome.logs = traceback.format_exc()
    finally:
        for i, started in enumerate(workers):
            started.stop()
            if outcome.problems:
                outcome.logs += f"\n--- worker {i + 1} log ---\n{started.log()[-6000:]}"
            started.log_path.unlink(missing_ok=True)
    return outcome


def worker(upstream: FakeOpenAI) -> Worker:
    env = {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": upstream.base_url}
    env |= {"OPENAI_MAX_RETRIES": "0", "PARLEY_RUN_LEASE_SECONDS": "2"}
    return worker_start(
        redis_url=settings.REDIS_URL, env=env, include="tests.support.side_effect_tools"
    )


@contextmanager
def redis_server() -> Iterator[str]:
    url, stop = redis_start()
    try:
        yield url
    finally:
        stop()


def cleanup(owner: User) -> None:
    owner_delete(owner)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {SIDE_EFFECTS}")
        cursor.execute(f"DROP TABLE IF EXISTS {EXECUTIONS}")
    progress("dropped the tool tables")


ROW = "{:>5}  {:>8}  {:>8}  {:<13}  {:>10}  {}"


def row(outcome: Outcome) -> str:
    recovery = "-" if outcome.recovery is None else f"{outcome.recovery:.2f}"
    result = "PASS" if not outcome.problems else f"FAIL {outcome.problems[0]}"
    delay = f"{outcome.delay * 1000:.0f}"
    return ROW.format(outcome.trial, outcome.seed, delay, outcome.landed, recovery, result)


def report(outcomes: list[Outcome]) -> None:
    failed = [o for o in outcomes if o.problems]
    print(f"\ntrials {len(outcomes)}, passed {len(outcomes) - len(failed)}, failed {len(failed)}")
    landed = Counter(o.landed for o in outcomes)
    lost = Counter(o.landed for o in failed)
    for location in [*LOCATIONS, *sorted(set(landed) - set(LOCATIONS))]:
        print(f"  {location:<13} {landed[location]:>3}  ({lost[location]} failed)")
    for outcome in failed:
        print(f"\n=== trial {outcome.trial} (seed {outcome.seed}) failed ===")
        print("\n".join(outcome.problems), outcome.logs, sep="\n")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="how many kills")
    seed = secrets.randbelow(1_000_000)
    parser.add_argument("--seed", type=int, default=seed, help="seed of trial 1 (else random)")
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    return args


def main() -> int:
    args = parse_args()
    if connection.vendor != "postgresql" and not args.allow_sqlite:
        message = "set DATABASE_URL=postgres://... or pass --allow-sqlite"
        print(
            f"bench.chaos expects PostgreSQL, not {connection.vendor}: {message}", file=sys.stderr
        )
        return 2
    call_command("migrate", interactive=False, verbosity=0)
    outcomes: list[Outcome] = []
    with ExitStack() as stack:
        redis_url = stack.enter_context(redis_server())
        stack.enter_context(upstream := FakeOpenAI())
        owner = User.objects.create_user(username=f"chaos-{secrets.token_hex(6)}")
        stack.callback(cleanup, owner)
        database = f"{connection.vendor} {connection.settings_dict['NAME']}"
        print(f"bench.chaos: {args.trials} trials, seed {args.seed}, {database}, {redis_url}")
        overhead = overhead_measure(owner, upstream)
        print(f"a run takes {overhead:.2f} s beyond its scripts (one run, not killed)\n")
        print(ROW.format("trial", "seed", "kill ms", "landed", "recovery s", "outcome"))
        for number in range(1, args.trials + 1):
            outcomes.append(trial(number, args.seed + number - 1, owner, upstream, overhead))
            print(row(outcomes[-1]), flush=True)
        report(outcomes)
    return 1 if any(o.problems for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
