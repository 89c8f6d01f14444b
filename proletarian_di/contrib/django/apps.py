"""The Django app, so that `manage.py proletarian_worker` is found."""

from __future__ import annotations

from django.apps import AppConfig


class ProletarianConfig(AppConfig):
    """`proletarian_di.contrib.django` in INSTALLED_APPS: the management commands."""

    name = "proletarian_di.contrib.django"
    label = "proletarian_di"
    verbose_name = "proletarian-di"
