"""Run the emulator on its own: `python -m testing.apiserver [--port N] [--crds]`.

Prints the URL on the first line of stdout, then serves until SIGINT/SIGTERM or until stdin
closes (so that it never outlives the process that started it). Test hooks are served under
`/_emulator/` (see `KubeApiHandler._control`); `process.ApiServerProcess` drives this.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .server import ApiServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.apiserver")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--crds", action="store_true", help="install our CRDs")
    parser.add_argument("--bookmark-interval", type=float, default=5.0)
    parser.add_argument("--history-size", type=int, default=1000)
    parser.add_argument("--event-log-size", type=int, default=10_000)
    args = parser.parse_args(argv)

    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())

    def watch_stdin() -> None:
        sys.stdin.read()  # returns at EOF: the parent has gone
        done.set()

    server = ApiServer(
        port=args.port,
        crds=args.crds,
        bookmark_interval=args.bookmark_interval,
        history_size=args.history_size,
        event_log_size=args.event_log_size,
    )
    with server:
        print(server.url, flush=True)
        threading.Thread(target=watch_stdin, daemon=True).start()
        while not done.wait(1.0):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
