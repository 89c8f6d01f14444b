"""The real Proletarian (Clojure), as the tests' oracle for interop.

`../shared/clojure-oracle` (beside the project; `CLOJURE_ORACLE_HOME` names another place) runs
msolli/proletarian v1.0.109-alpha (1384d7b) unchanged on a JVM: its README says how to set it
up (`setup.sh`) and what its commands do. `oracle()` gives a test the oracle, or skips it
saying why it is missing; with PROLETARIAN_REQUIRE_CLOJURE_ORACLE=1 (CI, which runs `setup.sh`
first) a missing oracle fails the test instead.

Each call starts a JVM (3 to 4 s): a test batches its commands into one `run`.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import importlib.util
import json
import math
import os
import socket
import subprocess
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from proletarian_di import enqueue, enqueue_many
from proletarian_di.serializers import URI, Char, Keyword, Symbol, TaggedValue, TransitSerializer
from proletarian_di.testing import QueueDatabase

ROOT = Path(__file__).resolve().parent.parent
HOME = Path(os.environ.get("CLOJURE_ORACLE_HOME") or ROOT.parent / "shared" / "clojure-oracle")
REQUIRE = "PROLETARIAN_REQUIRE_CLOJURE_ORACLE"
PROLETARIAN_VERSION = "v1.0.109-alpha (1384d7b)"


@functools.cache
def _module() -> ModuleType | str:
    """The oracle's Python module (`python/clojure_oracle.py`), or why it cannot be loaded."""
    path = HOME / "python" / "clojure_oracle.py"
    if not path.is_file():
        return f"the Clojure oracle is not at {HOME} (set CLOJURE_ORACLE_HOME)"
    spec = importlib.util.spec_from_file_location("clojure_oracle", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Oracle:
    """The oracle's commands, run in one JVM per `run`; its records parsed line by line
    (only at "\\n": a record may hold U+0085 or U+2028, which `str.splitlines` would split)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def run(self, *cmds: dict[str, Any], timeout: float = 180) -> list[dict[str, Any]]:
        """The records of the commands, in order (their `end` records left out); an
        AssertionError with the oracle's output when one fails."""
        proc = subprocess.run(
            self.inner._argv(),
            input=self.inner._stdin(cmds),
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=timeout,
            env=self.inner._env(),
        )
        records = [json.loads(line) for line in proc.stdout.split("\n") if line.startswith("{")]
        ends = [r for r in records if r.get("kind") == "end"]
        assert proc.returncode == 0 and len(ends) == len(cmds), (
            f"the oracle failed (exit {proc.returncode}): {ends} {proc.stderr[-3000:]}"
        )
        return [r for r in records if r.get("kind") != "end"]


def oracle() -> Oracle:
    """The oracle, or a skip saying why not (a failure when CI requires it: `REQUIRE`)."""
    module = _module()
    reason = module if isinstance(module, str) else module.ClojureOracle(HOME).why_unavailable()
    if reason:
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 but {reason}")
        pytest.skip(f"{reason}; see ../shared/clojure-oracle/README.md")
    assert not isinstance(module, str)
    return Oracle(module.ClojureOracle(HOME))


@contextlib.contextmanager
def jdbc_url(url: str) -> Iterator[str]:
    """A test database's URL as the oracle's JDBC drivers take it, for the block. A
    PostgreSQL on a Unix socket only (the embedded one) is reached through a TCP port that
    this process forwards to the socket: PostgreSQL's JDBC driver speaks TCP only."""
    module = _module()
    assert not isinstance(module, str), module
    params = conninfo_to_dict(url) if url.startswith("postgres") else {}
    host = str(params.get("host") or "")
    if not host.startswith("/"):
        yield module.jdbc_url(url)
        return
    socket_path = os.path.join(host, f".s.PGSQL.{params.get('port') or 5432}")
    with _forwarded(socket_path) as port:
        query = urllib.parse.urlencode({"user": params.get("user") or "postgres"})
        yield f"jdbc:postgresql://127.0.0.1:{port}/{params.get('dbname') or 'postgres'}?{query}"


@contextlib.contextmanager
def _forwarded(socket_path: str) -> Iterator[int]:
    """A TCP port on 127.0.0.1 whose every connection is piped to the Unix socket, for the
    block."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(socket_path)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()


def edn_string(text: str) -> str:
    """`text` as an EDN string literal (every character but `"` and `\\` as it is)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# Rows Proletarian wrote ------------------------------------------------------------------------

PROLETARIAN_DEFAULT_QUEUE = ":proletarian/default"
FROM_PYTHON_QUEUE = ":from-python"
"""The queue of the jobs Python enqueues for the Clojure worker of `written_by_proletarian`."""
ARCHIVED_QUEUE = ":reports"
"""The queue of the jobs the Clojure worker of `written_by_proletarian` archives."""

JOB_COLUMNS = ("job_id", "queue", "job_type", "payload", "attempts", "enqueued_at", "process_at")
"""The seven columns Proletarian writes and reads in the job table (db.clj)."""
ARCHIVE_COLUMNS = (*JOB_COLUMNS, "status", "finished_at")
"""The nine it writes in the archive."""

CLOJURE_JOBS = [
    {
        "tag": "send-email",
        "job_type": ":app.jobs/send-email",
        "payload": '{:email "ada@example.com" :user-id 42 :kind :welcome :plan :plan/pro '
        ':tags #{"new"} :sent-at #instant "2024-05-06T07:08:09.123Z" '
        ':items [{:sku "a-1" :qty 1} {:sku "b-2" :qty 2}]}',
    },
    {"tag": "charge", "job_type": ":app.billing/charge", "payload": "{:cents 995}"},
    {"tag": "string-type", "job_type": '"send_email"', "payload": "{:n 1}"},
    {"tag": "ok-1", "job_type": ":app.jobs/report", "payload": "{:n 1}", "queue": ARCHIVED_QUEUE},
    {"tag": "ok-2", "job_type": ":app.jobs/report", "payload": "{:n 2}", "queue": ARCHIVED_QUEUE},
    {"tag": "fail-1", "job_type": ":app.jobs/flaky", "payload": "{:n 3}", "queue": ARCHIVED_QUEUE},
    {
        "tag": "fail-2",
        "job_type": ":app.jobs/retried",
        "payload": "{:n 4}",
        "queue": ARCHIVED_QUEUE,
    },
]
"""What `written_by_proletarian` enqueues with Proletarian's `enqueue!`: three jobs left
waiting on its default queue, and four on `ARCHIVED_QUEUE` that its worker archives, two as
`:success` and two as `:failure` (`fail-2` after a retry)."""

ARCHIVING = {
    ":app.jobs/flaky": {"fail_attempts": "always"},
    ":app.jobs/retried": {"fail_attempts": "always", "retry": {"retries": 1, "delays": [0]}},
}


@dataclasses.dataclass
class Written:
    """What Proletarian wrote on one database: its rows (`JOB_COLUMNS` or `ARCHIVE_COLUMNS`
    values, as the driver read them) by job id, the ids of `CLOJURE_JOBS` by tag, and the
    oracle's records."""

    jobs: dict[uuid.UUID, tuple[Any, ...]]
    archived: dict[uuid.UUID, tuple[Any, ...]]
    ids: dict[str, uuid.UUID]
    records: list[dict[str, Any]]

    def restore(
        self, db: QueueDatabase, *tags_or_ids: str | uuid.UUID, finished_at: Any = None
    ) -> list[uuid.UUID]:
        """Write these rows (by tag or id; none named: all of them) into `db`'s tables
        again, as they were (the archived ones with `finished_at`, a value for the driver,
        if given); their ids."""
        ids = [self.ids[t] if isinstance(t, str) else t for t in tags_or_ids] or [
            *self.jobs,
            *self.archived,
        ]
        for job_id in ids:
            if job_id in self.jobs:
                table, columns, row = db.job_table, JOB_COLUMNS, self.jobs[job_id]
            else:
                table, columns, row = db.archived_job_table, ARCHIVE_COLUMNS, self.archived[job_id]
                row = row if finished_at is None else (*row[:-1], finished_at)
            marks = ", ".join(["%s"] * len(columns))
            db.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", row)
        return ids

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == kind]


