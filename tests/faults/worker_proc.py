"""The real e-mail worker as a subprocess with fail-points, and the handle a test holds on it.

    python -m tests.faults.worker_proc --dsn DSN --smtp-port PORT --ca-file CA.pem --lane LANE \\
        [--batch-size N] [--lease-seconds S] [--budget STEP=SECONDS ...] [--poll-interval S] \\
        [--max-attempts N] [--retry-seconds S] [--standby] [--drain]

The child runs the production pieces unchanged — :class:`~outbox_adapters.postgres.store.PostgresStore`,
:class:`~outbox_adapters.lanes.email.EmailHandler`, :class:`~outbox_adapters.smtp.SmtpMailer` (strict
STARTTLS, the sink's CA) and :class:`~outbox_adapters.runtime.Worker` — wrapped by the fail-points of
:mod:`tests.faults.failpoints` (``OUTBOX_FAILPOINT``). It talks to the test through JSON lines on
stdout (``ready``, ``go``, ``claimed``, ``sent``, ``mark``, ``failpoint``, ``resumed``,
``stopped``); its log goes to stderr. SIGTERM is a graceful stop (``Worker.request_stop``).

``--standby`` makes it start up (imports, pool, connection) and wait for a ``go`` line on stdin
before claiming anything: a sibling that is already running when a test kills the first worker,
so recovery times measure the lease, not Python's start-up.

``OUTBOX_TEST_MUTANT=<name>`` applies a mutant of ``tests/mutations/matrix.py`` inside the child
(e.g. ``mark-no-token-fence``), so a test can show it turns red when a mechanism is removed. It is
read only here, by the test harness; production code never looks at it.

Start-up is kept fast (about 0.4 s instead of 1.7 s): the child imports the store's modules
without running ``outbox_adapters/postgres/__init__.py``, which pulls in SQLAlchemy for the table
definitions and the enqueue helpers that a worker never uses (see :func:`_import_store`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import attrs
from tests.faults.failpoints import (
    FAILPOINT_ENV,
    FailingHandler,
    FailingStore,
    FailPoint,
    Trigger,
    install_smtp_failpoints,
    print_event,
)

from outbox_core.timing import EmailTiming

__all__ = [
    "CHAOS_BUDGETS",
    "MUTANT_ENV",
    "SENDER",
    "WorkerOptions",
    "WorkerProcess",
    "chaos_smtp_settings",
    "chaos_timing",
    "main",
    "started",
]

#: The repository root: the child runs ``python -m tests.faults.worker_proc`` from here.
ROOT = Path(__file__).resolve().parents[2]
#: The envelope sender of every chaos mail.
SENDER = "chaos@outbox.example"
#: Names a mutant of tests/mutations/matrix.py to apply inside the child.
MUTANT_ENV = "OUTBOX_TEST_MUTANT"

#: Step budgets shrunk for tests (seconds): per-row 3.65 s. The SMTP steps keep a wide margin over
#: what a loopback exchange takes (~20 ms) so a loaded 2-core machine doesn't time a send out —
#: a timeout after DATA would be a duplicate that no kill caused.
CHAOS_BUDGETS: Mapping[str, float] = types.MappingProxyType(
    {
        "suppression": 0.05,
        "branding": 0.05,
        "dial": 1.0,
        "smtp_exchange": 1.5,
        "bounce_report": 0.05,
        "mark": 1.0,
    }
)
#: The claim lease beyond the batch's work when no --lease-seconds is given.
DEFAULT_GRACE = 0.75


def chaos_timing(
    budgets: Mapping[str, float], *, batch_size: int, lease_seconds: float | None
) -> EmailTiming:
    """Short timing: ``claim_lease = lease_seconds`` (default per-row x batch + 0.75 s).

    The batch timeout sits halfway between the batch's work and the lease, so the row-start gate
    lets every row of a batch start (with ``batch_timeout == batch x per-row`` exactly, the first
    row of a one-row batch would already be too late by the time the claim returned).
    """
    per_row = sum(budgets.values())
    work = batch_size * per_row
    grace = DEFAULT_GRACE if lease_seconds is None else lease_seconds - work
    if grace <= 0:
        raise ValueError(
            f"lease_seconds {lease_seconds} must exceed batch_size {batch_size} x per-row"
            f" {per_row:.2f}s = {work:.2f}s"
        )
    return EmailTiming.with_overrides(
        {**budgets, "lease_grace": grace}, batch_size=batch_size, batch_timeout=work + grace / 2
    )


def chaos_smtp_settings(port: int, ca_file: str, sender: str, host: str = "127.0.0.1") -> Any:
    """Strict STARTTLS to the test's SMTP server, trusting its throwaway CA (child side)."""
    from outbox_adapters.smtp import SmtpSettings  # noqa: PLC0415 - child-only imports
    from outbox_core.tls import SmtpSecurityPolicy  # noqa: PLC0415

    return SmtpSettings(
        host=host, port=port, policy=SmtpSecurityPolicy(sender=sender), ca_file=ca_file
    )


