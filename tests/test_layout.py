"""The package's layers, as docs/internals.md draws them: which folder may import which, no
import circles, frameworks only in `contrib/`, and the public names of earlier releases still
importable from where they were.

Imports are read from the source (every `import` and `from ... import`, in functions too);
only those under `if TYPE_CHECKING:` are left out, as they never run.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
from collections.abc import Iterator

import pytest

import proletarian_di

PACKAGE = pathlib.Path(proletarian_di.__file__).parent

FOUNDATION = ("errors", "jobs", "job_ids", "retry", "serializers", "observers", "_common")
"""What every layer stands on: the public vocabulary (a job, its errors, retries, payload
encodings, observers) and `_common` (the types and checks they are written in)."""
SHIMS = ("cli", "di", "fastapi", "embedded")
"""Root modules that only re-export an integration from `contrib/`."""
FRAMEWORKS = (
    "django",
    "fastapi",
    "jinja2",
    "prometheus_client",
    "rich",
    "starlette",
    "typer",
    "uvicorn",
    "yaml",
)
"""What only `contrib/` imports: the frameworks it integrates with, and what they bring."""
OPTIONAL = ("dependency_injector", "opentelemetry")
"""What the core imports only in a function, where the caller has shown it is there (a
container to traverse, a span already started)."""

ALLOWED: dict[str, tuple[str, ...]] = {
    "foundation": FOUNDATION,
    "_store": (*FOUNDATION, "_store"),
    "_engine": (*FOUNDATION, "_store", "_engine"),
    "schema": (*FOUNDATION, "_store", "schema"),
}
"""Each lower layer and the top-level names it may import; the rest (admin, the public
modules at the root, contrib) may import any of these."""


def layer(module: str) -> str:
    """The layer of a module named relative to the package (`_engine.steps` -> `_engine`)."""
    top = module.split(".")[0]
    if top in FOUNDATION:
        return "foundation"
    return top


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = modules()


class _Imports(ast.NodeVisitor):
    """Every import of a module, as (imported name, line), skipping `if TYPE_CHECKING:`."""

    def __init__(self, module: str, is_package: bool, *, late: bool = True) -> None:
        self.package = module.split(".") if is_package else module.split(".")[:-1]
        if module == "":
            self.package = []
        self.late = late
        self.found: list[tuple[str, int]] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if self.late:
            self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [(alias.name, node.lineno) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = ["proletarian_di", *self.package][: len(self.package) + 2 - node.level]
            name = ".".join(base + ([node.module] if node.module else []))
        else:
            name = node.module or ""
        for alias in node.names:
            submodule = f"{name}.{alias.name}"
            inner = submodule.removeprefix("proletarian_di.")
            self.found.append((submodule if inner in MODULES else name, node.lineno))


def imports(module: str, *, late: bool = True) -> list[tuple[str, int]]:
    """What `module` imports; with `late=False`, only what it imports when it is imported."""
    path = MODULES[module]
    visitor = _Imports(module, path.name == "__init__.py", late=late)
    visitor.visit(ast.parse(path.read_text(), str(path)))
    return visitor.found


def internal_imports(module: str) -> Iterator[tuple[str, int]]:
    """The package's own modules that `module` imports (relative names), with their lines."""
    for name, line in imports(module):
        if name == "proletarian_di":
            yield "", line
        elif name.startswith("proletarian_di."):
            inner = name.removeprefix("proletarian_di.")
            while inner and inner not in MODULES:
                inner = inner.rpartition(".")[0]
            yield inner, line


def graph() -> dict[str, set[str]]:
    return {m: {i for i, _ in internal_imports(m)} - {m} for m in MODULES}


def test_the_lower_layers_import_only_what_lies_below_them() -> None:
    broken = []
    for module in MODULES:
        allowed = ALLOWED.get(layer(module))
        if allowed is None:
            continue
        for imported, line in internal_imports(module):
            top = imported.split(".")[0]
            if top not in allowed and layer(imported) != layer(module):
                broken.append(f"{MODULES[module].relative_to(PACKAGE)}:{line} imports {imported}")
    assert broken == []


def test_nothing_outside_contrib_imports_contrib_but_the_shims() -> None:
    broken = [
        f"{MODULES[module].relative_to(PACKAGE)}:{line} imports {imported}"
        for module in MODULES
        if not module.startswith("contrib") and module not in SHIMS
        for imported, line in internal_imports(module)
        if imported.startswith("contrib")
    ]
    assert broken == []


def test_the_shims_only_reexport_contrib() -> None:
    for shim in SHIMS:
        assert {i.split(".")[0] for i, _ in internal_imports(shim)} == {"contrib"}, shim


def test_admin_never_imports_the_cli_or_the_dashboard() -> None:
    assert [
        (module, imported)
        for module in MODULES
        if module.startswith("admin")
        for imported, _ in internal_imports(module)
        if imported.startswith("contrib") or imported in SHIMS
    ] == []


