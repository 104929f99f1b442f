"""Fixtures of the integration tests (the database, engine and SMTP sink ones several share).

From ``tests/conftest.py``: ``dsn`` (the session's database, schema applied), ``store``, ``sink``,
``lane``, and the brokers: ``nats_url`` (JetStream; ``nats_server`` to stop and start it when it is
the session's own), ``kafka_url`` (librdkafka's mock cluster unless ``OUTBOX_TEST_KAFKA``; see
``tests/support/brokers.py``). Here:

- ``empty_outbox``: every ``outbox_*`` table truncated before the test, for modules that count
  rows across lanes (``pytestmark = [..., pytest.mark.usefixtures("empty_outbox")]``);
- ``engine`` / ``async_engine``: SQLAlchemy engines on ``dsn``, for the handle types enqueue takes;
- ``wh``: the webhook tables' repository and stores on one small pool (tests/support/webhooks.py).
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from tests.support.postgres import empty_outbox as truncate_outbox
from tests.support.webhooks import Webhooks, webhooks


@pytest.fixture
def empty_outbox(dsn: str) -> None:
    truncate_outbox(dsn)


@pytest.fixture(scope="module")
def engine(dsn: str) -> Iterator[Engine]:
    # creator: the test DSN may be a libpq key/value string or point at a unix socket.
    made = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    yield made
    made.dispose()


@pytest.fixture
async def async_engine(dsn: str) -> AsyncIterator[AsyncEngine]:
    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(dsn)

    made = create_async_engine("postgresql+psycopg://", async_creator=connect)
    yield made
    await made.dispose()


@pytest.fixture
async def wh(dsn: str) -> AsyncIterator[Webhooks]:
    async with webhooks(dsn) as made:
        yield made


@pytest.fixture(scope="module")
def kafka_leftovers() -> Iterator[None]:
    """At the end of a module that used Kafka: collect what aiokafka left behind on the mock
    cluster (connections of a join that stalled, whose ``stop()`` does not end them), with their
    ResourceWarnings. They become garbage only once their test's loop is closed, and a full
    collection may come many tests later: a fresh-clone CI run (2026-12-07) failed the signup
    service's test on sixteen such warnings from the Kafka tests' connections."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
