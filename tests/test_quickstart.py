"""The quickstart works as written: its example runs, and its install commands work.

proletarian-di is not on PyPI, so the docs install it from a checkout (`pip install -e
".[extras]"`) or from a wheel built in one. `test_quickstart_from_a_wheel` follows the
Quickstart's own commands: it builds the wheel from a copy of this checkout, installs it
with the extras into a fresh venv, and runs the Quickstart's Python there.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_docs import fenced_blocks, python_blocks

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
QUICKSTART = DOCS / "quickstart.md"
PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # no tomllib on 3.10
VERSION = re.search(r'^version = "([^"]+)"', PYPROJECT, flags=re.M).group(1)
EXTRAS = set(
    re.findall(
        r"^([\w-]+) = \[",
        PYPROJECT.split("[project.optional-dependencies]")[1].split("\n[")[0],
        flags=re.M,
    )
)
WHEEL = f"dist/proletarian_di-{VERSION}-py3-none-any.whl"
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".pgdata", "site", ".*cache"
)


def test_quickstart_runs(pg):
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        env={**pg.env(), "DATABASE_URL": pg.url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "flaky@example.com      success  attempts=3" in result.stdout
    assert "bounce@example.com     failure  attempts=1" in result.stdout
    assert (
        "{'succeeded': 3, 'failed': 1, 'retried': 2, 'abandoned': 0, 'timed_out': 0, "
        "'snoozed': 0, 'cancelled': 0}" in result.stdout
    )


# Every install command of the docs works without PyPI ----------------------------------


def documented_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def pip_commands(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Every `pip install`/`pip wheel` of a page, in code blocks or inline code, as argv."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for match in re.finditer(r"(?:^|`|&&\s*)\s*(pip (?:install|wheel)\b[^`#]*)", line):
            yield number, shlex.split(match.group(1).replace("&&", " && ").split(" && ")[0])


def requirements(argv: list[str]) -> list[str]:
    args, found, skip = argv[2:], [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-w", "--wheel-dir", "-r", "-c", "--find-links", "-f"):
            skip = True
        elif arg == "-e" or arg.startswith("-"):
            continue
        else:
            found.append(arg)
    return found


def test_every_install_command_works_from_a_checkout() -> None:
    """No page tells a reader to install proletarian-di from PyPI, where it is not; each
    install names the checkout (`.`) or the wheel built from it, with extras that exist."""
    seen = 0
    for page in documented_pages():
        for line, argv in pip_commands(page):
            where = f"{page.relative_to(ROOT)}:{line}: {shlex.join(argv)}"
            for req in requirements(argv):
                base, _, extras = req.partition("[")
                if base not in (".", WHEEL) and "proletarian" not in base.lower():
                    continue  # another package (build, …) from PyPI
                seen += 1
                assert base in (".", WHEEL), (
                    f"{where}: proletarian-di is not on PyPI; install it from a checkout "
                    f'(pip install -e ".[…]") or from {WHEEL}'
                )
                if base == WHEEL:
                    assert argv[1] == "install", where
                named = {e for e in extras.rstrip("]").split(",") if e}
                assert named <= EXTRAS, f"{where}: no such extra {sorted(named - EXTRAS)}"
    assert seen >= 10, f"only {seen} installs of proletarian-di found in the docs"


# The Quickstart's wheel path, end to end -------------------------------------------------


def install_commands() -> tuple[list[list[str]], list[list[str]]]:
    """The Quickstart's step 1: the checkout's commands, and the wheel's."""
    text = QUICKSTART.read_text(encoding="utf-8")
    step = text[text.index("## 1. Install") : text.index("## 2.")]
    blocks = [b for b in fenced_blocks(QUICKSTART) if b.code in step and b.lang == "bash"]
    commands = []
    for block in blocks:
        lines = [line.split("#")[0].strip() for line in block.code.splitlines()]
        commands.append([shlex.split(line) for line in lines if line.startswith("pip ")])
    checkout = [c for c in commands if any(argv[:3] == ["pip", "install", "-e"] for argv in c)]
    wheel = [c for c in commands if any(argv[:2] == ["pip", "wheel"] for argv in c)]
    assert checkout, "the Quickstart's step 1 has no checkout install (pip install -e …)"
    assert wheel, "the Quickstart's step 1 has no wheel install (pip wheel …)"
    return checkout[0], wheel[0]


@pytest.fixture
def scratch() -> Iterator[Path]:
    """World-readable: the embedded server may run as another system user under root, and
    must read its binaries in the venv and its data directory."""
    path = Path(tempfile.mkdtemp(prefix="proletarian-quickstart-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{shlex.join(argv)} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.db
@pytest.mark.timeout(600)
def test_quickstart_from_a_wheel(scratch: Path) -> None:
    checkout_commands, wheel_commands = install_commands()
    checkout = scratch / "proletarian-di"
    shutil.copytree(ROOT, checkout, ignore=NOT_COPIED)
    venv = scratch / "venv"
    run([sys.executable, "-m", "venv", str(venv)], scratch)
    python = str(venv / "bin" / "python")

    for argv in wheel_commands:  # pip wheel …, then pip install dist/….whl[extras]
        if argv[1] == "install":
            assert (checkout / WHEEL).is_file(), (
                f"the Quickstart installs {WHEEL}, but the build made "
                f"{sorted(p.name for p in (checkout / 'dist').glob('*'))}"
            )
        run([python, "-m", "pip", *argv[1:]], checkout)

    workdir = scratch / "session"
    workdir.mkdir()
    workdir.chmod(0o755)
    where = run([python, "-c", "import proletarian_di; print(proletarian_di.__file__)"], workdir)
    assert str(venv) in where.stdout, f"not imported from the wheel: {where.stdout}"

    session = workdir / "quickstart.py"
    session.write_text(
        "\n\n".join(block.code for block in python_blocks(QUICKSTART)), encoding="utf-8"
    )
    result = run([python, str(session)], workdir, timeout=180)
    assert "Welcome, ada@example.com!" in result.stdout, result.stdout + result.stderr

    for argv in checkout_commands:  # the checkout's editable install, in the same venv
        run([python, "-m", "pip", *argv[1:]], checkout)
    where = run([python, "-c", "import proletarian_di; print(proletarian_di.__file__)"], workdir)
    assert str(checkout) in where.stdout, f"not imported from the checkout: {where.stdout}"