def test_frameworks_are_imported_only_in_contrib() -> None:
    broken = [
        f"{MODULES[module].relative_to(PACKAGE)}:{line} imports {name}"
        for module in MODULES
        if not module.startswith("contrib")
        for name, line in imports(module)
        if name.split(".")[0] in FRAMEWORKS
        or (name.split(".")[0] in OPTIONAL and (name, line) in imports(module, late=False))
    ]
    assert broken == []


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_cycles_finds_a_circle_it_is_shown() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circles() -> None:
    assert cycles(graph()) == []


def test_a_late_import_counts_as_an_import() -> None:
    visitor = _Imports("_engine.rates", False)
    visitor.visit(
        ast.parse(
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from ..worker import QueueWorker\n"
            "def f():\n    from ..schema import UPGRADE_HINT\n"
        )
    )
    assert [name for name, _ in visitor.found] == ["typing", "proletarian_di.schema"]


def test_the_root_holds_only_the_public_face_and_the_packages() -> None:
    root = sorted(
        path.stem if path.is_file() else path.name + "/"
        for path in PACKAGE.iterdir()
        if path.name not in ("__pycache__", "py.typed")
    )
    private_modules = [name for name in root if name.startswith("_") and not name.endswith("/")]
    assert private_modules == ["__init__"]


PUBLIC_NAMES = {
    "proletarian_di": (
        "ArgumentTypeError BinaryUUIDStrategy Cancel ConfigurationError CrashLoop DEFAULT_QUEUE "
        "DataSource DatabaseURLError EmbeddedPostgresUnavailable EnqueueOptions HandlerMode "
        "InvalidRetrySpec JSONSerializer Job JobAbandoned JobIdStrategy JobRouter JobTimedOut "
        "LeaseExpired MySQLDataSource NoCurrentJob PayloadError PeriodicJob ProletarianError "
        "QueueWorker RateLimit RetrySpec Scheduler SchemaError Serializer Snooze "
        "TransactionAborted UUIDStrategy UnknownJobType UnsupportedDatabase WorkerOptions "
        "WorkerStateError Workflow WorkflowJob create_queue_worker create_scheduler current_job "
        "enqueue enqueue_async enqueue_many install_schema process_next_job worker_running"
    ),
    "proletarian_di.admin": (
        "Attempt BATCH_SIZE DEFAULT_TABLES ErrorGroup ErrorGroups Explanation HEADLINE_CHARS "
        "HourlyOutcomes JobInfo JobPage JobSearch MAX_EXAMINED MAX_LIMIT OverviewPage Pruned "
        "QueueOverview QueueStats SEARCH_FIELDS SEARCH_ROWS STALE_AFTER STATES Tables "
        "ThroughputBucket Timing TimingsPage WorkerInfo WorkerThread WorkflowInfo cancel_jobs "
        "check "
        "delete_archived discard_failed error_headline explain_job failure_groups find_jobs "
        "get_job get_result get_workflow id_fragment in_batches list_jobs list_jobs_page "
        "list_schedules list_workers missing_columns overview overview_page pause_queue "
        "paused_queues prune_archive prune_workers purge_archive queue_stats recent_failures "
        "resume_queue retry_failed retry_jobs still_needed throughput timings timings_page waiting"
    ),
    "proletarian_di.schema": (
        "DEFAULT_ARCHIVED_JOB_TABLE DEFAULT_JOB_TABLE LATEST MIGRATIONS Migration "
        "NO_PAD_COLLATION OLD_MYSQL_COLLATION PAUSED_TABLE_SUFFIX PERIODIC_TABLE_SUFFIX "
        "UPGRADE_HINT VERSION_TABLE_SUFFIX WORKERS_NEED WORKERS_TABLE_SUFFIX attempt_table "
        "blocked_table check_schema check_table_name claims_table dependencies_table "
        "finished_index install_schema migration migration_file outcomes_table paused_table "
        "pending_migrations periodic_table rate_table results_table schema_file schema_sql "
        "schema_version statements unique_index upgrade_schema version_table workers_table "
        "workflows_table"
    ),
    "proletarian_di.serializers": (
        "Char DEFAULT_SERIALIZER JSONSerializer Keyword Serializer Symbol TaggedValue "
        "TransitSerializer URI check_serializer"
    ),
    "proletarian_di.mysql": "DEFAULT_OPTIONS MySQLDataSource mask parse_mysql_url",
}
"""The public names of the release before the package took its folders (0.x, before the
layout): each must still import from where it did."""


@pytest.mark.parametrize("module", sorted(PUBLIC_NAMES))
def test_the_public_names_of_earlier_releases_still_import(module: str) -> None:
    imported = importlib.import_module(module)
    missing = [name for name in PUBLIC_NAMES[module].split() if not hasattr(imported, name)]
    assert missing == []


def test_every_folder_of_modules_is_a_package() -> None:
    """A folder without `__init__.py` would be a namespace package, which a wheel leaves out."""
    folders = {path.parent for path in PACKAGE.rglob("*.py")}
    assert (
        sorted(str(f.relative_to(PACKAGE)) for f in folders if not (f / "__init__.py").exists())
        == []
    )
