"""`python manage.py proletarian_worker --queue NAME`: run the TASKS backend's workers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...worker import CannotStart, CheckedCommand, run_workers


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an int >= `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


class Command(CheckedCommand):
    """Run workers for Django tasks until SIGTERM/SIGINT, then drain and exit 0."""

    help = (
        "Run proletarian-di workers for Django tasks until SIGTERM or SIGINT. The first "
        "signal drains in-flight tasks and exits 0; a second one exits at once (tasks still "
        "running are rolled back by the database and run again)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help="Queue to work (repeatable; default: 'default').",
        )
        parser.add_argument(
            "--threads", type=_at_least(1), default=1, help="Worker threads per queue."
        )
        parser.add_argument(
            "--polling-interval-ms",
            type=_at_least(0),
            default=100,
            help="How long an idle worker waits between polls (ms).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.backend(options)
        try:
            code = run_workers(
                options["backend"],
                options["queues"] or ["default"],
                threads=options["threads"],
                polling_interval_ms=options["polling_interval_ms"],
                out=sys.stderr,
            )
        except CannotStart as exc:
            raise CommandError(str(exc)) from None
        if code:
            raise CommandError("workers did not stop cleanly", returncode=code)
