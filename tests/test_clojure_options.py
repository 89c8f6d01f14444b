"""The operator's tools and the periodic jobs take `create_queue_worker`'s `serializer` and
`job_type_style`, on both databases: the CLI (`--serializer transit --job-type-style keyword`,
or PROLETARIAN_SERIALIZER and PROLETARIAN_JOB_TYPE_STYLE), the dashboard, `PeriodicJob` and
`create_scheduler`, and `proletarian-di worker` for the workers its target makes. Rows
Proletarian wrote (tests/proletarian_oracle.py) are what they read and write."""

from __future__ import annotations

import json
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_fixtures.cli_db import ENV, JOB, CliDB
from proletarian_oracle import PROLETARIAN_DEFAULT_QUEUE, PYTHON_PAYLOAD, Written, db_ids
from proletarian_oracle import written_by_proletarian as proletarians_rows
from typer.testing import CliRunner

from proletarian_di import admin, enqueue
from proletarian_di.cli import app
from proletarian_di.errors import ConfigurationError
from proletarian_di.periodic import PeriodicJob, create_scheduler
from proletarian_di.schema import periodic_table
from proletarian_di.serializers import jsonable
from proletarian_di.testing import FakeClock

from backends import Backend, connection

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.xdist_group("clojure")
"""With the other tests of the oracle: its rows are written once per database."""

CLOJURE = ("--serializer", "transit", "--job-type-style", "keyword")
FIXTURES = Path(__file__).parent / "cli_fixtures"


@pytest.fixture
def proletarian(backend: Backend) -> Written:
    """The rows Proletarian wrote on this database; both tables empty."""
    return proletarians_rows(backend)


def cli(backend: Backend, *args: str, env: dict[str, str] | None = None, code: int = 0) -> Any:
    """The CLI on the backend's default tables; the result, its exit code checked."""
    tables = {
        "DATABASE_URL": None,
        "PROLETARIAN_JOB_TABLE": backend.job_table,
        "PROLETARIAN_ARCHIVED_JOB_TABLE": backend.archived_job_table,
    }
    result = CliRunner().invoke(app, [*args, "-d", backend.url], env={**tables, **(env or {})})
    assert result.exit_code == code, result.output
    return result


# The CLI -----------------------------------------------------------------------------------


def test_cli_enqueue_writes_the_row_proletarian_writes(
    backend: Backend, proletarian: Written
) -> None:
    queue = ("--queue", PROLETARIAN_DEFAULT_QUEUE)
    result = cli(backend, "enqueue", "app.billing/charge", '{"cents": 995}', *queue, *CLOJURE)

    [row] = backend.query(f"SELECT job_id, queue, job_type, payload FROM {backend.job_table}")
    assert result.stdout.strip() == str(db_ids(backend)(row[0]))
    assert tuple(row[1:]) == proletarian.jobs[proletarian.ids["charge"]][1:4]


def test_cli_enqueue_refuses_a_type_proletarian_cannot_read(backend: Backend) -> None:
    result = cli(backend, "enqueue", "app.jobs/1st", "{}", *CLOJURE, code=2)
    assert "not the text of a Clojure keyword" in result.stderr
    assert backend.jobs() == []


def test_cli_reads_transit_payloads_and_keyword_job_types(
    backend: Backend, proletarian: Written
) -> None:
    [job_id] = proletarian.restore(backend, "send-email")
    [failure] = proletarian.restore(backend, "fail-1")

    raw = json.loads(cli(backend, "jobs", "show", str(job_id), "--json").stdout)
    decoded = json.loads(cli(backend, "jobs", "show", str(job_id), "--json", *CLOJURE[:2]).stdout)
    text = cli(backend, "jobs", "show", str(job_id), *CLOJURE[:2]).stdout
    environment = {"PROLETARIAN_SERIALIZER": "transit", "PROLETARIAN_JOB_TYPE_STYLE": "keyword"}
    listed = cli(
        backend, "jobs", "list", "--job-type", "app.jobs/send-email", "--json", env=environment
    ).stdout
    found = cli(backend, "jobs", "find", "ada@example", "--by", "payload", "--json", *CLOJURE[:2])
    typed = ("--job-type", "app.jobs/flaky", *CLOJURE[2:])
    retried = cli(backend, "retry-failed", *typed).stdout

    assert raw["payload"][:3] == ["^ ", "~:email", "ada@example.com"]
    assert decoded["payload"] == jsonable(PYTHON_PAYLOAD)
    assert decoded["payload"]["kind"] == ":welcome" and decoded["payload"]["tags"] == ["new"]
    assert '"email": "ada@example.com"' in text and "~:email" not in text
    assert [(row["job_id"], row["payload"]["user-id"]) for row in json.loads(listed)] == [
        (str(job_id), 42)
    ]
    assert [row["job_id"] for row in json.loads(found.stdout)] == [str(job_id)]
    assert "moved 1 failed job" in retried
    assert admin_state(backend, failure) == "queued"


