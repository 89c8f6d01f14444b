"""The documentation's code samples run here, so the docs cannot drift from the code.

Every ```python block of a page in docs/ runs, in order, in one namespace per
page (a page reads like a session), against a real database: PostgreSQL
through `DATABASE_URL`, or MySQL/MariaDB through `MYSQL_URL` for mysql.md.
A block that only includes files (`--8<-- "path"`) is checked here too: the
files must exist, and Python files under docs/snippets/ are run.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
import sys
import tempfile
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proletarian_di import QueueWorker, enqueue, process_next_job
from proletarian_di.schema import LATEST, migration, statements

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SNIPPETS = DOCS / "snippets"
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,})(?P<lang>[\w+-]*)(?P<info>.*)$")
INCLUDE = re.compile(r'^\s*--8<--\s+"(?P<path>[^"]+)"\s*$')
MYSQL_PAGES = {"mysql.md"}


@dataclasses.dataclass
class Block:
    page: str
    line: int
    lang: str
    code: str

    @property
    def includes(self) -> list[str]:
        return [m["path"] for m in map(INCLUDE.match, self.code.splitlines()) if m]


def fenced_blocks(path: Path) -> Iterator[Block]:
    """The fenced code blocks of a page, dedented (blocks may sit in tabs or admonitions)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != indent + fence:
            body.append(lines[j])
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path.name}:{i + 1}: code fence is never closed")
        yield Block(path.name, i + 2, opening["lang"], textwrap.dedent("\n".join(body)))
        i = j + 1


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def python_blocks(path: Path) -> list[Block]:
    return [b for b in fenced_blocks(path) if b.lang in ("python", "py") and not b.includes]


def run_block(block: Block, module: types.ModuleType) -> None:
    """Execute a block so that tracebacks point at the page's own line numbers."""
    source = "\n" * (block.line - 1) + block.code
    exec(compile(source, str(DOCS / block.page), "exec"), module.__dict__)


def run_page(page: Path, tmp_path: Path) -> types.ModuleType:
    name = f"docs_page_{page.stem.replace('-', '_')}"
    module = types.ModuleType(name)
    module.__file__ = str(tmp_path / f"{page.stem}.py")
    sys.modules[name] = module
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        for block in python_blocks(page):
            run_block(block, module)
    finally:
        del sys.modules[name]
        root.handlers[:], root.level = handlers, level
        for value in list(module.__dict__.values()):
            if isinstance(value, QueueWorker) and value.running:
                value.stop()
                pytest.fail(f"{page.name} left {value!r} running; a sample must stop its workers")
    return module


PAGES_WITH_SAMPLES = [p.name for p in pages() if python_blocks(p)]


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A world-readable working directory: the Quickstart's embedded server may run
    as another system user when the tests run as root."""
    path = Path(tempfile.mkdtemp(prefix="proletarian-docs-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.db
@pytest.mark.parametrize("page", PAGES_WITH_SAMPLES)
def test_page_samples_run(
    page: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, workdir: Path
) -> None:
    fixture = "mysql_backend" if page in MYSQL_PAGES else "postgresql_backend"
    backend = request.getfixturevalue(fixture)
    backend.reset()
    monkeypatch.setenv("MYSQL_URL" if page in MYSQL_PAGES else "DATABASE_URL", backend.url)
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(workdir))
    with backend.creating_schemas():  # dropped at the session's end (mysql.md's `app`)
        run_page(DOCS / page, workdir)


def test_pages_have_samples() -> None:
    assert {"index.md", "quickstart.md", "workers.md", "retries.md"} <= set(PAGES_WITH_SAMPLES)


def test_fences_parse_and_includes_exist() -> None:
    for page in pages():
        for block in fenced_blocks(page):
            for include in block.includes:
                assert (ROOT / include).is_file(), f"{page.name}:{block.line}: {include} missing"
            if block.includes and block.lang in ("python", "py"):
                stray = [
                    line
                    for line in block.code.splitlines()
                    if line.strip() and not INCLUDE.match(line)
                ]
                assert not stray, f"{page.name}:{block.line}: mixes code and includes"


def test_included_examples_are_run_by_the_tests() -> None:
    tests = "\n".join(
        p.read_text(encoding="utf-8")
        for p in (ROOT / "tests").glob("test_*.py")
        if p.name != "test_docs.py"
    )
    for page in pages():
        for block in fenced_blocks(page):
            for include in block.includes:
                if include.startswith("examples/") and include.endswith(".py"):
                    folder = str(Path(include).parent)
                    module = include[: -len(".py")].replace("/", ".")
                    assert folder in tests or module in tests or include in tests, (
                        f"{page.name}:{block.line}: {include} is shown but no test runs it"
                    )


def included_python_snippets() -> list[str]:
    found = set()
    for page in pages():
        for block in fenced_blocks(page):
            found.update(p for p in block.includes if p.startswith("docs/snippets/"))
    return sorted(p for p in found if p.endswith(".py"))


def test_every_python_snippet_file_is_included() -> None:
    on_disk = {f"docs/snippets/{p.name}" for p in SNIPPETS.glob("*.py")}
    assert on_disk == set(included_python_snippets())


# The Installation page's Alembic migration, run against the real database -----


class _AlembicOp:
    """Alembic's `op` as the migration uses it: statements on a real connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str) -> None:
        self.conn.execute(sql)


