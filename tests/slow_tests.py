"""The multi-minute scenarios, marked `slow`: left out of a run (deselected, not skipped)
unless it is given `--slow`. Each such scenario has a smaller variant in every run, so
that every behaviour is still tried on both databases; `.ci/run` runs the slow ones in a
step of their own."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="run the multi-minute scenarios (marked slow) too",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "slow: a multi-minute scenario, run only with --slow (its smaller variant runs always)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
