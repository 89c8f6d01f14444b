"""The default log writes one line per event, whatever the job's data holds.

A job type, a queue or an error message with a newline, a quote, `=` or control characters
cannot end the line, pass for another field or event, or drive the terminal.
"""

from __future__ import annotations

import io
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from proletarian_di import process_next_job
from proletarian_di._common.logging import escape_controls, log_fields, log_value

from backends import enqueue_committed

FORGED = "welcome\nevent=fake job_type=other\r\x1b[2K"
FIELD = re.compile(r'([^=\s]+)=("(?:[^"\\]|\\.)*"|\S*)')


def unquoted(value: str) -> str:
    """A logfmt value back as text (the test's own reader)."""
    if not value.startswith('"'):
        return value
    return value[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")


def fields(line: str) -> dict[str, str]:
    return {key: unquoted(value) for key, value in FIELD.findall(line)}


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """What the `proletarian_di` logger writes, message only, one record after another."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("proletarian_di")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def test_a_newline_in_a_job_type_cannot_forge_an_event(backend, pool, log_lines):
    enqueue_committed(backend, (FORGED, {}))
    assert process_next_job(pool, lambda job_type, payload: None) is True
    lines = log_lines.getvalue().splitlines()
    assert len(lines) == 1, lines
    [line] = lines
    assert line.startswith("job_finished ")
    assert not any(part.startswith("event=fake") for part in line.split(" ")[1:2])
    assert "\x1b" not in line and "\r" not in line
    assert fields(line)["job_type"] == FORGED, "the value reads back exactly"


def test_a_failing_job_logs_each_event_on_one_line(backend, pool, log_lines):
    enqueue_committed(backend, (FORGED, {}))

    def fail(job_type: str, payload: Any) -> None:
        raise ValueError('bad "input"\nevent=fake')

    assert process_next_job(pool, fail) is False
    text = log_lines.getvalue()
    starts = [line for line in text.splitlines() if line.startswith(("job_failed", "event="))]
    assert [line.split(" ")[0] for line in starts] == ["job_failed"], text
    assert fields(starts[0])["exception"] == "ValueError: " + 'bad "input"\nevent=fake'


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("plain", "plain"),
        ("", '""'),
        ("two words", '"two words"'),
        ("a=b", '"a=b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("it's", '"it\'s"'),
        ("back\\slash", '"back\\\\slash"'),
        ("line\nbreak", '"line\\nbreak"'),
        ("cr\rtab\t", '"cr\\rtab\\t"'),
        ("esc\x1b[2J", '"esc\\x1b[2J"'),
        ("del\x7f c1\x9b", '"del\\x7f c1\\x9b"'),
        ("bidi\u202e ls\u2028", '"bidi\\u202e ls\\u2028"'),
        (42, "42"),
        ("ünïcode", "ünïcode"),
    ],
)
def test_values_are_quoted_and_escaped(value, written):
    assert log_value(value) == written
    assert unquoted(written) == str(value)


def test_fields_cannot_pass_for_other_fields():
    line = log_fields({"job_type": "x queue=evil", "queue": "default"})
    assert fields(line) == {"job_type": "x queue=evil", "queue": "default"}


def test_a_value_whose_str_fails_is_still_logged():
    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert log_value(Broken()) == '"<unprintable Broken>"'


def test_escape_controls_keeps_only_what_it_is_told():
    assert escape_controls("a\nb\tc\x1bd") == "a\\nb\\tc\\x1bd"
    assert escape_controls("a\nb\tc\x1bd", keep="\n\t") == "a\nb\tc\\x1bd"


def test_the_dashboard_log_is_one_line_too(caplog):
    pytest.importorskip("starlette")
    from proletarian_di.contrib.dashboard._app import default_log

    class Odd:
        def __repr__(self) -> str:
            return "x\nevent=fake\x1b[2J"

    with caplog.at_level(logging.INFO, logger="proletarian_di.dashboard"):
        default_log("dashboard_action", {"user": "eve\nevent=fake", "what": Odd()})
    [record] = [r for r in caplog.records if r.name == "proletarian_di.dashboard"]
    message = record.getMessage()
    assert "\n" not in message and "\x1b" not in message
    assert message.startswith("dashboard_action user='eve\\nevent=fake' what=x\\nevent=fake")


def test_the_cli_worker_log_writes_controls_out():
    from proletarian_di.contrib.cli._app import LOG_FORMAT, TerminalFormatter

    try:
        raise RuntimeError("boom \x1b]0;owned\x07")
    except RuntimeError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "proletarian_di", logging.ERROR, __file__, 1, "job_failed %s", ("x\x1b[2J",), exc_info
    )
    text = TerminalFormatter(LOG_FORMAT).format(record)
    assert "\x1b" not in text and "\x07" not in text
    assert "job_failed x\\x1b[2J" in text and "RuntimeError: boom \\x1b]0;owned\\x07" in text
    assert "Traceback (most recent call last):\n" in text
