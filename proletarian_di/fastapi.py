"""FastAPI: the lifespan, the health routes and the metrics app; they live in
`proletarian_di.contrib.fastapi` (extra `fastapi`), and this is the path to import them from."""

from .contrib.fastapi import health_router, metrics_app, worker_lifespan

__all__ = ["health_router", "metrics_app", "worker_lifespan"]
