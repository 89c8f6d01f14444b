"""A user's module that fails while it is imported."""

RATIO = 1 / 0