@attrs.frozen
class WorkerOptions:
    """Everything a worker subprocess is started with."""

    dsn: str
    smtp_port: int
    ca_file: str
    lane: str
    batch_size: int = 1
    #: Rows of a batch sent at once, and whether their marks are grouped per window.
    rows_in_flight: int = 1
    group_marks: bool = False
    #: Step budgets in seconds (see :data:`CHAOS_BUDGETS`).
    budgets: Mapping[str, float] = CHAOS_BUDGETS
    #: The claim lease; ``None``: per-row x batch + 0.75 s.
    lease_seconds: float | None = None
    #: The worker's tick: how long it sleeps when a claim found less than a full batch.
    poll_interval: float = 0.25
    #: Attempts before a transient failure becomes ``failed`` (exponential from retry_seconds).
    max_attempts: int = 20
    retry_seconds: float = 0.5
    smtp_host: str = "127.0.0.1"
    failpoint: FailPoint | None = None
    #: Start up, then wait for ``go`` on stdin before claiming.
    standby: bool = False
    #: Exit when a claim finds nothing due.
    drain: bool = False

    def timing(self) -> EmailTiming:
        return chaos_timing(
            self.budgets, batch_size=self.batch_size, lease_seconds=self.lease_seconds
        )

    @property
    def lease(self) -> float:
        """The claim lease in seconds."""
        return self.timing().claim_lease().total_seconds()

    def argv(self) -> list[str]:
        args = [
            "--dsn", self.dsn, "--smtp-host", self.smtp_host, "--smtp-port", str(self.smtp_port),
            "--ca-file", self.ca_file, "--lane", self.lane, "--batch-size", str(self.batch_size),
            "--poll-interval", str(self.poll_interval), "--max-attempts", str(self.max_attempts),
            "--retry-seconds", str(self.retry_seconds),
        ]  # fmt: skip
        for step, seconds in self.budgets.items():
            args += ["--budget", f"{step}={seconds}"]
        if self.lease_seconds is not None:
            args += ["--lease-seconds", str(self.lease_seconds)]
        if self.rows_in_flight != 1:
            args += ["--rows-in-flight", str(self.rows_in_flight)]
        if self.group_marks:
            args.append("--group-marks")
        if self.standby:
            args.append("--standby")
        if self.drain:
            args.append("--drain")
        return args


# --- the parent's handle --------------------------------------------------------------------------


