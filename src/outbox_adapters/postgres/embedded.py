"""Find a PostgreSQL server to use, in this order: a DSN, a container, an embedded one.

Used by the test suite and by ``outbox demo``:

1. ``OUTBOX_TEST_DSN`` (or the DSN the caller passes) when set;
2. a throwaway container through ``testcontainers`` when a Docker engine answers;
3. an embedded server from the ``pgserver`` wheel: real PostgreSQL binaries in a temporary data
   directory, listening on a unix socket, started in about a second with nothing installed.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
from collections.abc import Iterator

import attrs

__all__ = ["ServerSource", "find_postgres"]


@attrs.frozen
class ServerSource:
    """A DSN and where it came from (``env``, ``container`` or ``embedded``)."""

    dsn: str
    source: str

    def __str__(self) -> str:
        return self.dsn


def _docker_answers() -> bool:
    try:
        docker = importlib.import_module("docker")
        client = docker.from_env(timeout=2)
        client.ping()
    except Exception:  # noqa: BLE001 - any failure means "no usable engine"
        return False
    return True


@contextlib.contextmanager
def _container() -> Iterator[ServerSource]:
    postgres = importlib.import_module("testcontainers.postgres")
    with postgres.PostgresContainer("postgres:16-alpine", driver=None) as pg:
        yield ServerSource(pg.get_connection_url(), "container")


@contextlib.contextmanager
def _embedded(env: str) -> Iterator[ServerSource]:
    try:
        pgserver = importlib.import_module("pgserver")
    except ImportError as exc:  # pragma: no cover - the dev/embedded extras install it
        msg = (
            f"no PostgreSQL found: set {env}, run a Docker engine, or install the "
            "embedded server with `pip install 'leased-outbox[embedded]'`"
        )
        raise RuntimeError(msg) from exc
    with tempfile.TemporaryDirectory(prefix="outbox-pg-") as data:
        server = pgserver.get_server(data, cleanup_mode="stop")
        try:
            yield ServerSource(server.get_uri(), "embedded")
        finally:
            server.cleanup()


@contextlib.contextmanager
def find_postgres(
    dsn: str | None = None, *, env: str = "OUTBOX_TEST_DSN"
) -> Iterator[ServerSource]:
    """Yield a DSN for a running PostgreSQL server; stop what was started when the block ends."""
    chosen = dsn or os.environ.get(env)
    if chosen:
        yield ServerSource(chosen, "env")
        return
    if _docker_answers():  # pragma: no cover - no Docker engine on our CI machines
        with _container() as found:
            yield found
        return
    with _embedded(env) as found:
        yield found
