"""A throwaway PostgreSQL; it lives in `proletarian_di.contrib.embedded` (extra `embedded`)."""

from .contrib.embedded import EmbeddedPostgresUnavailable, embedded_postgres, postgres_url

__all__ = ["EmbeddedPostgresUnavailable", "embedded_postgres", "postgres_url"]
