"""The benchmark's Django app."""

from django.apps import AppConfig


class BenchConfig(AppConfig):
    """Holds the tasks module."""

    name = "benchdj"
