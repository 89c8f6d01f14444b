"""The public API is typed: mypy accepts correct use and rejects misspelt or mistyped options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

HERE = Path(__file__).parent / "typing"
MARK = re.compile(r"#\s*E:\s*(.+)$")


def mypy(path: Path, cache: Path) -> list[str]:
    stdout, stderr, _ = api.run(
        [str(path), "--cache-dir", str(cache), "--no-error-summary", "--show-error-codes"]
    )
    assert not stderr, stderr
    return [line for line in stdout.splitlines() if ": error:" in line]


def test_typed_usage_passes(tmp_path):
    assert mypy(HERE / "usage_ok.py", tmp_path) == []


def test_every_mistake_is_an_error(tmp_path):
    path = HERE / "usage_bad.py"
    errors = mypy(path, tmp_path)
    expected = {
        number: match.group(1).strip()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if (match := MARK.search(line))
    }
    assert len(expected) == 10
    for number, text in expected.items():
        found = [e for e in errors if f"{path.name}:{number}:" in e]
        assert found and any(text in e for e in found), (number, text, errors)
    unexpected = [e for e in errors if not any(f":{n}:" in e for n in expected)]
    assert unexpected == []
