"""FastAPI + async SQLAlchemy: POST /users writes a user and enqueues its welcome email in ONE
transaction (the session's); the email worker runs in the app, started and drained by the
lifespan.

Run from the repository root (see README.md):

    DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/postgres \
        uvicorn examples.fastapi_sqlalchemy.app:app
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel
from sqlalchemy import String
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from proletarian_di import enqueue_async
from proletarian_di.fastapi import worker_lifespan

from .containers import EMAIL_QUEUE, Container, create_container


class Base(DeclarativeBase):
    """The app's models."""


class User(Base):
    """A signed-up user; the email is unique."""

    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    name: Mapped[str] = mapped_column(String(200))


class UserIn(BaseModel):
    email: str
    name: str


class UserOut(BaseModel):
    id: int
    email: str
    name: str
    welcome_job_id: str


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    """One session per request; closing it rolls back whatever was not committed."""
    container: Container = request.app.state.container
    async with container.sessions()() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]


def create_app(container: Container | None = None) -> FastAPI:
    """The app around a container; tests pass one with a stub mailer."""
    container = container or create_container()

    @asynccontextmanager
    async def app_lifespan(app: FastAPI) -> AsyncIterator[None]:
        """The app's own part: its tables at start-up, the engine's connections at shutdown."""
        engine = container.engine()
        try:
            async with engine.begin() as conn:
                await conn.run_sync(Base.metadata.create_all)
            yield
        finally:
            await engine.dispose()

    # worker_lifespan starts the container's resources (pool, worker) before app_lifespan,
    # and drains the worker, then closes its pool, after app_lifespan has exited.
    app = FastAPI(lifespan=worker_lifespan(container, lifespan=app_lifespan))
    app.state.container = container

    @app.post("/users", status_code=201)
    async def create_user(body: UserIn, session: SessionDep) -> UserOut:
        """Create the user and its welcome-email job: both commit, or neither."""
        user = User(email=body.email, name=body.name)
        session.add(user)
        job_id = await enqueue_async(  # in the session's transaction; never commits
            session,
            "send_welcome_email",
            {"email": body.email, "name": body.name},
            queue=EMAIL_QUEUE,
        )
        try:
            await session.flush()  # the user's INSERT: a duplicate email fails here
        except IntegrityError:
            await session.rollback()  # takes the job with it
            raise HTTPException(409, f"{body.email} is already registered") from None
        await session.commit()  # once, at the end: the user and its job, together
        return UserOut(id=user.id, email=user.email, name=user.name, welcome_job_id=str(job_id))

    return app


app = create_app()
