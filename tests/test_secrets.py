"""No part of a password ever shows: masks, URL parsing, the DI resources, the CLI and the logs.

A table of nasty passwords (each with its own marker) goes through every path,
well-formed or not; no 4-character fragment of a password, as written or
percent-decoded, may appear in an output, an exception message or a log record.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import unquote

import pytest
from psycopg.conninfo import conninfo_to_dict
from typer.testing import CliRunner

from proletarian_di._store.secrets import mask as secrets_mask
from proletarian_di._store.secrets import passwords, postgres_problem, scrub
from proletarian_di.cli import app
from proletarian_di.di import mysql_data_source, postgres_pool
from proletarian_di.errors import ConfigurationError
from proletarian_di.mysql import MySQLDataSource, mask, parse_mysql_url

PASSWORDS = [
    pytest.param("Hq1#Hx2Pw9", id="hash"),
    pytest.param("Sq1/Sx2Pw9", id="slash"),
    pytest.param("Qq1?Qx2Pw9", id="question"),
    pytest.param("Aq1@Ax2Pw@Aq3", id="at"),
    pytest.param("Cq1:Cx2:Pw9", id="colon"),
    pytest.param("Pq1%zzPx2Pw9", id="bad-escape"),
    pytest.param("Lq1Lx2Pw9%", id="lone-percent"),
    pytest.param("Eq1%40Ex2%2FPw9", id="percent-encoded"),
    pytest.param("Mq1&Mx2Pw=Mq3", id="ampersand-equals"),
    pytest.param("Wq1 Wx2 Pw9", id="spaces"),
    pytest.param("Uq1'Ux2\"Uq3", id="quotes"),
    pytest.param("Bq1\\Bx2\\Pw9", id="backslash"),
    pytest.param("Nq1ÄÖü2Pwé€Zz", id="non-ascii"),
    pytest.param("Xq1#/?@:%zz&= '\"\\é2Pw9", id="everything"),
]
HOST = "127.0.0.1"
UNREACHABLE = f"{HOST}:1"
MYSQL_USER = "proletarian_secrets"

runner = CliRunner()


def fragments(password: str) -> set[str]:
    """Every 4-character piece of the password, as written and percent-decoded."""
    forms = {password, unquote(password)}
    return {form[i : i + 4] for form in forms for i in range(len(form) - 3)}


def assert_hidden(password: str, *texts: object) -> None:
    """Fail naming the fragments of the password that show in any of the texts."""
    for text in texts:
        shown = [piece for piece in fragments(password) if piece in str(text)]
        assert not shown, f"{shown} of the password shows in {text!r}"


def messages(exc: BaseException) -> list[str]:
    """The exception's str and repr, and the str of every exception chained to it."""
    found = [repr(exc)]
    seen: BaseException | None = exc
    while seen is not None and len(found) < 10:
        found.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    return found


def bad_escape(password: str) -> bool:
    """A '%' not followed by two hex digits: every URL parser refuses it."""
    return re.search(r"%(?![0-9A-Fa-f]{2})", password) is not None


def libpq_refuses(password: str) -> bool:
    """libpq ends the user info at the first '@' or '/', psycopg refuses spaces in a URL."""
    return bad_escape(password) or re.search(r"[/@\s]", password) is not None


def quoted(password: str) -> str:
    """The password as a single-quoted libpq conninfo value."""
    return "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"


def escaped(password: str) -> str:
    """The password as a bare libpq conninfo value, with backslash escapes."""
    return re.sub(r"([\\\s'])", r"\\\1", password)


def conninfo(value: str, where: str = f"host={HOST} port=1") -> str:
    """A libpq `key=value` conninfo with the password value written as given."""
    return f"{where} user=u password={value} dbname=db"


# mask() and scrub() ---------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["postgresql", "mysql", "mariadb"])
@pytest.mark.parametrize("password", PASSWORDS)
def test_mask_hides_the_whole_user_info_password(password, scheme):
    url = f"{scheme}://u:{password}@{UNREACHABLE}/db?sslmode=disable"
    assert mask(url) == secrets_mask(url) == f"{scheme}://u:***@{UNREACHABLE}/db?sslmode=disable"


@pytest.mark.parametrize("password", PASSWORDS)
def test_mask_hides_a_password_query_parameter(password):
    masked = mask(f"postgresql://u@{UNREACHABLE}/db?sslmode=disable&password={password}")
    assert "***" in masked
    assert_hidden(password, masked)


@pytest.mark.parametrize("form", ["quoted", "escaped"])
@pytest.mark.parametrize("password", PASSWORDS)
def test_mask_hides_a_well_formed_conninfo_password(password, form):
    text = conninfo(quoted(password) if form == "quoted" else escaped(password))
    assert conninfo_to_dict(text)["password"] == password
    assert mask(text) == f"host={HOST} port=1 user=u password=*** dbname=db"
    assert password in passwords(text)


