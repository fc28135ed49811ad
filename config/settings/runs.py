"""The tool loop: runs' leases, rounds and attempts, workers' threads, tools and tool
servers."""

from config.settings.env import env_int, env_list

# A step holds its run's lease this long and renews it while it works; a lease left to
# expire (killed worker) lets the watchdog hand the run to another worker.
PARLEY_RUN_LEASE_SECONDS = env_int("PARLEY_RUN_LEASE_SECONDS", 30)
# Model calls per run before it stops as `incomplete`.
PARLEY_RUN_MAX_ITERATIONS = env_int("PARLEY_RUN_MAX_ITERATIONS", 8)
# The models (shell-style patterns, matched without regard to case) sent a response's
# `reasoning.effort` as `reasoning_effort`; other models would refuse it, so it is not sent.
PARLEY_REASONING_EFFORT_MODELS = env_list(
    "PARLEY_REASONING_EFFORT_MODELS", ["o1*", "o3*", "o4*", "gpt-5*"]
)
# Step threads of one worker doing database work at the same time (see conversations.engine.turns).
PARLEY_WORKER_BUSY_STEPS = env_int("PARLEY_WORKER_BUSY_STEPS", 2)
# Threads of a worker storing replies whose stream ended (they take turns as above).
PARLEY_WORKER_STORE_THREADS = env_int("PARLEY_WORKER_STORE_THREADS", 4)
# At a worker's shutdown, how long replies still streaming may go on to their end; the
# others are stopped and their runs queued again for the next worker. Below the usual
# grace period before a SIGKILL (a container's 10 s), so the hand-back still happens.
PARLEY_WORKER_DRAIN_SECONDS = env_int("PARLEY_WORKER_DRAIN_SECONDS", 8)
# Times one step may be started without finishing before the run fails.
PARLEY_RUN_MAX_ATTEMPTS = env_int("PARLEY_RUN_MAX_ATTEMPTS", 3)
# A queued run no worker picked up within this time is enqueued again.
PARLEY_RUN_QUEUED_GRACE_SECONDS = env_int("PARLEY_RUN_QUEUED_GRACE_SECONDS", 30)
PARLEY_TOOL_TIMEOUT_SECONDS = env_int("PARLEY_TOOL_TIMEOUT_SECONDS", 20)
PARLEY_TOOL_OUTPUT_MAX_CHARS = env_int("PARLEY_TOOL_OUTPUT_MAX_CHARS", 16_000)
# A tool server's tool list is read again after this many seconds (conversations/tools/servers.py).
PARLEY_TOOL_SERVER_LIST_SECONDS = env_int("PARLEY_TOOL_SERVER_LIST_SECONDS", 60)
