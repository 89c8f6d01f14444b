"""The public surface: `__all__` pinned, one error hierarchy, no submodule shadowed, and the
integration paths of the design still importable."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
import types

import proletarian_di
from proletarian_di import errors

PUBLIC = {
    "DEFAULT_QUEUE",
    "ArgumentTypeError",
    "BinaryUUIDStrategy",
    "ConfigurationError",
    "DataSource",
    "DatabaseURLError",
    "EmbeddedPostgresUnavailable",
    "EnqueueOptions",
    "HandlerMode",
    "InvalidRetrySpec",
    "JSONSerializer",
    "Job",
    "JobAbandoned",
    "JobTimedOut",
    "LeaseExpired",
    "CrashLoop",
    "JobIdStrategy",
    "JobRouter",
    "MySQLDataSource",
    "PayloadError",
    "ProletarianError",
    "PeriodicJob",
    "QueueWorker",
    "RetrySpec",
    "SchemaError",
    "Serializer",
    "TransactionAborted",
    "UUIDStrategy",
    "UnknownJobType",
    "UnsupportedDatabase",
    "WorkerOptions",
    "WorkerStateError",
    "Workflow",
    "WorkflowJob",
    "Scheduler",
    "create_queue_worker",
    "create_scheduler",
    "Cancel",
    "NoCurrentJob",
    "RateLimit",
    "Snooze",
    "current_job",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "install_schema",
    "process_next_job",
    "worker_running",
}


def test_all_is_pinned_and_importable():
    assert set(proletarian_di.__all__) == PUBLIC
    assert len(proletarian_di.__all__) == len(PUBLIC)
    for name in proletarian_di.__all__:
        assert getattr(proletarian_di, name) is not None


def test_every_error_derives_from_proletarian_error_and_keeps_its_builtin():
    raised = [
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type) and issubclass(obj, BaseException)
    ]
    assert len(raised) == 17
    assert all(issubclass(cls, proletarian_di.ProletarianError) for cls in raised)
    builtins = {
        "ConfigurationError": ValueError,
        "DatabaseURLError": ValueError,
        "ArgumentTypeError": TypeError,
        "NoCurrentJob": LookupError,
        "PayloadError": ValueError,
        "InvalidRetrySpec": ValueError,
        "UnknownJobType": LookupError,
        "EmbeddedPostgresUnavailable": RuntimeError,
        "WorkerStateError": RuntimeError,
        "JobTimedOut": TimeoutError,
    }
    for name, builtin in builtins.items():
        assert issubclass(getattr(errors, name), builtin), name
    assert proletarian_di.router.UnknownJobType is errors.UnknownJobType


def test_no_submodule_is_shadowed_by_a_name_of_the_package():
    for module in pkgutil.iter_modules(proletarian_di.__path__):
        value = getattr(proletarian_di, module.name, None)
        if value is not None:
            assert isinstance(value, types.ModuleType), module.name
    assert inspect.isfunction(proletarian_di.enqueue)


def test_the_integrations_live_in_contrib_and_keep_their_short_paths():
    pairs = {
        "proletarian_di.di": ("queue_worker", "postgres_pool", "container_workers"),
        "proletarian_di.fastapi": ("worker_lifespan",),
        "proletarian_di.embedded": ("embedded_postgres", "EmbeddedPostgresUnavailable"),
        "proletarian_di.cli": ("app", "main"),
    }
    for short, names in pairs.items():
        module = importlib.import_module(short)
        contrib = importlib.import_module(
            short.replace("proletarian_di.", "proletarian_di.contrib.")
        )
        for name in names:
            assert getattr(module, name) is getattr(contrib, name), (short, name)


def test_the_core_imports_no_driver_and_no_framework():
    code = (
        "import sys, proletarian_di, proletarian_di.admin, proletarian_di.testing; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'psycopg', 'pymysql', "
        "'dbutils', 'dependency_injector', 'fastapi', 'starlette', 'typer', 'rich', "
        "'embedded_postgres'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