class WorkerProcess:
    """A running worker subprocess: its events, its signals, its exit. Close it when done."""

    def __init__(
        self,
        name: str,
        popen: subprocess.Popen[bytes],
        stderr: IO[bytes],
        options: WorkerOptions | None = None,
    ) -> None:
        self.name = name
        #: What it was started with (``options.lease`` is its claim lease).
        self.options = options
        self.popen = popen
        self._stderr = stderr
        self.events: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, name=f"{name}-events", daemon=True)
        self._reader.start()

    @classmethod
    def start(
        cls,
        options: WorkerOptions,
        *,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> WorkerProcess:
        child_env = {k: v for k, v in os.environ.items() if k != FAILPOINT_ENV}
        child_env.update(env or {})
        child_env["PYTHONUNBUFFERED"] = "1"
        if options.failpoint is not None:
            child_env[FAILPOINT_ENV] = str(options.failpoint)
        stderr = tempfile.TemporaryFile(prefix="outbox-worker-")  # noqa: SIM115 - closed in close()
        popen = subprocess.Popen(  # noqa: S603 - our own module, with our own arguments
            [sys.executable, "-m", "tests.faults.worker_proc", *options.argv()],
            cwd=ROOT,
            env=child_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        return cls(name or f"worker-{options.lane}", popen, stderr, options)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "output", "text": line}
            event.setdefault("received", time.time())
            with self._changed:
                self.events.append(event)
                self._changed.notify_all()
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    def find(self, event: str, **match: Any) -> list[dict[str, Any]]:
        """Every event of that name whose fields equal ``match``, read so far (after
        :meth:`wait_exit` or :meth:`kill`, that is every line the process wrote)."""
        with self._changed:
            return [
                e
                for e in self.events
                if e.get("event") == event and all(e.get(k) == v for k, v in match.items())
            ]

    def wait_event(self, event: str, *, timeout: float, **match: Any) -> dict[str, Any]:
        """The first such event (earlier ones count); fails if the process ends without it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = self.find(event, **match)
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    why = "exited" if self._eof else f"did not say it within {timeout}s"
                    raise AssertionError(
                        f"{self.name} (pid {self.pid}) {why}: no {event!r} event matching"
                        f" {match}; rc={self.popen.poll()}\n{self.stderr_tail()}"
                    )
                self._changed.wait(min(left, 0.5))

    def go(self) -> None:
        """Release a ``--standby`` worker."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(b"go\n")
        self.popen.stdin.flush()

    def send(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def kill(self, *, timeout: float = 10.0) -> float:
        """SIGKILL now; returns the ``time.time()`` of the kill, once the process is gone."""
        killed_at = time.time()
        self.send(signal.SIGKILL)
        self.wait_exit(timeout=timeout)
        return killed_at

    def pause(self) -> None:
        self.send(signal.SIGSTOP)

    def resume(self) -> None:
        self.send(signal.SIGCONT)

    def state(self) -> str:
        """The kernel's process state letter (``T`` stopped, ``Z`` zombie, ``S``/``R`` live)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return "gone"
        return stat.rpartition(")")[2].split()[0]

    def wait_stopped(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.state() != "T":
            if time.monotonic() > deadline or not self.alive:
                raise AssertionError(f"{self.name} did not stop: state {self.state()}")
            time.sleep(0.01)

    def terminate(self, *, timeout: float = 15.0) -> int:
        """Graceful stop (SIGTERM, after a SIGCONT in case it is stopped); the exit code."""
        self.send(signal.SIGCONT)
        self.send(signal.SIGTERM)
        return self.wait_exit(timeout=timeout)

    def wait_exit(self, *, timeout: float) -> int:
        """The exit code, once the process is gone AND its last event lines have been read."""
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} (pid {self.pid}) still running after {timeout}s\n{self.stderr_tail()}"
            ) from None
        # A dead process's final lines may still sit in the pipe: read them before anyone asks.
        self._reader.join(timeout)
        return code

    def stderr_tail(self, lines: int = 30) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        if self.alive:
            self.send(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(10)
        self._reader.join(5)
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


# --- the child --------------------------------------------------------------------------------------


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.worker_proc")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--smtp-host", default="127.0.0.1")
    parser.add_argument("--smtp-port", type=int, required=True)
    parser.add_argument("--ca-file", required=True)
    parser.add_argument("--lane", required=True)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--rows-in-flight", type=int, default=1)
    parser.add_argument("--group-marks", action="store_true")
    parser.add_argument("--lease-seconds", type=float, default=None)
    parser.add_argument("--budget", action="append", default=[], metavar="STEP=SECONDS")
    parser.add_argument("--poll-interval", type=float, default=0.25)
    parser.add_argument("--max-attempts", type=int, default=20)
    parser.add_argument("--retry-seconds", type=float, default=0.5)
    parser.add_argument("--standby", action="store_true")
    parser.add_argument("--drain", action="store_true")
    parser.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


def _import_store() -> type[Any]:
    """``PostgresStore`` without ``outbox_adapters.postgres.__init__`` (and so without SQLAlchemy).

    A bare package object with the real ``__path__`` stands in for the package, so its submodules
    (store, statements) import from their real files. If the store ever needs something only the
    package's ``__init__`` provides, we fall back to the normal (slower) import.
    """
    name = "outbox_adapters.postgres"
    if name not in sys.modules:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            package = types.ModuleType(name)
            package.__path__ = list(spec.submodule_search_locations)
            package.__spec__ = spec
            sys.modules[name] = package
    try:
        module = importlib.import_module("outbox_adapters.postgres.store")
    except ImportError:
        for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[loaded]
        module = importlib.import_module("outbox_adapters.postgres.store")
    store_class: type[Any] = module.PostgresStore
    return store_class


def _wait_for_go(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> asyncio.Future[bool]:
    """A future set when stdin says ``go`` (True) or closes (False). A daemon thread reads it, so
    a stop before ``go`` never leaves the interpreter waiting on a blocked read at exit."""
    said: asyncio.Future[bool] = loop.create_future()

    def settle(value: bool) -> None:
        if not said.done():
            said.set_result(value)

    def read() -> None:
        line = sys.stdin.readline()
        loop.call_soon_threadsafe(settle, line.strip() == "go")

    threading.Thread(target=read, name="standby", daemon=True).start()
    stop_waiter = loop.create_task(stop.wait())
    stop_waiter.add_done_callback(lambda _t: settle(False))
    said.add_done_callback(lambda _f: stop_waiter.cancel())
    return said


async def _serve(args: argparse.Namespace, trigger: Trigger) -> int:
    store_class = _import_store()  # first: nothing below may drag the package __init__ in
    from outbox_adapters.clock import SystemClock  # noqa: PLC0415 - child-only imports
    from outbox_adapters.lanes.email import EmailHandler, email_lane  # noqa: PLC0415
    from outbox_adapters.runtime import Worker  # noqa: PLC0415
    from outbox_adapters.smtp import SmtpMailer  # noqa: PLC0415
    from outbox_core.backoff import ExponentialBackoff  # noqa: PLC0415

    budgets = {k: float(v) for k, v in (item.split("=", 1) for item in args.budget)}
    budgets = budgets or dict(CHAOS_BUDGETS)
    timing = chaos_timing(budgets, batch_size=args.batch_size, lease_seconds=args.lease_seconds)
    retry = timedelta(seconds=args.retry_seconds)
    backoff = ExponentialBackoff(
        max_attempts=args.max_attempts, base=retry, cap=max(retry, timedelta(seconds=2))
    )
    config = email_lane(
        lane=args.lane,
        timing=timing,
        backoff=backoff,
        poll_interval=args.poll_interval,
        rows_in_flight=args.rows_in_flight,
        group_marks=args.group_marks,
    )
    settings = chaos_smtp_settings(args.smtp_port, args.ca_file, SENDER, host=args.smtp_host)
    install_smtp_failpoints(trigger)
    clock = SystemClock()
    store = await store_class.open(args.dsn, min_size=1, max_size=4)
    mailer = SmtpMailer(settings, steps=timing.budgets)
    handler = FailingHandler(EmailHandler(mailer, sender=SENDER, clock=clock), trigger)
    failing = FailingStore(store, trigger, dsn=args.dsn)
    await failing.prepare()
    worker = Worker(
        failing,
        handler,
        config,
        clock=clock,
        holder=f"chaos-{os.getpid()}",
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def request_stop() -> None:
        stop.set()
        worker.request_stop()

    loop.add_signal_handler(signal.SIGTERM, request_stop)
    try:
        print_event(
            {
                "event": "ready",
                "pid": os.getpid(),
                "lane": args.lane,
                "lease": timing.claim_lease().total_seconds(),
                "failpoint": str(trigger.failpoint) if trigger.failpoint else None,
            }
        )
        if args.standby:
            if not await _wait_for_go(loop, stop):
                return 0
            print_event({"event": "go", "t": time.time()})
        stats = await worker.run(drain=args.drain)
    finally:
        await mailer.aclose()
        await store.close()
    print_event({"event": "stopped", "stats": attrs.asdict(stats)})
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format=f"%(asctime)s [{os.getpid()}] %(levelname)s %(name)s: %(message)s",
    )
    spec = os.environ.get(FAILPOINT_ENV)
    trigger = Trigger(FailPoint.parse(spec) if spec else None)
    mutant = os.environ.get(MUTANT_ENV)
    if mutant:
        _import_store()  # the matrix imports the statements module: keep the fast path
        from tests.mutations import matrix  # noqa: PLC0415 - only when a mutant is asked for

        matrix.apply(mutant)
        logging.getLogger(__name__).warning("mutant %s applied", mutant)
    return asyncio.run(_serve(args, trigger))


@contextlib.contextmanager
def started(
    options: WorkerOptions, *, name: str | None = None, env: Mapping[str, str] | None = None
) -> Iterator[WorkerProcess]:
    """``with started(options) as worker: ...`` — killed and reaped on the way out."""
    process = WorkerProcess.start(options, name=name, env=env)
    try:
        yield process
    finally:
        process.close()


if __name__ == "__main__":
    raise SystemExit(main())