def admin_state(backend: Backend, job_id: Any) -> str | None:
    with connection(backend) as conn:
        info = admin.get_job(conn, job_id)
    return None if info is None else info.state


_BAD = {
    "--serializer": ("xml", "serializer must be 'json', 'transit' or an object"),
    "--job-type-style": ("Keyword", "job_type_style must be 'plain' or 'keyword'"),
}


@pytest.mark.parametrize(
    ("option", "command"),
    [
        *(
            (option, command)
            for option in _BAD
            for command in (("enqueue", "x"), ("jobs", "list"), ("dashboard",))
        ),
        ("--serializer", ("jobs", "show", "531a379e-31bb-4ce1-8690-158dceb64be6")),
        ("--serializer", ("jobs", "find", "x")),
        ("--job-type-style", ("retry-failed",)),
        ("--job-type-style", ("jobs", "retry", "--job-type", "x")),
        *((option, ("worker", "workerapp:plain_worker")) for option in _BAD),
    ],
    ids=lambda value: "-".join(value[:2]) if isinstance(value, tuple) else value,
)
def test_the_cli_refuses_a_bad_value_naming_it(option: str, command: tuple[str, ...]) -> None:
    """Given on the command line or in the environment, before anything is read or written."""
    value, message = _BAD[option]
    variable = "PROLETARIAN_" + option[2:].replace("-", "_").upper()
    for args, env in (((option, value), {}), ((), {variable: value})):
        result = CliRunner().invoke(app, [*command, *args], env={"DATABASE_URL": None, **env})
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.stderr.split()), result.stderr


# The dashboard -----------------------------------------------------------------------------


def test_the_dashboard_decodes_transit_and_finds_keyword_job_types(
    backend: Backend, proletarian: Written, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proletarian_di.contrib.dashboard import dashboard

    [job_id] = proletarian.restore(backend, "send-email")
    served: list[Any] = []
    monkeypatch.setattr("uvicorn.run", lambda site, **options: served.append(site))
    cli(backend, "dashboard", *CLOJURE)
    sites = {
        "api": dashboard(backend.connect, serializer="transit", job_type_style="keyword"),
        "cli": served[0],
    }

    for name, site in sites.items():
        client = TestClient(site)
        page = client.get(f"/jobs/{job_id}").text
        listed = client.get("/jobs", params={"job_type": "app.jobs/send-email"}).text
        assert "ada@example.com" in page and "~:email" not in page, name
        assert ":welcome" in page, name
        assert str(job_id) in listed, name
    plain = TestClient(dashboard(backend.connect)).get(f"/jobs/{job_id}").text
    assert "~:email" in plain
    with pytest.raises(ConfigurationError, match="serializer must be"):
        dashboard(backend.connect, serializer="xml")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="job_type_style must be"):
        dashboard(backend.connect, job_type_style="Keyword")  # type: ignore[arg-type]


# Periodic jobs ---------------------------------------------------------------------------


