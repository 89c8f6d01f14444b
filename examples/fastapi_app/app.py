"""A FastAPI app: POST /signup writes an account and enqueues its confirmation email in ONE
transaction; the queue workers run inside the app, started and drained by `worker_lifespan`.

Run from the repository root (see README.md):

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \
        uvicorn examples.fastapi_app.app:app
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from fastapi import FastAPI, HTTPException, Request
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from proletarian_di import enqueue, enqueue_async
from proletarian_di.fastapi import worker_lifespan
from proletarian_di.schema import install_schema

from containers import EMAIL_QUEUE
from containers.postgres import PostgresContainer

ACCOUNTS_TABLE = """
CREATE TABLE IF NOT EXISTS app_account (
    email      TEXT PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


class Signup(BaseModel):
    email: str


def confirmation(email: str) -> dict[str, str]:
    return {"to": email, "subject": "Confirm your account", "body": "Click the link."}


def create_app(container: PostgresContainer | None = None) -> FastAPI:
    """The app around a container; tests pass one with stubbed components."""
    container = container or PostgresContainer()

    @asynccontextmanager
    async def app_lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        """The app's own lifespan: its tables and an async pool for async endpoints."""
        apool = AsyncConnectionPool(container.config.database.url(), min_size=1, open=False)
        await apool.open(wait=True)
        try:
            async with apool.connection() as aconn:
                await aconn.execute(ACCOUNTS_TABLE)
            yield {"apool": apool}
        finally:
            await apool.close()

    app = FastAPI(lifespan=worker_lifespan(container, lifespan=app_lifespan))
    app.state.container = container

    @app.post("/signup", status_code=201)
    def signup(body: Signup) -> dict[str, str]:
        """Sync endpoint (runs in the threadpool) on the workers' own pool."""
        try:
            with container.pool().connection() as conn:  # commits at exit, rolls back on error
                conn.execute("INSERT INTO app_account (email) VALUES (%s)", (body.email,))
                job_id = enqueue(conn, "send_email", confirmation(body.email), queue=EMAIL_QUEUE)
        except psycopg.errors.UniqueViolation:
            raise HTTPException(409, f"{body.email} has already signed up") from None
        return {"email": body.email, "job_id": str(job_id)}

    @app.post("/signup-async", status_code=201)
    async def signup_async(body: Signup, request: Request) -> dict[str, str]:
        """Async endpoint: the same transaction on a psycopg AsyncConnection."""
        try:
            async with request.state.apool.connection() as aconn:
                await aconn.execute("INSERT INTO app_account (email) VALUES (%s)", (body.email,))
                job_id = await enqueue_async(
                    aconn, "send_email", confirmation(body.email), queue=EMAIL_QUEUE
                )
        except psycopg.errors.UniqueViolation:
            raise HTTPException(409, f"{body.email} has already signed up") from None
        return {"email": body.email, "job_id": str(job_id)}

    return app


def install(database_url: str) -> None:
    """Install the queue schema (safe to run twice)."""
    with psycopg.connect(database_url) as conn:
        install_schema(conn)


app = create_app()
