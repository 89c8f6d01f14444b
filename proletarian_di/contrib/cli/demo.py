"""`proletarian-di demo`: the reference demo container on a throwaway PostgreSQL."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from types import FrameType, ModuleType
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ... import admin
from ..._store.urls import url_dialect
from ...mysql import mask
from ...schema import install_schema
from ...worker import QueueWorker
from ._app import (
    CLIError,
    ExitCode,
    _connection,
    _escape,
    _guarded,
    _log_level,
    app,
    console,
)

# demo -----------------------------------------------------------------------------------------


def _load_demo_module() -> ModuleType:
    """`proletarian_di.contrib.demo`, imported on use so other commands start without it."""
    from .. import demo as module

    return module


@contextlib.contextmanager
def _demo_database(url: str | None) -> Iterator[str]:
    if url:
        if url_dialect(url) != "postgresql":
            raise CLIError(
                "the demo runs on PostgreSQL: pass a postgresql:// URL or none "
                "(then it starts a built-in server)",
                ExitCode.USAGE,
            )
        console.print(f"Using PostgreSQL at {_escape(mask(url))}")
        yield url
        return
    from ..embedded import EmbeddedPostgresUnavailable, embedded_postgres

    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        try:
            with console.status("Starting a throwaway PostgreSQL server (embedded-postgres)…"):
                embedded_url = stack.enter_context(embedded_postgres())
        except EmbeddedPostgresUnavailable as exc:
            raise CLIError(str(exc), ExitCode.DATABASE) from None
        console.print(
            f"[green]✓[/] started a throwaway PostgreSQL server in "
            f"{time.monotonic() - started:.1f}s (deleted on exit)"
        )
        yield embedded_url
        console.print("Stopping the PostgreSQL server and deleting its data…")


@contextlib.contextmanager
def _terminated_as_interrupted() -> Iterator[None]:
    """SIGTERM and SIGHUP end the demo as Ctrl-C does, so that its throwaway server stops and
    its data is deleted: Python's default would end the process at once and leave both (the
    server runs in a session of its own, out of reach of a signal to the demo's group)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {
        sig: signal.signal(sig, interrupt)
        for sig in (signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(sig) == signal.SIG_DFL
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@app.command(rich_help_panel="Getting started")
@_guarded
def demo(
    jobs: Annotated[
        int, typer.Option("--jobs", "-n", help="How many accounts sign up (one job each).", min=1)
    ] = 1_000,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            "-d",
            envvar="PROLETARIAN_DEMO_DATABASE_URL",
            help="Use this PostgreSQL instead of a throwaway built-in server "
            "(creates the schemas proletarian and demo).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Watch the queue work, on a throwaway PostgreSQL: start here.

    Sign-ups enqueue jobs in their own transactions; workers on two queues
    run them; some fail and retry, a few fail for good. Runs the reference
    container in proletarian_di/contrib/demo.py on a throwaway PostgreSQL server
    (package embedded-postgres), so it needs no database server.
    """
    module = _load_demo_module()
    console.rule("[bold]proletarian-di demo")
    quiet = _log_level("critical")
    with (
        _terminated_as_interrupted(),
        quiet,
        _demo_database(database_url) as url,
        _connection(url) as conn,
    ):
        install_schema(conn)
        module.create_tables(conn)
        _run_demo(module, url, conn, jobs)


def _run_demo(module: ModuleType, url: str, conn: Any, count: int) -> None:
    from ...lifecycle import container_workers, init_resources, shutdown_resources

    per_queue: dict[str, int] = module.jobs_per_queue(count)
    queues = tuple(per_queue)
    started = time.monotonic()
    batch = 100
    for first in range(0, count, batch):
        module.sign_up(conn, range(first, min(first + batch, count)))
    console.print(
        f"[green]✓[/] {count} accounts signed up in {time.monotonic() - started:.2f}s: each "
        "account row and its job committed in one transaction "
        f"({', '.join(f'{n} on {q!r}' for q, n in per_queue.items())})"
    )

    container = module.DemoContainer()
    container.config.database_url.from_value(url)
    init_resources(container)
    started = time.monotonic()
    try:
        workers = {w.options.queue: w for w in container_workers(container)}
        progress = Progress(
            TextColumn("{task.description:<9}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "[yellow]{task.fields[retried]} retried[/] [red]{task.fields[failed]} failed"
            ),
            TimeElapsedColumn(),
            console=console,
        )
        tasks = {q: progress.add_task(q, total=per_queue[q], retried=0, failed=0) for q in queues}

        def refresh() -> None:
            for q in queues:
                done = workers[q].summary()
                progress.update(
                    tasks[q],
                    completed=done["succeeded"] + done["failed"],
                    retried=done["retried"],
                    failed=done["failed"],
                )

        with progress:
            while admin.waiting(conn, queues):
                conn.rollback()
                refresh()
                time.sleep(0.05)
            refresh()
        elapsed = time.monotonic() - started
    finally:
        shutdown_resources(container)
    _demo_summary(workers, elapsed, conn)


def _demo_summary(workers: dict[str, QueueWorker], elapsed: float, conn: Any) -> None:
    table = Table(title="Summary", title_justify="left")
    for name in ("Queue", "Succeeded", "Failed", "Retried", "Jobs/s"):
        table.add_column(name, justify="left" if name == "Queue" else "right")
    totals = {"succeeded": 0, "failed": 0, "retried": 0}
    for queue, w in workers.items():
        done = w.summary()
        for key in totals:
            totals[key] += done[key]
        finished = done["succeeded"] + done["failed"]
        table.add_row(
            queue,
            f"[green]{done['succeeded']}",
            f"[red]{done['failed']}",
            f"[yellow]{done['retried']}",
            f"{finished / elapsed:,.0f}",
        )
    finished = totals["succeeded"] + totals["failed"]
    table.add_section()
    table.add_row(
        "[bold]all",
        f"[bold green]{totals['succeeded']}",
        f"[bold red]{totals['failed']}",
        f"[bold yellow]{totals['retried']}",
        f"[bold]{finished / elapsed:,.0f}",
    )
    failures = Table(
        title="Failure archive (latest), with each job's stored error", title_justify="left"
    )
    for name in ("Queue", "Job type", "Tries", "Last error"):
        failures.add_column(name, justify="right" if name == "Tries" else "left")
    latest = [admin.get_job(conn, row[0]) for row in admin.recent_failures(conn, 5)]
    conn.rollback()
    for job in filter(None, latest):
        why = (job.error or "").partition("\n")[0]
        failures.add_row(job.queue, job.job_type, str(job.attempts), f"[red]{_escape(why)}")
    console.print(Group(table, failures))
    console.print(
        f"{finished} jobs in {elapsed:.2f}s. Every job ran in its own transaction: claimed with "
        "SELECT … FOR UPDATE SKIP LOCKED, run, then archived as success or failure."
    )
    console.print(
        "The system is proletarian_di/contrib/demo.py; run your own with "
        "[bold]proletarian-di worker yourapp.containers:Container[/]."
    )
