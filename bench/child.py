"""A worker in its own process, driven by the benchmark over stdin/stdout.

Commands, one per line: `go` (start), `rss` (report), `stop` (stop, report, exit).
Replies are JSON lines. End of input stops the worker too, so a dead parent
never leaves it running.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .db import database
from .workers import make_worker


def rss() -> int:
    """Resident set size of this process, in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def reply(**data: object) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.child")
    parser.add_argument("--kind", choices=["postgresql", "mysql"], required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--impl", choices=["ours", "plain"], required=True)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--interval-ms", type=int, default=10)
    args = parser.parse_args(argv)
    worker = make_worker(
        args.impl, database(args.kind, args.url), args.threads, args.interval_ms / 1000
    )
    reply(event="ready", rss=rss())
    started = False
    try:
        for line in sys.stdin:
            command = line.strip()
            if command == "go" and not started:
                worker.start()
                started = True
                reply(event="started", rss=rss(), cpu=time.process_time())
            elif command == "rss":
                reply(event="rss", rss=rss(), done=worker.done(), cpu=time.process_time())
            elif command == "stop":
                break
    finally:
        done, size = worker.done(), rss()
        if started:
            worker.stop()
        reply(event="stopped", rss=size, done=done)


if __name__ == "__main__":
    main()