@pytest.mark.parametrize("password", PASSWORDS)
def test_mask_hides_a_malformed_conninfo_password(password):
    for text in (
        conninfo(password),
        f"host={HOST} password='{password}",
        f"host={HOST} password = {password}",
        f"u:{password}@{UNREACHABLE}/db",
    ):
        assert "***" in mask(text)
        assert_hidden(password, mask(text))


@pytest.mark.parametrize("password", PASSWORDS)
def test_scrub_removes_every_form_of_the_password_from_a_message(password):
    url = f"postgresql://u:{password}@{UNREACHABLE}/db"
    message = (
        f"boom {password} / {unquote(password)} / {password!r} / in {url} "
        f"and password={password} and pwd='{password}'"
    )
    assert_hidden(password, scrub(message, *passwords(url)))


@pytest.mark.parametrize("password", PASSWORDS)
def test_libpq_reasons_never_quote_user_data(password):
    for text in (
        f"postgresql://u:{password}@[::1/db",
        f"postgresql://u:{password}@{UNREACHABLE}/db?nosuchoption=1",
        f"postgresql://u:{password}@{UNREACHABLE}/db?password",
        f"host={HOST} password={password}'x y",
        f"host={HOST} {password}=x",
    ):
        problem = postgres_problem(text)
        assert problem
        assert_hidden(password, problem)


# MySQL URLs and data sources -------------------------------------------------------------------


@pytest.mark.parametrize("password", PASSWORDS)
def test_parse_mysql_url_reads_the_password_or_refuses_it_masked(password):
    url = f"mysql://u:{password}@Db.Example:3307/shop"
    if bad_escape(password):
        with pytest.raises(ValueError, match=r"malformed MySQL URL mysql://u:\*\*\*@") as error:
            parse_mysql_url(url)
        assert "percent-encode" in str(error.value)
        assert_hidden(password, *messages(error.value))
    else:
        assert parse_mysql_url(url) == {
            "host": "db.example",
            "port": 3307,
            "user": "u",
            "password": unquote(password),
            "database": "shop",
        }
    for bad in (f"mysql://u:{password}@db:33o6/shop", f"mysql://u:{password}@[::1/shop"):
        with pytest.raises(ValueError) as error:
            parse_mysql_url(bad)
        assert_hidden(password, *messages(error.value))


@pytest.mark.parametrize("password", PASSWORDS)
def test_mysql_data_source_construction_never_shows_the_password(password, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ValueError) as error:
        MySQLDataSource(f"mysql://u:{password}@db:port/shop")
    assert_hidden(password, *messages(error.value))
    url = f"mysql://u:{password}@db:3307/shop"
    if bad_escape(password):
        with pytest.raises(ValueError) as error:
            MySQLDataSource(url)
        assert_hidden(password, *messages(error.value))
    else:
        source = MySQLDataSource(url, max_connections=1)
        try:
            assert repr(source) == "<MySQLDataSource mysql://u@db:3307/shop>"
            assert_hidden(password, repr(source), source.description)
        finally:
            source.close()
    assert_hidden(password, caplog.text)


@pytest.mark.parametrize("password", PASSWORDS)
def test_mysql_data_source_resource_unreachable(password, caplog):
    caplog.set_level(logging.DEBUG)
    url = f"mysql://u:{password}@{UNREACHABLE}/db"
    with pytest.raises(ConfigurationError) as error:
        next(mysql_data_source(url, connect_timeout=2))
    message = str(error.value)
    if bad_escape(password):
        assert message.startswith(f"malformed MySQL URL mysql://u:***@{UNREACHABLE}/db: ")
    else:
        assert message.startswith(f"cannot connect to MySQL at mysql://u:***@{UNREACHABLE}/db: ")
    with pytest.raises(ConfigurationError) as by_option:
        next(
            mysql_data_source(
                host=HOST, port=1, user="u", password=unquote(password), connect_timeout=2
            )
        )
    assert_hidden(password, *messages(error.value), *messages(by_option.value), caplog.text)


@pytest.fixture(scope="module")
def mysql_server(mysql_backend) -> dict[str, Any]:
    """The test MySQL server's address, with a user whose password is not in the table."""
    conn = mysql_backend.connect()
    try:
        cursor = conn.cursor()
        cursor.execute(
            f"CREATE USER IF NOT EXISTS '{MYSQL_USER}'@'%%' IDENTIFIED BY %s", ("Right-Pw-1",)
        )
        conn.commit()
    finally:
        conn.close()
    options = parse_mysql_url(mysql_backend.url)
    return {"host": options["host"], "port": options["port"]}


