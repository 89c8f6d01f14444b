"""The wrong kind of connection or data source: a clear error before anything is written."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import types
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from proletarian_di import (
    UnsupportedDatabase,
    create_queue_worker,
    enqueue,
    enqueue_async,
    enqueue_many,
)
from proletarian_di.mysql import MySQLDataSource


def test_enqueue_refuses_an_async_connection_and_writes_nothing(pg):
    async def attempt() -> None:
        aconn = await psycopg.AsyncConnection.connect(pg.url)
        try:
            with pytest.raises(TypeError, match=r"async .*await enqueue_async"):
                enqueue(aconn, "x", None)
            with pytest.raises(TypeError, match=r"async .*await enqueue_async"):
                enqueue_many(aconn, [("x", None)])
            await aconn.commit()
        finally:
            await aconn.close()

    asyncio.run(attempt())
    assert pg.jobs() == []


def test_enqueue_async_refuses_a_sync_connection_before_inserting(backend):
    conn = backend.connect()
    if backend.name == "postgresql":
        conn.autocommit = True
    try:
        with pytest.raises(TypeError, match=r"needs a psycopg AsyncConnection.*enqueue\(conn"):
            asyncio.run(enqueue_async(conn, "x", None))
        conn.commit()
    finally:
        conn.close()
    assert backend.jobs() == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConnectionPool("postgresql://app@127.0.0.1:1/app", open=False),
        lambda: MySQLDataSource("mysql://app@127.0.0.1:1/app"),
    ],
    ids=["psycopg_pool", "MySQLDataSource"],
)
def test_a_pool_given_to_enqueue_names_what_to_pass(make):
    pool: Any = make()
    try:
        with pytest.raises(TypeError, match=r"got a pool .* pass one of its connections"):
            enqueue(pool, "x", None)
    finally:
        pool.close()


def test_a_psycopg2_connection_is_not_taken_for_psycopg_3(monkeypatch):
    module = types.ModuleType("psycopg2.extensions")
    connection = type("connection", (), {"cursor": lambda self: None})
    connection.__module__ = "psycopg2.extensions"
    monkeypatch.setitem(sys.modules, "psycopg2.extensions", module)
    with pytest.raises(UnsupportedDatabase, match=r"psycopg2 is not supported: use psycopg 3"):
        enqueue(connection(), "x", None)


def test_other_drivers_are_named(tmp_path):
    with (
        contextlib.closing(sqlite3.connect(tmp_path / "db")) as conn,
        pytest.raises(UnsupportedDatabase, match=r"SQLite has no .*SKIP LOCKED"),
    ):
        enqueue(conn, "x", None)


def test_an_async_pool_given_to_a_worker_names_the_sync_pool(pg):
    async def attempt() -> None:
        pool = AsyncConnectionPool(pg.url, open=False)
        with pytest.raises(TypeError, match=r"asyncio pool.*psycopg_pool.ConnectionPool"):
            create_queue_worker(pool, lambda t, p: None)

    asyncio.run(attempt())
