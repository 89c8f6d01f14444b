"""`python -m bench --compare REF`: this checkout against another revision, in one sitting.

The other revision is built once into a venv of its own (`.bench/<commit>/`), and both run
*this* benchmark's code (copied beside the other venv, so it imports that revision's
package), one run each in turn, alternating which goes first, on the same servers. Only the
package under test differs; the figures of each side are its medians over the runs.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
BUILDS = ROOT / ".bench"
EXTRAS = "postgres,binary,mysql,cli,embedded,periodic"
# The figures compared, as (column suffix, heading, higher is better).
METRICS = (
    ("", "jobs/s", True),
    ("/client", "client µs/job", False),
    ("/server", "server µs/job", False),
)

console = Console(stderr=True, highlight=False)


class Side:
    """One contender: an interpreter whose `proletarian_di` is the revision under test."""

    def __init__(self, name: str, python: str, cwd: Path) -> None:
        self.name, self.python, self.cwd = name, python, cwd
        self.values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.labels: dict[str, str] = {}

    def run(self, options: list[str]) -> None:
        """One run of the benchmark; its figures are added to this side's."""
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [self.python, "-m", "bench", *options, "--runs", "1", "--json", out.name]
            console.print(f"[bold]{self.name}[/]: {' '.join(command[1:])}")
            done = subprocess.run(command, cwd=self.cwd, stdout=subprocess.DEVNULL, check=False)
            try:
                data = json.loads(Path(out.name).read_text() or "{}")
            except ValueError:
                data = {}
        if not data:
            self.errors.append(f"{self.name}: the run ended with status {done.returncode}")
            return
        for db, row, column, values in data["values"]:
            self.values[(db, row, column)] += values
        self.errors += [f"{self.name}: {error}" for error in data["errors"]]
        self.labels.update(data["labels"])

    def median(self, key: tuple[str, str, str]) -> float | None:
        values = self.values.get(key)
        return statistics.median(values) if values else None


def commit_of(ref: str) -> str:
    """The full commit id of `ref` in this checkout."""
    done = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"--compare: {ref!r} is not a commit of this repository")
    return done.stdout.strip()


def build(commit: str) -> Side:
    """The revision's venv (made on first use) and a copy of this benchmark beside it."""
    home = BUILDS / commit
    python = home / "venv" / "bin" / "python"
    if not (home / "built").exists():
        console.print(f"building {commit[:10]} in {home} …")
        shutil.rmtree(home, ignore_errors=True)
        (home / "src").mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", commit], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(home / "src")], input=archive.stdout, check=True)
        subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"{home / 'src'}[{EXTRAS}]", "psutil"],
            check=True,
        )
        (home / "built").touch()
    shutil.rmtree(home / "run", ignore_errors=True)
    shutil.copytree(
        ROOT / "bench", home / "run" / "bench", ignore=shutil.ignore_patterns("__pycache__")
    )
    return Side(commit[:10], str(python), home / "run")


def table(
    ref: Side, head: Side, db: str, rows: list[tuple[str, str]], fmt: Callable[[str, Any], str]
) -> Table:
    """One database's rows: each metric for both sides and HEAD / REF."""
    label = head.labels.get(db) or ref.labels.get(db) or db
    out = Table(
        title=f"{label}: {ref.name} (REF) against this checkout (HEAD)", title_justify="left"
    )
    out.add_column("measurement", no_wrap=True)
    for _, heading, _ in METRICS:
        out.add_column(f"{heading}\nREF", justify="right")
        out.add_column(f"{heading}\nHEAD", justify="right")
        out.add_column("HEAD/REF", justify="right")
    out.add_column("ours/plain\nREF", justify="right")
    out.add_column("ours/plain\nHEAD", justify="right")
    for row, name in rows:
        cells = [name]
        for suffix, _, _ in METRICS:
            before = ref.median((db, row, f"ours{suffix}"))
            after = head.median((db, row, f"ours{suffix}"))
            ratio = f"{after / before:.2f}" if before and after is not None else "—"
            show = (lambda _, v: _number(v)) if suffix else fmt
            cells += [show(row, before), show(row, after), ratio]
        for side in (ref, head):
            ours, plain = side.median((db, row, "ours")), side.median((db, row, "plain"))
            cells.append(f"{ours / plain:.2f}" if ours is not None and plain else "—")
        if any(cell not in ("—", "") for cell in cells[1:]):
            out.add_row(*cells)
    return out


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def main(
    ref: str,
    options: list[str],
    runs: int,
    rows: list[tuple[str, str]],
    machine: str,
    fmt: Callable[[str, Any], str],
) -> int:
    """Build REF, run both sides `runs` times in turn, and print the comparison."""
    other = build(commit_of(ref))
    head = Side("HEAD", sys.executable, ROOT)
    for run in range(runs):
        for side in (other, head) if run % 2 == 0 else (head, other):
            side.run(options)
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 240)
    databases = sorted({key[0] for side in (other, head) for key in side.values}, reverse=True)
    for db in databases:
        out.print(table(other, head, db, rows, fmt))
    out.print(
        f"machine: {machine}. Medians of {runs} interleaved run{'s' if runs > 1 else ''} per "
        "side; HEAD/REF above 1 is faster for jobs/s and slower for CPU per job."
    )
    errors = other.errors + head.errors
    for error in errors:
        out.print(f"[red]error:[/] {error}")
    return 1 if errors else 0


def dump(
    path: str,
    values: dict[tuple[str, str, str], list[float]],
    errors: list[str],
    labels: dict[str, Any],
) -> None:
    """Write one run's figures for `--compare` to read."""
    data = {
        "values": [[*key, list(items)] for key, items in values.items()],
        "errors": errors,
        "labels": labels,
    }
    Path(path).write_text(json.dumps(data))
