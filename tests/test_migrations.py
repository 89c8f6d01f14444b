"""Schema migrations from Proletarian's own tables, with jobs in them, on both databases."""

from __future__ import annotations

import contextlib
import threading
import uuid
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest

from proletarian_di import SchemaError, create_queue_worker, enqueue, enqueue_many, process_next_job
from proletarian_di.schema import (
    LATEST,
    MIGRATIONS,
    WORKERS_NEED,
    _ddl,
    migration_file,
    schema_sql,
    schema_version,
    statements,
    upgrade_schema,
    version_table,
)

from backends import Events, enqueue_committed, wait_until

ROOT = Path(__file__).resolve().parent.parent
OLD, FRESH, REFERENCE = "proletarian_old", "proletarian_fresh", "proletarian_ref"


def tables(schema: str) -> dict[str, str]:
    return {"job_table": f"{schema}.job", "archived_job_table": f"{schema}.archived_job"}


def drop(backend: Any, schema: str) -> None:
    if backend.name == "mysql":
        backend.execute(f"DROP DATABASE IF EXISTS {schema}")
    else:
        backend.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def scratch(backend: Any) -> Any:
    """Empty schemas: one for old tables to upgrade, one for a fresh install, one for
    tables as the steps leave them."""
    for schema in (OLD, FRESH, REFERENCE):
        drop(backend, schema)
    yield backend
    for schema in (OLD, FRESH, REFERENCE):
        drop(backend, schema)


def run_sql(backend: Any, sql: str, time_zone: str | None = None) -> None:
    with contextlib.closing(backend.connect()) as conn:
        cursor = conn.cursor()
        if time_zone:
            cursor.execute("SET time_zone = %s", (time_zone,))
        for statement in statements(sql):
            cursor.execute(statement)
        conn.commit()


def create_at(backend: Any, version: int, schema: str = OLD) -> None:
    """The tables as the first `version` steps leave them (step 1: Proletarian's own)."""
    for migration in MIGRATIONS[backend.name][:version]:
        run_sql(backend, migration.sql(**tables(schema)))


def put_proletarian_job(backend: Any, n: int) -> None:
    """A job as a Proletarian (Clojure) worker in UTC+2 would have written it."""
    job_id = uuid.uuid4()
    key = job_id.bytes if backend.name == "mysql" else job_id
    with contextlib.closing(backend.connect()) as conn:
        cursor = conn.cursor()
        if backend.name == "mysql":
            cursor.execute("SET time_zone = '+02:00'")
        cursor.execute(
            f"INSERT INTO {OLD}.job (job_id, queue, job_type, payload, attempts, enqueued_at, "
            "process_at) VALUES (%s, 'default', 'old_job', %s, 0, "
            "'2020-01-01 14:00:00+02:00', '2020-01-01 14:00:00+02:00')"
            if backend.name == "postgresql"
            else f"INSERT INTO {OLD}.job VALUES (%s, 'default', 'old_job', %s, 0, "
            "'2020-01-01 14:00:00', '2020-01-01 14:00:00')",
            (key, f'{{"n": {n}}}'),
        )
        conn.commit()


def catalog(backend: Any, schema: str) -> list[tuple[Any, ...]]:
    """Every table of the schema: its columns (type, nullability, default, collation), its
    indexes and (MySQL) its engine and collation, from the catalog."""
    if backend.name == "mysql":
        where = "WHERE table_schema = %s"
        return (
            backend.query(
                "SELECT table_name, column_name, column_type, is_nullable, collation_name, "
                f"column_default, extra, generation_expression FROM information_schema.columns "
                f"{where} ORDER BY table_name, column_name",
                (schema,),
            )
            + backend.query(
                "SELECT table_name, index_name, non_unique, seq_in_index, column_name, sub_part "
                f"FROM information_schema.statistics {where} "
                "ORDER BY table_name, index_name, seq_in_index",
                (schema,),
            )
            + backend.query(
                "SELECT table_name, engine, table_collation FROM information_schema.tables "
                f"{where} ORDER BY table_name",
                (schema,),
            )
        )
    columns = backend.query(
        "SELECT table_name, column_name, data_type, is_nullable, "
        "replace(column_default, %s, 'X.') "  # a serial's sequence is in the schema
        "FROM information_schema.columns WHERE table_schema = %s "
        "ORDER BY table_name, column_name",
        (f"{schema}.", schema),
    )
    indexes = backend.query(
        "SELECT tablename, indexname, replace(indexdef, %s, 'X.') FROM pg_indexes "
        "WHERE schemaname = %s ORDER BY tablename, indexname",
        (f"{schema}.", schema),
    )
    return columns + indexes


