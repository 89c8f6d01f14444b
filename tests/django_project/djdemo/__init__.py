"""A small Django project for tests/test_django.py, on the database the test chose."""
