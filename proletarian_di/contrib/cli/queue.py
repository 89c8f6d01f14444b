"""`proletarian-di queue`: pause and resume a queue's workers, in every process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from ... import admin
from ..._store.dialects import dialect_of
from ..._store.tables import (
    DEFAULT_ARCHIVED_JOB_TABLE,
    DEFAULT_JOB_TABLE,
    paused_table,
    periodic_table,
)
from ._app import (
    ArchivedJobTable,
    DatabaseURL,
    JobTable,
    _admin,
    _escape,
    _guarded,
    command_group,
    console,
    err,
    refuse_mixed_tables,
)

queue_app = command_group("queue", "Pause and resume a queue's workers.", "Operate")

SHOWN_QUEUES = 20
"""At most this many known queues named in the warning about an unknown one."""

QueueName = Annotated[str, typer.Argument(help="The queue's name.", show_default=False)]


@queue_app.command("pause")
@_guarded
def pause(
    ctx: typer.Context,
    name: QueueName,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Pause a queue: its workers, in every process, finish the jobs in hand and claim no
    more until it is resumed. Enqueueing goes on; `stats` shows it paused. A queue no job,
    schedule or pause has named yet is paused too (ahead of its first job), with a warning
    on stderr naming the queues there are: a typo, perhaps."""
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    _change(admin.pause_queue, name, database_url, job_table, archived_job_table)


@queue_app.command("resume")
@_guarded
def resume(
    ctx: typer.Context,
    name: QueueName,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Resume a paused queue: its workers claim its jobs again."""
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    _change(admin.resume_queue, name, database_url, job_table, archived_job_table)


_SAID = {
    admin.pause_queue: ("paused", "was paused already"),
    admin.resume_queue: ("resumed", "was not paused"),
}


def _change(
    change: Callable[..., bool], name: str, url: str | None, job_table: str, archive: str
) -> None:
    """Pause or resume the queue, commit, and say what changed."""
    with _admin(url, job_table, archive) as operator:
        known = operator.read(known_queues)
        changed = operator.write(change, name)
    done, unchanged = _SAID[change]
    console.print(f"queue {_escape(name)} {done if changed else unchanged}")
    if name not in known:
        shown = sorted(known)[:SHOWN_QUEUES]
        listed = ", ".join(f"'{queue}'" for queue in shown) or "none"
        if len(known) > len(shown):
            listed += f" and {len(known) - len(shown)} more"
        err.print(_escape(f"warning: no job has ever used queue '{name}'; known queues: {listed}"))


def known_queues(conn: Any, *, tables: admin.Tables) -> set[str]:
    """Every queue named by a waiting or archived job, a schedule or a pause."""
    dialect = dialect_of(conn, tables)
    named_in = (
        tables.job_table,
        tables.archived_job_table,
        periodic_table(tables.job_table),
        paused_table(tables.job_table),
    )
    sql = " UNION ".join(f"SELECT queue FROM {table}" for table in named_in)
    return {queue for (queue,) in dialect.fetchall(conn, sql)}