_WRITTEN: dict[str, Written] = {}

SENT_AT = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)
PYTHON_PAYLOAD = {
    "email": "ada@example.com",
    "user-id": 42,
    "kind": Keyword("welcome"),
    "plan": Keyword("plan/pro"),
    "tags": frozenset({"new"}),
    "sent-at": SENT_AT,
    "items": [{"sku": "a-1", "qty": 1}, {"sku": "b-2", "qty": 2}],
}
"""The payload of `CLOJURE_JOBS`' "send-email" as a handler gets it, and as Python enqueues it."""
CLOJURE_EDN = CLOJURE_JOBS[0]["payload"]

KEYWORD_TYPES = ["1st", "a/b/c", "a//", "/", "+1", "a'b#c", "é/😀", "a\u00a0b", "nil", "x:y/z"]
"""Job types that read back as keywords, odd as they look: a Clojure worker runs each."""


def python_jobs(db: QueueDatabase) -> dict[uuid.UUID, str]:
    """Enqueue on `FROM_PYTHON_QUEUE` with Proletarian's options (Transit, keyword job types)
    PYTHON_PAYLOAD, typed "app.jobs/send-email", and `{:n i}` for each of KEYWORD_TYPES;
    their ids, each with the EDN its payload must equal."""
    options: dict[str, Any] = {
        "serializer": TransitSerializer(),
        "job_type_style": "keyword",
        "queue": FROM_PYTHON_QUEUE,
        "job_table": db.job_table,
    }
    conn = db.connect()
    try:
        ids = [enqueue(conn, "app.jobs/send-email", PYTHON_PAYLOAD, **options)]
        jobs = [(job_type, {"n": n}) for n, job_type in enumerate(KEYWORD_TYPES)]
        ids += enqueue_many(conn, jobs, **options)
        conn.commit()
    finally:
        conn.close()
    payloads = [CLOJURE_EDN, *(f"{{:n {n}}}" for n in range(len(jobs)))]
    return dict(zip(ids, payloads, strict=True))


