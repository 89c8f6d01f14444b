"""Settings: the database comes from TEST_BACKEND and TEST_DATABASE_URL (set by the test);
DJDEMO_TASKS, a JSON object, replaces TASKS ("null": no TASKS setting at all), and
DJDEMO_DATABASE_PORT the database's port."""

import json
import os

import pymysql

pymysql.install_as_MySQLdb()  # Django's mysql backend on PyMySQL

from proletarian_di._store.secrets import parse_mysql_url  # noqa: E402


def _database() -> dict:
    url = os.environ["TEST_DATABASE_URL"]
    if os.environ["TEST_BACKEND"] == "mysql":
        options = parse_mysql_url(url)
        return {
            "ENGINE": "django.db.backends.mysql",
            "NAME": options["database"],
            "USER": options.get("user", ""),
            "PASSWORD": options.get("password", ""),
            "HOST": options.get("host", ""),
            "PORT": str(options.get("port", "")),
        }
    from psycopg.conninfo import conninfo_to_dict

    options = conninfo_to_dict(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": options.get("dbname", ""),
        "USER": options.get("user", ""),
        "PASSWORD": options.get("password", ""),
        "HOST": options.get("host", ""),
        "PORT": str(options.get("port", "")),
    }


SECRET_KEY = "tests-only"
USE_TZ = True
DATABASES = {"default": _database()}
if "DJDEMO_DATABASE_PORT" in os.environ:
    DATABASES["default"]["PORT"] = os.environ["DJDEMO_DATABASE_PORT"]
INSTALLED_APPS = ["proletarian_di.contrib.django", "djdemo"]
TASKS = {
    "default": {
        "BACKEND": "proletarian_di.contrib.django.ProletarianBackend",
        "QUEUES": ["default", "notes"],
        "OPTIONS": {"MAX_RESULT_BYTES": 1024},
    }
}
if "DJDEMO_TASKS" in os.environ:
    TASKS = json.loads(os.environ["DJDEMO_TASKS"])
    if TASKS is None:
        del TASKS
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
