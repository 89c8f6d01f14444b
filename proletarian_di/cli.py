"""The `proletarian-di` command; it lives in `proletarian_di.contrib.cli` (extra `cli`)."""

from .contrib.cli import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