def written_by_proletarian(db: QueueDatabase) -> Written:
    """The rows Proletarian writes on `db` (emptied first and after): `CLOJURE_JOBS` enqueued
    by its `enqueue!`, `ARCHIVED_QUEUE`'s run by its worker (`ARCHIVING`), and the jobs
    `python_jobs` enqueues on `FROM_PYTHON_QUEUE`, run by its worker too. One JVM call per
    database and test process; later calls get the same rows, for the test to `restore`."""
    if db.name in _WRITTEN:
        return _WRITTEN[db.name]
    the_oracle = oracle()
    db.clear()
    python_ids = python_jobs(db)
    expect = {str(job_id): edn for job_id, edn in python_ids.items()}
    with jdbc_url(db.url) as url:
        records = the_oracle.run(
            {"cmd": "enqueue", "url": url, "jobs": CLOJURE_JOBS, "job_table": db.job_table},
            work(db, url, ARCHIVED_QUEUE, behaviour=ARCHIVING, worker_id="archiving"),
            work(db, url, FROM_PYTHON_QUEUE, expect=expect, worker_id="from-python"),
        )
    decode = db_ids(db)
    rows = db.query(f"SELECT {', '.join(JOB_COLUMNS)} FROM {db.job_table}")
    archived = db.query(f"SELECT {', '.join(ARCHIVE_COLUMNS)} FROM {db.archived_job_table}")
    enqueued = [r for r in records if r["kind"] == "enqueued"]
    written = Written(
        {decode(row[0]): tuple(row) for row in rows},
        {decode(row[0]): tuple(row) for row in archived},
        {r["tag"]: uuid.UUID(r["job_id"]) for r in enqueued},
        records,
    )
    assert {*written.ids.values(), *python_ids} == {*written.jobs, *written.archived}, records
    db.clear()
    _WRITTEN[db.name] = written
    return written


def work(db: QueueDatabase, url: str, queue: str, **options: Any) -> dict[str, Any]:
    """The oracle's command to run a Proletarian worker on `queue` of `db`'s tables until the
    queue is empty."""
    return {
        "cmd": "work",
        "url": url,
        "queue": queue,
        "job_table": db.job_table,
        "archived_job_table": db.archived_job_table,
        "polling_interval_ms": 20,
        "stop": {"until_empty": True, "timeout_ms": 30_000},
        **options,
    }


def db_ids(db: QueueDatabase) -> Callable[[Any], uuid.UUID]:
    """A job_id column's value as a UUID (MySQL's 16 bytes: Proletarian's
    `->mysql-uuid-strategy`, most significant first, as `uuid.UUID.bytes`)."""
    if db.name == "mysql":
        return lambda raw: uuid.UUID(bytes=bytes(raw))
    return lambda raw: raw if isinstance(raw, uuid.UUID) else uuid.UUID(str(raw))


def edn(value: Any) -> str:
    """A payload (as `TransitSerializer` reads and writes it) as EDN for the oracle: `str` map
    keys as keywords, as the serializer writes them; see the oracle's README for the tags."""
    if isinstance(value, dict):
        return "{" + " ".join(f"{_edn_key(k)} {edn(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(map(edn, value)) + "]"
    if isinstance(value, (set, frozenset)):
        return "#{" + " ".join(map(edn, value)) + "}"
    for types, write in _EDN:
        if isinstance(value, types):
            return write(value)
    raise TypeError(f"no EDN for {value!r}")


def _edn_key(key: Any) -> str:
    return ":" + key if type(key) is str else edn(key)


def _edn_int(n: int) -> str:
    return str(n) if -(2**63) <= n < 2**63 else f"{n}N"


def _edn_float(x: float) -> str:
    if math.isnan(x):
        return "##NaN"
    return ("##Inf" if x > 0 else "##-Inf") if math.isinf(x) else repr(x)


def _edn_instant(moment: datetime) -> str:
    utc = moment.astimezone(timezone.utc)
    return f'#instant "{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"'


_EDN: list[tuple[Any, Callable[[Any], str]]] = [
    (type(None), lambda v: "nil"),
    (bool, lambda v: "true" if v else "false"),
    (int, _edn_int),
    (float, _edn_float),
    (Char, lambda v: f"\\u{ord(v):04X}"),
    (URI, lambda v: f"#transit/uri {edn_string(v)}"),
    (str, edn_string),
    (Keyword, lambda v: ":" + v.text),
    (Symbol, lambda v: v.text),
    (uuid.UUID, lambda v: f'#uuid "{v}"'),
    (datetime, _edn_instant),
    (Decimal, lambda v: f"{v}M"),
    (Fraction, lambda v: f"{v.numerator}/{v.denominator}"),
    (bytes, lambda v: f'#bytes "{base64.b64encode(v).decode()}"'),
    (TaggedValue, lambda v: f"#transit/tagged [{edn_string(v.tag)} {edn(v.rep)}]"),
]
