"""A throwaway PostgreSQL server that a test may restart, crash or cut off: the F3/F4 database.

The suite's shared server (``postgres_dsn``) must never be restarted under other tests, so a fault
test gets a server of its own: the real PostgreSQL binaries of the ``pgserver`` wheel, a fresh data
directory in a temporary folder, listening on TCP ``127.0.0.1:<free port>`` (so a
:class:`~tests.faults.proxy.FaultProxy` can sit in front of it) and on a unix socket in the data
directory (the admin path the test itself uses, which no proxy fault touches).

We drive ``initdb`` and ``pg_ctl`` directly rather than through ``pgserver.get_server``: that helper
starts the server with ``-h ""`` (no TCP at all) and offers no restart. As root (CI), PostgreSQL
refuses to run, so the binaries run as the unprivileged ``pgserver`` user, as pgserver itself does.

- :meth:`ThrowawayPostgres.restart` stops the server (``fast``: backends told to end, clean
  shutdown; ``immediate``: every process killed, crash recovery at the next start) and starts it
  again on the same port, optionally staying down a while; :meth:`~ThrowawayPostgres.stop` and
  :meth:`~ThrowawayPostgres.start_again` are its two halves, for a test that times the gap itself.
- :meth:`ThrowawayPostgres.terminate_backends` runs ``pg_terminate_backend`` on every client
  backend but its own: every pooled connection of every worker dies at once.

These are blocking calls (a subprocess, a connection): from async code run them with
``asyncio.to_thread`` so the event loop, and the worker on it, keeps running through the outage.
``fsync`` is off for speed; that is safe here because the machine does not crash, only the server.
``synchronous_commit`` stays on: an immediate stop must not lose a commit the client was told of.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Literal, Self

import psycopg

__all__ = ["StopMode", "ThrowawayPostgres"]

StopMode = Literal["fast", "immediate"]
_UNPRIVILEGED = "pgserver"  # the account pgserver itself creates to run PostgreSQL as root


def _bin_dir() -> Path:
    pgserver = importlib.import_module("pgserver")
    return Path(str(pgserver.__file__)).parent / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayPostgres:
    """One PostgreSQL server in a temporary directory. ``with ThrowawayPostgres() as pg: pg.dsn``."""

    def __init__(self, *, database: str = "outbox") -> None:
        self.database = database
        self.port = 0
        self.data: Path | None = None
        self._user: str | None = None
        self._running = False
        self._stopped_at = 0.0
        self._stopped_how = ""
        #: ``(what, seconds the server was down)`` for every restart, in order.
        self.outages: list[tuple[str, float]] = []

    # --- addresses ---------------------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """TCP on 127.0.0.1: what a worker (or a proxy in front of it) connects to."""
        return self.dsn_via("127.0.0.1", self.port)

    def dsn_via(self, host: str, port: int) -> str:
        """The same database reached at another address, e.g. a proxy's."""
        return f"postgresql://postgres@{host}:{port}/{self.database}?connect_timeout=5"

    @property
    def admin_dsn(self) -> str:
        """The unix socket in the data directory: the test's own path, untouched by proxy faults."""
        return f"postgresql://postgres@/{self.database}?host={self._data()}&port={self.port}"

    # --- life cycle --------------------------------------------------------------------------------

    def start(self) -> Self:
        self.data = Path(tempfile.mkdtemp(prefix="outbox-chaos-pg-")) / "data"
        self.data.mkdir()
        atexit.register(self.close)  # a test run that dies mid-test leaves no server behind
        if os.geteuid() == 0:
            self._run_as_unprivileged()
        self._tool("initdb", "--auth=trust", "--encoding=utf8", "-U", "postgres")
        self.port = _free_port()
        self._start_server()
        with psycopg.connect(self._socket_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        return self

    def close(self) -> None:
        atexit.unregister(self.close)
        if self.data is None:
            return
        if self._running:
            with contextlib.suppress(subprocess.SubprocessError):
                self._stop("immediate")
        shutil.rmtree(self.data.parent, ignore_errors=True)
        self.data = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- faults ------------------------------------------------------------------------------------

    def restart(self, mode: StopMode = "fast", *, down_for: float = 0.0) -> float:
        """Stop (``fast`` or ``immediate``), stay down ``down_for`` s, start on the same port.

        Returns the ``time.monotonic()`` at which the server accepted connections again.
        """
        self.stop(mode)
        if down_for > 0:
            time.sleep(down_for)
        return self.start_again()

    def stop(self, mode: StopMode = "fast") -> None:
        """Take the server down: ``fast`` ends every session cleanly, ``immediate`` kills it all."""
        self._stopped_at = time.monotonic()
        self._stopped_how = f"restart {mode}"
        self._stop(mode)

    def start_again(self) -> float:
        """Start a stopped server on the same port; the ``time.monotonic()`` it was back at."""
        self._start_server()
        back = time.monotonic()
        self.outages.append((self._stopped_how, back - self._stopped_at))
        return back

    def terminate_backends(self) -> int:
        """``pg_terminate_backend`` every client backend but this one; how many were ended."""
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            cur = conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                " FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
            row = cur.fetchone()
        self.outages.append(("terminate backends", 0.0))
        return int(row[0]) if row else 0

    def backends(self) -> int:
        """Client backends connected now (this query's own excluded)."""
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchone()
        return int(row[0]) if row else 0

    # --- helpers -----------------------------------------------------------------------------------

    def _data(self) -> Path:
        if self.data is None:
            raise RuntimeError("the throwaway PostgreSQL server is not started")
        return self.data

    def _socket_dsn(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self._data()}&port={self.port}"

    def _run_as_unprivileged(self) -> None:
        utils = importlib.import_module("pgserver.utils")
        utils.ensure_user_exists(_UNPRIVILEGED)
        import pwd  # noqa: PLC0415 - POSIX only, and only needed as root

        entry = pwd.getpwnam(_UNPRIVILEGED)
        data = self._data()
        utils.ensure_prefix_permissions(data)
        data.parent.chmod(0o755)
        os.chown(data, entry.pw_uid, entry.pw_gid)
        data.chmod(0o700)
        self._user = _UNPRIVILEGED

    def _tool(self, name: str, *args: str, timeout: float = 60) -> None:
        command = [str(_bin_dir() / name), "-D", str(self._data()), *args]
        # Output goes to files, not pipes: pg_ctl's server child inherits pipes and would hold them.
        with tempfile.TemporaryFile() as out:
            result = subprocess.run(  # noqa: S603 - our own binaries, fixed arguments
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                user=self._user,
                timeout=timeout,
                check=False,
            )
            if result.returncode != 0:
                out.seek(0)
                log = self._data() / "server.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(
                    f"{name} {' '.join(args)} failed with exit code {result.returncode}:"
                    f" {out.read().decode(errors='replace')}\n{tail}"
                )

    def _start_server(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self._data()}"
            " -c fsync=off -c max_connections=100"
        )
        log = str(self._data() / "server.log")
        self._tool("pg_ctl", "-w", "-t", "60", "-o", options, "-l", log, "start")
        self._running = True

    def _stop(self, mode: StopMode) -> None:
        self._tool("pg_ctl", "-w", "-t", "60", "-m", mode, "stop")
        self._running = False
