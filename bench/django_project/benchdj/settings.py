"""One settings module for both backends: BENCH_DJANGO_BACKEND ("ours" or "db") picks
the TASKS backend and the schema (search_path), BENCH_DJANGO_URL the PostgreSQL server."""

import os

from psycopg.conninfo import conninfo_to_dict

BACKEND = os.environ.get("BENCH_DJANGO_BACKEND", "ours")
SCHEMA = f"bench_django_{BACKEND}"
_url = conninfo_to_dict(os.environ["BENCH_DJANGO_URL"])

SECRET_KEY = "bench-only"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.get("dbname", ""),
        "USER": _url.get("user", ""),
        "PASSWORD": _url.get("password", ""),
        "HOST": _url.get("host", ""),
        "PORT": str(_url.get("port", "")),
        "OPTIONS": {"options": f"-c search_path={SCHEMA}"},
    }
}
if BACKEND == "ours":
    INSTALLED_APPS = ["proletarian_di.contrib.django", "benchdj"]
    TASKS = {
        "default": {
            "BACKEND": "proletarian_di.contrib.django.ProletarianBackend",
            "OPTIONS": {
                "JOB_TABLE": f"{SCHEMA}.job",
                "ARCHIVED_JOB_TABLE": f"{SCHEMA}.archived_job",
            },
        }
    }
else:
    INSTALLED_APPS = ["django_tasks", "django_tasks_db", "benchdj"]
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