def test_a_periodic_job_is_enqueued_as_proletarian_writes_it(
    backend: Backend, proletarian: Written
) -> None:
    backend.execute(f"DELETE FROM {periodic_table(backend.job_table)}")
    own = PeriodicJob(
        "clj-charge",
        "* * * * *",
        "app.billing/charge",
        {"cents": 995},
        queue=PROLETARIAN_DEFAULT_QUEUE,
        job_type_style="keyword",
    )
    inherited = PeriodicJob(
        "clj-report", "* * * * *", "app.jobs/report", {"n": 1}, queue=PROLETARIAN_DEFAULT_QUEUE
    )
    plain = PeriodicJob("py", "* * * * *", "report", None, job_type_style="plain")
    clock = FakeClock()
    scheduler = create_scheduler(
        backend.connect,
        [own, inherited, plain],
        serializer="transit",
        job_type_style="keyword",
        clock=clock,
    )
    scheduler.register()
    clock.advance(timedelta(minutes=1))
    assert len(scheduler.run_pending()) == 3

    rows = backend.query(f"SELECT queue, job_type, payload FROM {backend.job_table}")
    assert sorted(map(tuple, rows)) == sorted(
        [
            proletarian.jobs[proletarian.ids["charge"]][1:4],
            (PROLETARIAN_DEFAULT_QUEUE, ":app.jobs/report", '["^ ","~:n",1]'),
            ("default", "report", '["~#\'",null]'),
        ]
    )
    with connection(backend) as conn:
        recorded = {s.name: s.job_type for s in admin.list_schedules(conn)}
    assert recorded == {
        "clj-charge": ":app.billing/charge",
        "clj-report": ":app.jobs/report",
        "py": "report",
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"job_type_style": "Keyword"}, "job_type_style must be 'plain' or 'keyword'"),
        ({"job_type_style": "keyword", "job_type": "app.jobs/1st"}, "a digit right after"),
        ({"job_type_style": "keyword", "job_type": ":app.jobs/x"}, "without the colon"),
    ],
)
def test_a_periodic_job_refuses_a_bad_style_or_keyword_naming_itself(
    options: dict[str, Any], message: str
) -> None:
    fields = {"job_type": "app.jobs/x", **options}
    with pytest.raises(ConfigurationError, match=f"periodic job 'n': .*{message}"):
        PeriodicJob("n", "@hourly", **fields)


def test_a_scheduler_refuses_a_bad_style_and_a_type_its_style_cannot_store() -> None:
    with pytest.raises(ConfigurationError, match="job_type_style must be"):
        create_scheduler(lambda: None, [], job_type_style="clojure")
    with pytest.raises(ConfigurationError, match=r"periodic job 'n': .*'/a'"):
        create_scheduler(
            lambda: None, [PeriodicJob("n", "@hourly", "/a")], job_type_style="keyword"
        )
    with pytest.raises(ConfigurationError, match="serializer must be"):
        create_scheduler(lambda: None, [], serializer="edn")


# The worker command ----------------------------------------------------------------------


def run_worker(target: str, db: CliDB, *args: str, env: dict[str, str] | None = None) -> Any:
    """`proletarian-di worker` on the CLI tests' tables, in this process."""
    environment = {**ENV, "TEST_DATABASE_URL": db.url, **(env or {})}
    command = ["worker", target, "--path", str(FIXTURES), *args]
    return CliRunner().invoke(app, command, env=environment)


def test_the_worker_command_runs_its_targets_workers_in_the_style_given(backend: Backend) -> None:
    """The worker runs Proletarian's kind of job (the handler sees `sigterm_me` and the map:
    it signals the process, which drains and exits 0), and the container's scheduler records
    its schedules as keywords."""
    db = CliDB(backend)
    options = {"serializer": "transit", "job_type_style": "keyword", "job_table": JOB}
    with connection(backend) as conn:
        enqueue(conn, "sigterm_me", {"n": 1}, **options)  # type: ignore[arg-type]
        conn.commit()
    by_env = {"PROLETARIAN_SERIALIZER": "transit", "PROLETARIAN_JOB_TYPE_STYLE": "keyword"}

    result = run_worker("workerapp:with_scheduler", db, env=by_env)

    assert result.exit_code == 0, result.output
    assert db.archived() == [(":sigterm_me", "success", 1)]
    recorded = backend.query(f"SELECT name, job_type FROM {periodic_table(JOB)} ORDER BY name")
    assert [tuple(row) for row in recorded] == [("cli-nightly", ":noop"), ("cli-weekly", ":noop")]
    with connection(backend) as conn:
        enqueue(conn, "sigterm_me", {"n": 2}, **options)  # type: ignore[arg-type]
        conn.commit()
    again = run_worker("workerapp:plain_worker", db, *CLOJURE)
    assert again.exit_code == 0, again.output
    assert db.jobs() == []


def test_the_worker_command_refuses_a_worker_whose_code_says_otherwise(backend: Backend) -> None:
    result = run_worker("workerapp:json_worker", CliDB(backend), "--serializer", "transit")

    assert result.exit_code == 4, result.output
    said = " ".join(result.stderr.split())
    assert "serializer='json'" in said and "serializer='transit'" in said