@pytest.mark.parametrize("password", PASSWORDS)
def test_mysql_wrong_password_on_a_real_server(password, mysql_server, caplog):
    caplog.set_level(logging.DEBUG)
    url = f"mysql://{MYSQL_USER}:{password}@{mysql_server['host']}:{mysql_server['port']}/test"
    with pytest.raises(ConfigurationError) as error:
        next(mysql_data_source(url))
    if not bad_escape(password) and unquote(password).isascii():
        assert "Access denied" in str(error.value)
    result = runner.invoke(app, ["schema", "check", "--database-url", url])
    assert result.exit_code == (2 if bad_escape(password) else 5), result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert_hidden(password, *messages(error.value), result.stdout, result.stderr, caplog.text)


# PostgreSQL pools ------------------------------------------------------------------------------


def postgres_cases(password: str) -> list[tuple[str, bool]]:
    """(conninfo, refused as malformed) for the ways a password can reach postgres_pool."""
    url_malformed = libpq_refuses(password)
    return [
        (f"postgresql://u:{password}@{UNREACHABLE}/db", url_malformed),
        (f"postgresql://u:{password}@%2Fnonexistent-proletarian-dir/db", url_malformed),
        (conninfo(quoted(password)), False),
        (conninfo(quoted(password), "host=/nonexistent-proletarian-dir"), False),
        (conninfo(escaped(password)), False),
        (conninfo(password), bool(re.search(r"\s", password))),
    ]


@pytest.mark.parametrize("password", PASSWORDS)
def test_postgres_pool_never_shows_the_password(password, caplog):
    caplog.set_level(logging.DEBUG)
    for text, refused in postgres_cases(password):
        with pytest.raises(ConfigurationError) as error:
            next(postgres_pool(text, wait_timeout=2, min_size=1, max_size=1))
        message = str(error.value)
        if refused:
            assert message.startswith("malformed PostgreSQL conninfo "), message
            assert "percent-encode" in message
        else:
            assert message.startswith(f"cannot connect to PostgreSQL at {mask(text)}: "), message
        assert "***" in message
        assert_hidden(password, *messages(error.value))
    assert_hidden(password, caplog.text)


@pytest.mark.parametrize("password", PASSWORDS)
def test_postgres_pool_hides_a_password_given_as_a_connect_argument(password):
    with pytest.raises(ConfigurationError) as error:
        next(postgres_pool(f"postgresql://u@{UNREACHABLE}/db", kwargs={"password": password}))
    assert_hidden(password, *messages(error.value))


# The CLI ---------------------------------------------------------------------------------------


def cli_exit_code(scheme: str, password: str) -> int:
    """2 for a URL refused as malformed, else 5: the server is unreachable."""
    malformed = libpq_refuses(password) if scheme == "postgresql" else bad_escape(password)
    return 2 if malformed else 5


@pytest.mark.parametrize("command", [["schema", "check"], ["stats"]])
@pytest.mark.parametrize("scheme", ["postgresql", "mysql"])
@pytest.mark.parametrize("password", PASSWORDS)
def test_cli_never_shows_the_password(password, scheme, command, caplog):
    caplog.set_level(logging.DEBUG)
    url = f"{scheme}://u:{password}@{UNREACHABLE}/db"
    result = runner.invoke(app, [*command, "--database-url", url])
    code = cli_exit_code(scheme, password)
    assert result.exit_code == code, result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.output
    assert f"{scheme}://u:***@{UNREACHABLE}/db" in result.stderr
    if code == 2:
        assert re.match(r"error: malformed (database|MySQL) URL ", result.stderr)
        assert "percent-encode" in result.stderr
    assert_hidden(password, result.stdout, result.stderr, caplog.text)


@pytest.mark.parametrize("password", PASSWORDS)
def test_cli_refuses_conninfo_and_schemeless_urls_masked(password):
    for text in (
        conninfo(quoted(password)),
        conninfo(password),
        f"u:{password}@{UNREACHABLE}/db",
        f"postgresql:/u:{password}@{UNREACHABLE}/db",
        f"POSTGRESQL+PSYCOPG://u:{password}@[::1/db",
    ):
        result = runner.invoke(app, ["stats", "--database-url", text])
        assert result.exit_code == 2, result.output
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert_hidden(password, result.stdout, result.stderr)


def test_malformed_urls_are_one_line_usage_errors():
    for url, reason in [
        ("postgresql://u:pw@127.0.0.1:port/db", "the port is not a number"),
        ("postgresql://u:pw@127.0.0.1:1/db?port=99999", "the port is not a number"),
        ("postgresql://u:S3c%zzretPW@127.0.0.1:1/db", 'invalid percent-encoded token: "…"'),
        ("postgresql://u:p@h/db?application_name=a@b", "ambiguous"),
        ("mysql://u:pw@127.0.0.1:port/db", "the port is not a number"),
        ("mysql://u:S3c%zzretPW@127.0.0.1:1/db", "not followed by two hex digits"),
    ]:
        result = runner.invoke(app, ["schema", "check", "-d", url])
        assert result.exit_code == 2, result.output
        assert re.match(r"error: malformed (database|MySQL) URL ", result.stderr)
        assert reason in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
