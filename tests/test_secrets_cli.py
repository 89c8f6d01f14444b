"""No fragment of a password reaches the CLI's output, whatever quotes it and wherever.

The application's own setup fails on the URL (psycopg's parser, urllib, its own message)
at import, in the target function or in a container resource: the CLI prints the error,
or an unexpected one's traceback, without any four characters of the password.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest
from typer.testing import CliRunner

from proletarian_di._store.secrets import RedactingStream, Redactor
from proletarian_di.cli import app

FIXTURES = Path(__file__).parent / "cli_fixtures"
runner = CliRunner()

PASSWORDS = [
    "Hunter2%zzSecret",
    "Xq7%zz",
    "Wq%4Kv%zzYtr9",
    "pa@ssWq@rdXy",
    "cq:lon:Zxyw",
    "sl/ash/Qxzw0",
    "qu'o\"teZxq",
    "ünïcødéQxzwä",
    "ünï%C3%A9Qx%zz",
    "spa ce Qxzw",
    "hash#Frag?Qxzw",
    "back\\slQx\\zw",
    "semi;colon,Qxz=w",
    "ZZ%41%42Qxzw%",
]
PARSERS = ["psycopg", "urllib", "own"]
BRANCHES = {
    # where the failure happens -> (target, extra environment, exit code)
    "import": ("failingapp:target", {"FAILING_APP_AT_IMPORT": "1"}, 3),
    "target": ("failingapp:target", {}, 4),
    "resource": ("failingapp:container", {}, None),
}


def fragments(password: str) -> set[str]:
    """Every run of four characters or more of the password, raw and percent-decoded."""
    found = set()
    for text in {password, unquote(password)}:
        found |= {text[i:j] for i in range(len(text)) for j in range(i + 4, len(text) + 1)}
    return found


def leaked(password: str, output: str) -> list[str]:
    return sorted(f for f in fragments(password) if f in output)


def url_with(password: str) -> str:
    return f"postgresql://appuser:{password}@127.0.0.1:5432/appdb"


def run_worker(branch: str, env: dict[str, str]):
    target, extra, _ = BRANCHES[branch]
    env = {"FAILING_APP_AT_IMPORT": "0", **extra, **env}
    sys.modules.pop("failingapp", None)
    return runner.invoke(app, ["worker", target, "--path", str(FIXTURES)], env=env)


def output_of(result) -> str:
    return result.stdout + result.stderr


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("password", PASSWORDS)
def test_no_fragment_of_the_url_password_is_printed(password, parser, branch):
    result = run_worker(
        branch, {"FAILING_APP_URL": url_with(password), "FAILING_APP_PARSER": parser}
    )
    text = output_of(result)
    code = BRANCHES[branch][2]
    if parser == "psycopg" and branch != "import" and "malformed" in result.stderr:
        code = 2  # psycopg refused the URL: a usage error, one line
    assert result.exit_code == (code if code is not None else result.exit_code) != 0, text
    assert not leaked(password, text), text


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("password", PASSWORDS)
def test_no_fragment_of_a_password_variable_is_printed(password, branch):
    result = run_worker(
        branch, {"FAILING_APP_PASSWORD": password, "FAILING_APP_PARSER": "password"}
    )
    text = output_of(result)
    assert result.exit_code != 0 and "***" in text, text
    assert not leaked(password, text), text


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://127.0.0.1/appdb?user=appuser&password=Qx%zzSecretive",
        "host=127.0.0.1 user=appuser password='Qx%zz Secretive'",
        "host=127.0.0.1 password=Qx%zzSecretive dbname=appdb",
        "mysql://appuser:Qx%zz@Secretive@127.0.0.1:3306/appdb",
    ],
)
@pytest.mark.parametrize("parser", PARSERS)
def test_passwords_in_query_parameters_and_conninfo_strings_too(url, parser):
    password = "Qx%zz Secretive" if "'" in url else url.split("password=")[-1].split(" ")[0]
    if url.startswith("mysql"):
        password = "Qx%zz@Secretive"
    result = run_worker("resource", {"FAILING_APP_URL": url, "FAILING_APP_PARSER": parser})
    text = output_of(result)
    assert result.exit_code != 0
    assert not leaked(password, text), text


def test_the_unexpected_error_branch_still_shows_the_traceback_redacted():
    password = "Hunter2%zzSecret"
    url = url_with(password)
    result = run_worker("resource", {"FAILING_APP_URL": url, "FAILING_APP_PARSER": "own"})
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "cannot use postgresql://appuser:***@127.0.0.1:5432/appdb" in result.stderr
    assert not leaked(password, output_of(result))


@pytest.mark.parametrize("branch", ["target", "resource"])
@pytest.mark.parametrize("password", ["Hunter2%zzSecret", "Hunter2%C3Secret", "Hunter2%Secret"])
def test_a_url_psycopg_refuses_is_one_line_and_exit_2(branch, password):
    """The application's own psycopg refuses its URL (a bad percent escape): one line naming
    libpq's reason without the data it quotes, the usage error's code, no traceback."""
    result = run_worker(branch, {"FAILING_APP_URL": url_with(password)})
    assert result.exit_code == 2, output_of(result)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: malformed PostgreSQL URL or conninfo: "), line
    assert "Traceback" not in output_of(result) and not leaked(password, output_of(result))


@pytest.mark.parametrize("scheme", ["postgresql", "mysql"])
def test_a_malformed_url_of_the_workers_pool_is_one_line_and_exit_2(scheme):
    """`di.postgres_pool` and `di.mysql_data_source` refuse a password with `%zz` alike: one
    line, exit 2, the password masked."""
    password = "Hunter2%zzSecret"
    sys.modules.pop("workerapp", None)
    result = runner.invoke(
        app,
        ["worker", "workerapp:Container", "--path", str(FIXTURES)],
        env={"TEST_DATABASE_URL": f"{scheme}://appuser:{password}@127.0.0.1:1/appdb"},
    )
    assert result.exit_code == 2, output_of(result)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: malformed ") and "appuser:***@127.0.0.1:1/appdb" in line
    assert not leaked(password, output_of(result))


def test_a_url_given_as_an_option_is_redacted_too(tmp_path):
    """--database-url's password is learnt from the command line: a message quoting it
    (here the malformed URL's own error) shows none of it."""
    password = "Hunter2%zzSecret"
    result = runner.invoke(
        app, ["stats", "--database-url", url_with(password)], env={"DATABASE_URL": None}
    )
    assert result.exit_code == 2
    assert not leaked(password, output_of(result))


@pytest.mark.parametrize("branch", ["import", "resource"])
def test_the_real_command_redacts_its_streams(branch):
    """The console script, in its own process: what reaches the real stdout and stderr."""
    password = "Hunter2%zzSecret"
    target, extra, _ = BRANCHES[branch]
    env = {
        **os.environ,
        "FAILING_APP_URL": url_with(password),
        "FAILING_APP_AT_IMPORT": "0",
        **extra,
    }
    done = subprocess.run(
        [sys.executable, "-m", "proletarian_di.cli", "worker", target, "--path", str(FIXTURES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    text = done.stdout + done.stderr
    assert done.returncode == {"import": 3, "resource": 2}[branch], text
    assert "invalid percent-encoded token" in text
    assert not leaked(password, text), text


@pytest.mark.parametrize(
    "target", ["failingapp:hardcoded_target", "failingapp:hardcoded_container"]
)
def test_a_url_the_app_writes_in_its_code_is_masked(target):
    """A URL no variable names is still masked where a message quotes it whole."""
    sys.modules.pop("failingapp", None)
    result = runner.invoke(app, ["worker", target, "--path", str(FIXTURES)], env={})
    text = output_of(result)
    assert result.exit_code != 0
    assert "postgresql://appuser:***@db.internal:5432/appdb" in text, text
    assert "Hard%zzCoded9" not in text and "Coded9" not in text


# The redactor and its stream, directly ------------------------------------------------------


def test_the_redactor_hides_fragments_a_parser_may_quote():
    redactor = Redactor.from_environ({"APP_URL": url_with("Hunter2%zzSecret"), "HOME": "/x"})
    for quoted in ("Hunter2%zzSecret", "Hunter2", "zzSecret", "%zzSecret", "Hunter2%25zzSecret"):
        assert redactor(f'token: "{quoted}"') == 'token: "***"', quoted
    assert redactor("nothing secret here") == "nothing secret here"


def test_variables_that_hold_no_secret_are_ignored():
    redactor = Redactor.from_environ(
        {
            "PWD": "/home/someone",
            "PATH": "/usr/bin",
            "USER": "bob",
            "USE_SECRETS": "true",
            "TOKEN_TTL": "3600",
            "HOME_URL": "https://example.com/x",
        }
    )
    assert not redactor
    text = '/home/someone /usr/bin bob {"paused": true, "ttl": 3600} https://example.com/x'
    assert redactor(text) == text


def test_a_password_variable_is_hidden_whole_and_in_pieces():
    redactor = Redactor.from_environ({"APP_DB_PASSWORD": "Blue%Whale:Sings"})
    assert redactor("pw Blue%Whale:Sings, Whale:Sings, Blue%Whale") == "pw ***, ***, ***"


def test_the_stream_takes_bytes_too():
    target = io.StringIO()
    redactor = Redactor()
    redactor.add_secret("Hunter2zz")
    stream = RedactingStream(target, redactor)
    stream.write(b"a Hunter2zz\n")
    assert target.getvalue() == "a ***\n"


def test_the_stream_redacts_a_secret_written_in_pieces():
    target = io.StringIO()
    redactor = Redactor()
    redactor.add_secret("Hunter2%zzSecret")
    stream = RedactingStream(target, redactor)
    stream.write("a Hunt")
    stream.write("er2%zzSec")
    stream.write("ret b\nnext ")
    assert target.getvalue() == "a *** b\n"
    stream.flush()
    assert target.getvalue() == "a *** b\nnext "
