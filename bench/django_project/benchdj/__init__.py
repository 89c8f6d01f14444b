"""Settings and tasks for `python -m bench --scenario django` (see bench/django_tasks.py)."""
