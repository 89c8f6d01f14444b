"""The FastAPI lifespan; it lives in `proletarian_di.contrib.fastapi` (extra `fastapi`)."""

from .contrib.fastapi import worker_lifespan

__all__ = ["worker_lifespan"]