def tables_only(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A catalog without the version table, which an upgrade creates when it records one."""
    return [row for row in rows if row[0] != "job_schema_version"]


def version_of(backend: Any, schema: str) -> int:
    with contextlib.closing(backend.connect()) as conn:
        return schema_version(conn, **tables(schema))


def upgrade(backend: Any, schema: str = OLD, **options: Any) -> list[Any]:
    with contextlib.closing(backend.connect()) as conn:
        if backend.name == "mysql":
            with conn.cursor() as cursor:
                cursor.execute("SET time_zone = '+05:00'")  # the steps must not depend on it
        return upgrade_schema(conn, **tables(schema), **options)


def test_proletarians_tables_with_jobs_upgrade_to_a_fresh_install_and_lose_nothing(scratch):
    backend = scratch
    create_at(backend, 1)
    for n in range(3):
        put_proletarian_job(backend, n)
    assert version_of(backend, OLD) == 1

    applied = upgrade(backend)
    upgrade(backend, FRESH)

    assert [m.version for m in applied] == list(range(2, LATEST[backend.name] + 1))
    assert version_of(backend, OLD) == LATEST[backend.name]
    assert catalog(backend, OLD) == catalog(backend, FRESH)
    (when,) = {row[0] for row in backend.query(f"SELECT process_at FROM {OLD}.job")}
    assert (when.astimezone(timezone.utc) if when.tzinfo else when).hour == 12, "in UTC"
    source = backend.pool(2)
    seen: list[Any] = []
    try:
        while process_next_job(source, lambda t, p: seen.append(p["n"]), **tables(OLD)):
            pass
    finally:
        source.close()
    assert sorted(seen) == [0, 1, 2]
    assert backend.query(f"SELECT status, attempts FROM {OLD}.archived_job") == [("success", 1)] * 3


def test_each_step_keeps_the_jobs_and_records_its_version(scratch):
    backend = scratch
    create_at(backend, 1)
    put_proletarian_job(backend, 7)
    for migration in MIGRATIONS[backend.name][1:]:
        run_sql(backend, migration.sql(**tables(OLD)))
        assert version_of(backend, OLD) == migration.version
        assert backend.query(f"SELECT COUNT(*) FROM {OLD}.job")[0][0] == 1


def test_the_sql_files_are_the_rendered_steps_and_give_a_fresh_install(scratch):
    backend = scratch
    folder = ROOT / "sql" / "migrations" / backend.name
    files = sorted(folder.glob("*.sql"))
    assert [f.name for f in files] == [m.filename for m in MIGRATIONS[backend.name]]
    for path, migration in zip(files, MIGRATIONS[backend.name], strict=True):
        assert path.read_text() == migration_file(migration)
        run_sql(
            backend,
            path.read_text()
            .replace("proletarian.", f"{OLD}.")
            .replace("table_schema = 'proletarian'", f"table_schema = '{OLD}'")
            .replace("DATABASE IF NOT EXISTS proletarian", f"DATABASE IF NOT EXISTS {OLD}")
            .replace("SCHEMA IF NOT EXISTS proletarian", f"SCHEMA IF NOT EXISTS {OLD}"),
        )
    upgrade(backend, FRESH)
    assert catalog(backend, OLD) == tables_only(catalog(backend, FRESH)), "no version recorded"
    assert version_of(backend, OLD) == LATEST[backend.name], "detected from the catalog"


def test_upgrade_dry_run_changes_nothing_and_a_second_upgrade_is_a_no_op(scratch):
    backend = scratch
    create_at(backend, 1)
    pending = upgrade(backend, dry_run=True)
    assert [m.version for m in pending] == list(range(2, LATEST[backend.name] + 1))
    assert version_of(backend, OLD) == 1
    assert upgrade(backend)
    assert upgrade(backend) == []
    assert version_of(backend, OLD) == LATEST[backend.name]


def record(backend: Any, schema: str, version: int) -> None:
    """The version table as an upgrade leaves it once step `version` has landed."""
    table = version_table(f"{schema}.job")
    run_sql(backend, _ddl.VERSION_TABLE[backend.name].format(version_table=table))
    with contextlib.closing(backend.connect()) as conn:
        conn.cursor().execute(
            _ddl.RECORD_VERSION[backend.name].format(version_table=table),
            (f"{schema}.job", version),
        )
        conn.commit()


def interruptions(step: list[str]) -> list[int]:
    """How many of a step's statements an interruption may have applied: none, and each
    count that ends with a change (a MySQL step's `SET @ddl`, `PREPARE` and `DEALLOCATE`
    only set the session's state, which an interruption loses with the session)."""
    session = ("SET @ddl", "PREPARE ddl", "DEALLOCATE PREPARE")
    return [0] + [n for n, sql in enumerate(step, start=1) if not sql.startswith(session)]


SHARES = 3
"""Into how many tests the steps are dealt, one for each test process."""
EVERY_STATEMENT = [
    pytest.param(False, id="sampled"),
    pytest.param(True, id="every-statement", marks=pytest.mark.slow),
]


def sample(points: list[int], every: bool) -> list[int]:
    """The interruption points to try: all of them, or (in every run) the first two, the
    middle one and the last, which leave a step not begun, begun, half done and all but
    recorded, at a fraction of the cost (`--slow` tries every one)."""
    if every or len(points) <= 4:
        return points
    return sorted({points[0], points[1], points[len(points) // 2], points[-1]})


@pytest.mark.parametrize("every", EVERY_STATEMENT)
@pytest.mark.parametrize("share", range(SHARES), ids=lambda n: f"steps-{n + 1}-of-{SHARES}")
def test_a_step_interrupted_after_any_statement_is_finished_by_the_next_upgrade(
    scratch, share, every
):
    """Every step, stopped after each of its statements (MySQL commits each DDL statement;
    a step file run by hand stops where it failed): the catalog never shows the step as
    applied before it is (files run by hand resume at it), and the next upgrade, from the
    version an interrupted upgrade recorded, completes and leaves what a fresh install
    creates. Every third step in each share (`share`), so that three test processes share
    the work."""
    backend = scratch
    upgrade(backend, FRESH)
    fresh = catalog(backend, FRESH)
    in_full: dict[int, list[tuple[Any, ...]]] = {}

    def as_after(version: int) -> list[tuple[Any, ...]]:
        """The catalog of the tables the first `version` steps make, each run in full."""
        if version not in in_full:
            create_at(backend, version, REFERENCE)
            in_full[version] = catalog(backend, REFERENCE)
            drop(backend, REFERENCE)
        return in_full[version]

    wrong = []
    for migration in MIGRATIONS[backend.name][share::SHARES]:
        version = migration.version
        step = statements(migration.sql(**tables(OLD)))
        for done in sample(interruptions(step), every):
            drop(backend, OLD)
            create_at(backend, version - 1)
            run_sql(backend, ";\n".join(step[:done]))
            detected = version_of(backend, OLD)
            if detected == version and catalog(backend, OLD) != as_after(version):
                wrong.append((version, done, "detected as applied"))
            elif detected not in (version - 1, version):
                wrong.append((version, done, f"detected as version {detected}"))
            if version > 1:
                record(backend, OLD, version - 1)
            upgrade(backend)
            if catalog(backend, OLD) != fresh or version_of(backend, OLD) != LATEST[backend.name]:
                wrong.append((version, done, "not finished"))
    assert wrong == [], "(step, statements applied, what went wrong)"


@pytest.mark.parametrize("every", EVERY_STATEMENT)
def test_a_fresh_install_interrupted_after_any_statement_is_finished_by_the_next_upgrade(
    scratch, every
):
    """sql/<database>.sql run by hand, stopped after each statement (the upgrade itself runs
    it in one transaction on PostgreSQL, statement by statement on MySQL)."""
    backend = scratch
    upgrade(backend, FRESH)
    fresh = tables_only(catalog(backend, FRESH))
    full = statements(schema_sql(backend.name, **tables(OLD)))
    differ = []
    for done in sample(list(range(len(full))), every):
        drop(backend, OLD)
        run_sql(backend, ";\n".join(full[:done]))
        upgrade(backend)
        if tables_only(catalog(backend, OLD)) != fresh:
            differ.append(done)
    assert differ == [], "statements applied before the upgrade that it did not finish"


def test_the_version_is_that_of_the_steps_applied_in_full(scratch):
    """The last step that an interruption can leave applied in part (of more than one
    statement), interrupted after its first."""
    backend = scratch
    steps = MIGRATIONS[backend.name]
    *_, last = [m for m in steps if len(interruptions(statements(m.sql(**tables(OLD))))) > 2]
    create_at(backend, last.version - 1)  # the newest step that can be applied in part
    step = statements(last.sql(**tables(OLD)))
    run_sql(backend, ";\n".join(step[: interruptions(step)[1]]))
    assert version_of(backend, OLD) == last.version - 1, "a step applied in part does not count"
    record(backend, OLD, last.version)  # as an older upgrade interrupted in the step did
    assert version_of(backend, OLD) == last.version, "the record is trusted"
    with contextlib.closing(backend.connect()) as conn:
        assert schema_version(conn, **tables(OLD), verify=True) == last.version - 1
    applied = [m.version for m in upgrade(backend)]
    assert applied == list(range(last.version, len(steps) + 1)), "applied again"
    upgrade(backend, FRESH)
    assert catalog(backend, OLD) == catalog(backend, FRESH)


def blocked(backend: Any, conn: Any) -> Any:
    """Whether `conn` (busy in another thread) is waiting for a lock on a table."""
    if backend.name == "mysql":
        rows = backend.query(
            "SELECT state FROM information_schema.processlist WHERE id = %s", (conn.thread_id(),)
        )
        return rows and "lock" in str(rows[0][0]).lower()
    rows = backend.query(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (conn.info.backend_pid,)
    )
    return rows and rows[0][0] == "Lock"


@contextlib.contextmanager
def table_in_use(backend: Any) -> Any:
    """A transaction that has read the job table, as a held-mode job's has: DDL on the table
    waits for it to end."""
    with contextlib.closing(backend.connect()) as holder:
        holder.cursor().execute(f"SELECT COUNT(*) FROM {OLD}.job")
        yield
        holder.rollback()


def session_setting(backend: Any, conn: Any) -> Any:
    name = "@@SESSION.time_zone" if backend.name == "mysql" else "current_setting('TimeZone')"
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT {name}")
        return cursor.fetchone()[0]


def test_an_error_inside_a_step_is_raised_as_it_is_and_the_next_upgrade_finishes(scratch):
    backend = scratch
    upgrade(backend, FRESH)
    create_at(backend, 1)
    with contextlib.closing(backend.connect()) as conn:
        with conn.cursor() as cursor:
            if backend.name == "mysql":
                cursor.execute("SET time_zone = '+05:00'")
        conn.commit()
        short_lock_timeout(backend, conn)
        before = session_setting(backend, conn)
        with table_in_use(backend), pytest.raises(Exception) as error:
            upgrade_schema(conn, **tables(OLD))
        assert session_setting(backend, conn) == before, "the session is put back"
    assert lock_timed_out(backend) in str(error.value), error.value
    assert version_of(backend, OLD) == 1
    upgrade(backend)
    assert catalog(backend, OLD) == catalog(backend, FRESH)


def short_lock_timeout(backend: Any, conn: Any) -> None:
    """Lock waits on `conn` fail after a second (committed: PostgreSQL undoes a SET rolled back)."""
    with conn.cursor() as cursor:
        if backend.name == "mysql":
            cursor.execute("SET SESSION lock_wait_timeout = 1")
        else:
            cursor.execute("SET lock_timeout = '1s'")
    conn.commit()


def lock_timed_out(backend: Any) -> str:
    """The error message of a lock wait that timed out."""
    return "Lock wait timeout exceeded" if backend.name == "mysql" else "lock timeout"


def test_a_step_waiting_for_a_running_job_blocks_enqueues_until_the_job_ends(scratch):
    """What docs/operations.md says: a step that alters the job table waits for the open
    transactions on it (a held-mode job's), and enqueues queue behind the step."""
    backend = scratch
    create_at(backend, 1)
    conn = backend.connect()
    thread = threading.Thread(target=upgrade_schema, args=(conn,), kwargs=tables(OLD))
    try:
        with table_in_use(backend):
            thread.start()
            wait_until(lambda: blocked(backend, conn), description="the step waits for the job")
            with contextlib.closing(backend.connect()) as enqueuer:
                short_lock_timeout(backend, enqueuer)
                with pytest.raises(Exception, match=lock_timed_out(backend)):
                    enqueue(enqueuer, "blocked", job_table=f"{OLD}.job")
        thread.join(30)
    finally:
        conn.close()
    assert not thread.is_alive()
    assert version_of(backend, OLD) == LATEST[backend.name], "the step ran once the job ended"
    enqueue_committed(backend, ("after", 1), job_table=f"{OLD}.job")


def test_a_connection_lost_inside_a_step_raises_its_own_error(scratch):
    """The rollback and the time zone put back after a failed step cannot run on a dead
    connection: their errors must not replace the step's."""
    backend = scratch
    create_at(backend, 1)
    conn = backend.connect()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            upgrade_schema(conn, **tables(OLD))
        except BaseException as exc:
            raised.append(exc)

    with table_in_use(backend):
        thread = threading.Thread(target=run)
        thread.start()
        wait_until(lambda: blocked(backend, conn), description="the step waits for the table")
        if backend.name == "mysql":
            backend.execute(f"KILL {conn.thread_id()}")
        else:
            backend.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        thread.join(10)
    conn.close()
    (error,) = raised
    if backend.name == "mysql":
        assert type(error).__name__ == "OperationalError" and error.args[0] in (1927, 2013), error
    else:
        assert "terminating connection due to administrator command" in str(error), error
    assert version_of(backend, OLD) == 1


def step_number(dialect: str, name: str) -> int:
    return next(m.version for m in MIGRATIONS[dialect] if m.name == name)


def workers_need(dialect: str) -> int:
    return step_number(dialect, WORKERS_NEED)


def test_a_worker_on_an_older_schema_names_the_command_that_upgrades_it(scratch):
    backend = scratch
    old = workers_need(backend.name) - 1
    create_at(backend, old)
    source = backend.pool(2)
    try:
        worker = create_queue_worker(source, lambda t, p: None, **tables(OLD))
        with pytest.raises(SchemaError) as error:
            worker.start()
        with pytest.raises(SchemaError):
            process_next_job(source, lambda t, p: None, **tables(OLD))
    finally:
        source.close()
    message = str(error.value)
    assert "\n" not in message
    assert f"{OLD}.job is at version {old}" in message
    assert "proletarian-di schema upgrade" in message
    assert worker.state == "new"


def test_enqueue_needs_no_step_it_does_not_use_and_workers_need_every_step_to_theirs(scratch):
    backend = scratch
    need = next(m.version for m in MIGRATIONS[backend.name] if m.name == WORKERS_NEED)
    create_at(backend, need - 1)
    source = backend.pool(2)
    try:
        enqueue_committed(backend, ("t", 1), job_table=f"{OLD}.job")
        with pytest.raises(SchemaError, match=rf"missing steps: \d+ \({WORKERS_NEED}\)"):
            process_next_job(source, lambda t, p: None, **tables(OLD))
        upgrade(backend)
        ran = []
        assert process_next_job(source, lambda t, p: ran.append(p), **tables(OLD)) is True
    finally:
        source.close()
    assert ran == [1]


def test_a_worker_on_a_schema_without_the_live_workers_table_runs_its_jobs(scratch):
    """The live workers' registry is for the eyes only: a worker on the schema before its
    step starts and runs jobs, and says once that it cannot register, and why."""
    backend = scratch
    before = step_number(backend.name, "live_workers") - 1
    assert before >= workers_need(backend.name)
    create_at(backend, before)
    source = backend.pool(2)
    events = Events()
    try:
        enqueue_committed(backend, ("t", 1), job_table=f"{OLD}.job")
        ran: list[Any] = []
        with create_queue_worker(source, lambda t, p: ran.append(p), log=events, **tables(OLD)):
            wait_until(lambda: ran and events.named("registry_error"))
    finally:
        source.close()
    assert ran == [1]
    [error] = events.named("registry_error")
    assert error["table"] == f"{OLD}.job_workers"
    assert "proletarian-di schema upgrade" in error["reason"], error


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_a_mysql_worker_without_the_claim_ties_step_runs_tied_jobs_each_once(scratch):
    """Before `claim_ties` the claim index orders jobs of one process_at by attempts first:
    the claims' job id bound still takes each, once, and the step then adds the id."""
    backend = scratch
    before = step_number("mysql", "claim_ties") - 1
    assert before >= workers_need("mysql")
    create_at(backend, before)
    with contextlib.closing(backend.connect()) as conn:
        enqueue_many(conn, [("t", n) for n in range(40)], job_table=f"{OLD}.job")
        conn.commit()
    source = backend.pool(3)
    try:
        ran: list[Any] = []
        worker = create_queue_worker(
            source, lambda t, p: ran.append(p), worker_threads=2, **tables(OLD)
        )
        with worker:
            wait_until(lambda: len(ran) == 40)
    finally:
        source.close()
    assert sorted(ran) == list(range(40))
    assert version_of(backend, OLD) == before
    upgrade(backend)
    assert version_of(backend, OLD) == LATEST["mysql"]
    columns = backend.query(
        "SELECT column_name FROM information_schema.statistics WHERE table_schema = %s "
        "AND table_name = 'job' AND index_name = 'job_queue_priority_process_at' "
        "ORDER BY seq_in_index",
        (OLD,),
    )
    assert [c[0].lower() for c in columns][:4] == ["queue", "priority_rank", "process_at", "job_id"]


def cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from proletarian_di.cli import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_the_cli_checks_upgrades_and_reports_versions(scratch):
    backend = scratch
    create_at(backend, 1)
    put_proletarian_job(backend, 1)
    names = ["--job-table", f"{OLD}.job", "--archived-job-table", f"{OLD}.archived_job"]
    url = ["-d", backend.url]
    latest = LATEST[backend.name]

    check = cli("schema", "check", *url, *names)
    assert check.exit_code == 6, check.output
    assert f"at schema version 1; this proletarian-di needs {latest}" in check.stderr
    assert "run `proletarian-di schema upgrade`" in check.stderr

    dry = cli("schema", "upgrade", "--dry-run", *url, *names)
    assert dry.exit_code == 0, dry.output
    assert f"{OLD}.job is at schema version 1; would apply steps 2 (" in dry.stdout
    assert version_of(backend, OLD) == 1

    upgraded = cli("schema", "upgrade", *url, *names)
    assert upgraded.exit_code == 0, upgraded.output
    assert upgraded.stdout.count("applied") == latest - 1
    assert f"is at schema version {latest} (was 1)" in upgraded.stdout

    again = cli("schema", "upgrade", *url, *names)
    assert f"is at schema version {latest}: nothing to do" in again.stdout
    ready = cli("schema", "check", *url, *names)
    assert ready.exit_code == 0, ready.output
    assert f"are ready (schema version {latest} of {latest})" in ready.stdout
    assert backend.query(f"SELECT COUNT(*) FROM {OLD}.job")[0][0] == 1


def test_the_cli_reports_an_interrupted_upgrade_and_finishes_it(scratch):
    backend = scratch
    migration = MIGRATIONS[backend.name][step_number(backend.name, "stored_errors") - 1]
    create_at(backend, migration.version - 1)
    record(backend, OLD, migration.version - 1)
    step = statements(migration.sql(**tables(OLD)))
    run_sql(backend, ";\n".join(step[: interruptions(step)[1]]))  # last_error on the job table
    names = ["--job-table", f"{OLD}.job", "--archived-job-table", f"{OLD}.archived_job"]
    url = ["-d", backend.url]

    check = cli("schema", "check", *url, *names)
    assert check.exit_code == 6, check.output
    assert f"at schema version {migration.version - 1};" in check.stderr
    assert f"missing steps: {migration.version} (stored errors)" in check.stderr

    upgraded = cli("schema", "upgrade", *url, *names)
    assert upgraded.exit_code == 0, upgraded.output
    assert f"step {migration.version} (stored errors) applied" in upgraded.stdout
    ready = cli("schema", "check", *url, *names)
    assert ready.exit_code == 0, ready.output
    upgrade(backend, FRESH)
    assert catalog(backend, OLD) == catalog(backend, FRESH)


def test_a_statement_the_server_refuses_is_not_called_unreachable(postgresql_backend, monkeypatch):
    """PostgreSQL: a lock timeout inside a step (PGOPTIONS sets one for the CLI's connection;
    PyMySQL's connection takes no such option from the URL)."""
    backend = postgresql_backend
    drop(backend, OLD)
    try:
        create_at(backend, 1)
        monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=500")
        names = ["--job-table", f"{OLD}.job", "--archived-job-table", f"{OLD}.archived_job"]
        with table_in_use(backend):
            failed = cli("schema", "upgrade", "-d", backend.url, *names)
        assert failed.exit_code != 0
        assert "unreachable" not in failed.output
        assert "canceling statement due to lock timeout" in failed.output
    finally:
        drop(backend, OLD)
