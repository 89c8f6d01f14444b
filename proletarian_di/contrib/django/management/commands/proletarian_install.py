"""`python manage.py proletarian_install`: create the queue tables and the results table."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from ...results import install
from ...worker import CannotStart, CheckedCommand, check_database


class Command(CheckedCommand):
    """Install or upgrade the tables of a TASKS backend; safe to run any number of times."""

    help = "Create (or upgrade) the proletarian-di queue tables and the Django results table."

    def handle(self, *args: Any, **options: Any) -> None:
        backend = self.backend(options)
        try:
            check_database(backend)
        except CannotStart as exc:
            raise CommandError(str(exc)) from None
        install(backend.database, backend.job_table, backend.archived_job_table)
        self.stdout.write(
            f"installed {backend.job_table}, {backend.archived_job_table} and "
            f"{backend.job_table}_results on database {backend.database!r}"
        )
