"""The `proletarian-di` command: run workers, manage the schema, inspect and repair queues.

Exit codes: 0 success, 1 unexpected error, 2 usage error, 3 module not
importable, 4 target not runnable, 5 database unreachable or unsupported,
6 schema missing, 7 worker stopped but abandoned jobs, 8 a health reading past its
threshold (`doctor`), 128+N when a second signal N ends a worker at once.
"""

from . import admin, archive, dashboard, demo, doctor, jobs, periodic, queue, worker, workers  # noqa: F401  (they register their commands)
from ._app import app


def main() -> None:
    """Console-script entry point."""
    app(prog_name="proletarian-di")


__all__ = ["app", "main"]