def test_alembic_migration_snippet(
    postgresql_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg
    from psycopg.conninfo import make_conninfo

    scratch = "proletarian_docs_alembic"
    with psycopg.connect(postgresql_backend.url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {scratch}")
        admin.execute(f"CREATE DATABASE {scratch}")
    url = make_conninfo(postgresql_backend.url, dbname=scratch)
    try:
        alembic = types.ModuleType("alembic")
        with psycopg.connect(url) as conn:
            alembic.op = _AlembicOp(conn)  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, "alembic", alembic)
            namespace: dict[str, Any] = {"__name__": "migration_0001"}
            exec((SNIPPETS / "alembic_migration.py").read_text(encoding="utf-8"), namespace)
            namespace["upgrade"]()
            namespace["upgrade"]()  # safe to run twice
            step: dict[str, Any] = {"__name__": "migration_0002"}
            exec((SNIPPETS / "alembic_step.py").read_text(encoding="utf-8"), step)
            step["upgrade"]()
            for version in range(3, LATEST["postgresql"] + 1):  # a migration each, as step 2
                for statement in statements(migration("postgresql", version).sql()):
                    conn.execute(statement)
            conn.commit()
            enqueue(conn, "after_migration", {"ok": True})
        seen: list[Any] = []
        assert process_next_job(lambda: psycopg.connect(url), lambda t, p: seen.append(p))
        assert seen == [{"ok": True}]
        with psycopg.connect(url) as conn:
            alembic.op.conn = conn  # type: ignore[attr-defined]
            step["downgrade"]()
            namespace["downgrade"]()
            assert conn.execute("SELECT to_regclass('proletarian.job')").fetchone() == (None,)
    finally:
        with psycopg.connect(postgresql_backend.url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {scratch}")


# The CLI reference names every command, option and environment variable -------


def _cli_commands() -> dict[str, Any]:
    import typer

    from proletarian_di.cli import app

    found: dict[str, Any] = {}

    def walk(command: Any, path: str) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}".strip())
        else:
            found[path] = command

    walk(typer.main.get_command(app), "")
    return found


def _cli_sections() -> dict[str, str]:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    parts = re.split(r"^#{2,3} `([^`]+)`\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_cli_reference_matches_the_cli() -> None:
    pytest.importorskip("typer")
    commands = _cli_commands()
    sections = _cli_sections()
    assert set(commands) <= set(sections), "commands without a section in docs/cli.md"
    for path, command in commands.items():
        text = sections[path]
        documented = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", text)) - {"--help"}
        real = {
            opt for param in command.params for opt in getattr(param, "opts", []) if "--" in opt
        } - {"--help"}
        assert real <= documented, f"{path}: undocumented options {sorted(real - documented)}"
        assert documented <= real, f"{path}: options that do not exist {sorted(documented - real)}"
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            if envvar:
                assert envvar in text, f"{path}: {envvar} is not documented"
