"""Optional integrations, each behind its extra: nothing in the queue core imports them.

- `contrib.di`: dependency-injector resources (extra `di`)
- `contrib.fastapi`: a FastAPI lifespan (extra `fastapi`)
- `contrib.cli`: the `proletarian-di` command (extra `cli`)
- `contrib.embedded`: a throwaway PostgreSQL server (extra `embedded`)
- `contrib.demo`: the system `proletarian-di demo` runs (extras `di` and `embedded`)
- `contrib.opentelemetry`: a span per job run, in the enqueuer's trace (extra `tracing`)
- `contrib.prometheus`: queue metrics for Prometheus (extra `metrics`)
- `contrib.dashboard`: the web dashboard (extra `dashboard`)
- `contrib.django`: a Django tasks backend (extra `django`)

The short paths `proletarian_di.di`, `proletarian_di.fastapi`, `proletarian_di.cli`
and `proletarian_di.embedded` re-export them; the docs use those.
"""
