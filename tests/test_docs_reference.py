"""Reference facts in the docs follow the code: schema versions, option tables, import paths.

These are the details a reader copies without checking: a console output with the
schema version the CLI prints, a table of every option a function takes, and the one
module an integration is imported from.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
from test_docs import fenced_blocks

from proletarian_di import EnqueueOptions, WorkerOptions
from proletarian_di.schema import LATEST, MIGRATIONS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# Where each integration is imported from in the docs; its code may live elsewhere.
DOCUMENTED_MODULE = {
    "proletarian_di.contrib.di": "proletarian_di.di",
    "proletarian_di.contrib.fastapi": "proletarian_di.fastapi",
    "proletarian_di.contrib.embedded": "proletarian_di.embedded",
    "proletarian_di.contrib.cli": "proletarian_di.cli",
}


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


# Schema versions in console outputs ---------------------------------------------------


def block_dialect(code: str) -> str | None:
    if re.search(r"mysql://|\bMySQL\b|\bMariaDB\b", code):
        return "mysql"
    if re.search(r"postgres(ql)?://|\bPostgreSQL\b", code):
        return "postgresql"
    return None


def steps_text(dialect: str, after: int) -> str:
    """What `schema upgrade --dry-run` lists for tables at version `after`."""
    steps = MIGRATIONS[dialect][after:]
    return ", ".join(f"{m.version} ({m.name.replace('_', ' ')})" for m in steps)


def test_documented_schema_versions_are_the_current_ones() -> None:
    checked = 0
    for page in pages():
        for block in fenced_blocks(page):
            if "schema version" not in block.code:
                continue
            dialect = block_dialect(block.code)
            assert dialect, f"{page.name}:{block.line}: which database is this output from?"
            latest = LATEST[dialect]
            where = f"{page.name}:{block.line} ({dialect}, schema version {latest})"
            for line in block.code.splitlines():
                if m := re.search(r"\(schema version (\d+)\) on", line):  # schema install
                    assert int(m[1]) == latest, f"{where}: {line}"
                if m := re.search(r"schema version (\d+) of (\d+)", line):  # schema check
                    assert int(m[2]) == latest, f"{where}: {line}"
                    if "are ready" in line:
                        assert int(m[1]) == latest, f"{where}: {line}"
                if m := re.search(r"at schema version (\d+); would apply steps (.+)$", line):
                    assert m[2] == steps_text(dialect, int(m[1])), (
                        f"{where}: {line}\nthe CLI prints: would apply steps "
                        f"{steps_text(dialect, int(m[1]))}"
                    )
                if m := re.search(r"at schema version (\d+) \(was \d+\)", line):  # upgrade
                    assert int(m[1]) == latest, f"{where}: {line}"
                if m := re.search(r"this proletarian-di needs (\d+)", line):
                    assert int(m[1]) == latest, f"{where}: {line}"
                checked += "schema version" in line
    assert checked >= 4, f"only {checked} console lines with a schema version found"


def test_the_installation_page_lists_every_schema_step() -> None:
    text = (DOCS / "installation.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \|([^|]*)\|([^|]*)\|$", text, flags=re.M)
    for column, dialect in ((1, "postgresql"), (2, "mysql")):
        versions = [int(row[0]) for row in rows if row[column].strip()]
        assert versions == list(range(1, LATEST[dialect] + 1)), (
            f"docs/installation.md's table of schema versions lists {versions} for {dialect}; "
            f"the steps are 1 to {LATEST[dialect]}"
        )


# Option tables --------------------------------------------------------------------------


def option_table(page: str, after: str) -> set[str]:
    """The options (first column) of the first table after the text `after`."""
    text = (DOCS / page).read_text(encoding="utf-8")
    assert after in text, f"docs/{page} no longer has {after!r}"
    rest = text[text.index(after) :]
    table = re.search(r"^\| Option \|.*?(?=^[^|]|\Z)", rest, flags=re.M | re.S)
    assert table, f"docs/{page}: no table of options after {after!r}"
    return set(re.findall(r"^\| `(\w+)` \|", table.group(0), flags=re.M))


def keys(typed_dict: Any) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


@pytest.mark.parametrize(
    "what, typed_dict, after",
    [
        ("enqueue", EnqueueOptions, "`enqueue(conn, job_type, payload, **options)`"),
        ("worker", WorkerOptions, "## Every option"),
    ],
    ids=["enqueue", "worker"],
)
def test_the_options_table_lists_every_option(what: str, typed_dict: Any, after: str) -> None:
    real = keys(typed_dict)
    documented = option_table("workers.md", after)
    assert real - documented == set(), (
        f"docs/workers.md's {what} options lack {sorted(real - documented)}"
    )
    assert documented - real == set(), (
        f"docs/workers.md documents {what} options that do not exist: {sorted(documented - real)}"
    )


# One import path per integration ------------------------------------------------------


def shown_files() -> list[Path]:
    """The pages, and every file they include (examples, containers, snippets)."""
    files = pages()
    for page in pages():
        for block in fenced_blocks(page):
            files += [ROOT / include for include in block.includes]
    return sorted(set(files))


def test_docs_import_each_integration_from_its_documented_module() -> None:
    pattern = re.compile("|".join(re.escape(m) for m in DOCUMENTED_MODULE) + r"(?![\w])")
    for path in shown_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if m := pattern.search(line):
                raise AssertionError(
                    f"{path.relative_to(ROOT)}:{number}: {m[0]} — the docs import this "
                    f"integration from {DOCUMENTED_MODULE[m[0]]}: {line.strip()}"
                )


def test_every_name_the_docs_import_from_a_short_path_is_there() -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("dependency_injector")
    pytest.importorskip("typer")
    imports = re.compile(r"from (proletarian_di\.(?:di|fastapi|embedded|cli)) import ([\w, ]+)")
    for path in shown_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if m := imports.search(line):
                module = importlib.import_module(m[1])
                for name in (n.strip() for n in m[2].split(",")):
                    assert name and hasattr(module, name), (
                        f"{path.relative_to(ROOT)}:{number}: {m[1]} has no {name}"
                    )
                    contrib = importlib.import_module(m[1].replace(".", ".contrib.", 1))
                    assert getattr(module, name) is getattr(contrib, name), (m[1], name)
