"""Test-wide settings: Hypothesis profiles (`HYPOTHESIS_PROFILE=ci|dev`)."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from psycopg.conninfo import conninfo_to_dict, make_conninfo

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
    name = f"outbox_test_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    params = conninfo_to_dict(postgres_server)
    params["dbname"] = name
    try:
        yield make_conninfo(**params)
    finally:
        with (
            psycopg.connect(postgres_server, autocommit=True) as admin,
            contextlib.suppress(Exception),
        ):
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
