"""The wheel: built with no warning from the build backend, and holding the dashboard's files."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "proletarian_di" / "contrib" / "dashboard"

# A build backend's warnings (setuptools' `_Warning:`, `SetuptoolsDeprecationWarning:`, ...);
# not pip's own `WARNING:` lines about this machine's package index.
BUILD_WARNING = re.compile(r"[A-Za-z_]*Warning\b")


def test_the_wheel_builds_with_no_warning_and_holds_the_dashboard_files(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "proletarian_di",
        source / "proletarian_di",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    out = tmp_path / "wheel"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-v"]
    build = subprocess.run(
        [*pip_wheel, "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = build.stdout + build.stderr
    assert build.returncode == 0, log
    warnings = [line for line in log.splitlines() if BUILD_WARNING.search(line)]
    assert not warnings, "\n".join(warnings)

    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    expected = {
        path.relative_to(ROOT).as_posix()
        for folder in ("templates", "static")
        for path in (DASHBOARD / folder).iterdir()
        if path.is_file()
    }
    assert any(name.endswith(".html") for name in expected)
    assert any(name.endswith(".css") for name in expected)
    assert expected <= names, sorted(expected - names)
    assert "proletarian_di/py.typed" in names
    assert not [name for name in names if "__pycache__" in name]
