"""Feed push latency (issue 12 item 5): insert of a notification → ``refresh`` at a connected client.

One server process runs the feed as a host would (``Feed`` mounted in a Starlette app on uvicorn,
its one LISTEN connection, the push trigger of ``outbox schema apply``). This process opens N SSE
streams to it (1, 100, 1,000), all of one scope (the platform operators'), so every insert is fanned
out to every stream: the hardest case for one process. Then, one at a time with a random pause of up
to 50 ms between them, it inserts a platform notification (an autocommit INSERT: the trigger's
``pg_notify`` goes out at its commit). The clock starts just before the INSERT is sent and stops,
per stream, when that stream's socket delivers the ``event: refresh`` bytes; p50/p99 are over every
(insert, stream) arrival of a run. The next insert waits until every stream has its refresh.

The clients are raw asyncio protocols that only look for the event's bytes, in this process, with
its garbage collector paused while a series runs; the server is in its own process (it must not
share the clients' event loop or GIL, or the figure would measure the two fighting over one core),
its collector untouched. Goal: p99 < 50 ms at 1,000 streams.

Two more figures per run: the 5,000-stream series over TWO server processes (2,500 streams each,
one LISTEN connection each: how a host scales the feed out; goal p99 < 150 ms), and the memory an
open stream costs the server (its resident set with the 1,000 streams open, less before they
were, per stream). Each server process reports, when it ends, its full (generation-2) garbage
collections: how many and the longest, since one landing inside an insert's fan-out is what the
p99 is made of on this machine (docs/benchmarks.md, "The feed under load").

A last series per run repeats the 1,000 streams on a server whose collector's young generation
is raised to :data:`TUNED_THRESHOLD` (``gc.set_threshold``), as the feed guide suggests to a host
that cannot afford the pauses: its p99 and its full collections beside the default's.

``python -m bench.feed serve DSN [GC_THRESHOLD]`` is the server process (its port on stdout; it
ends when its stdin closes).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib
import json
import math
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, cast

import psycopg

from bench.memory import rss_mb
from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, percentile

__all__ = ["measure"]

STREAM_COUNTS: Final = (1, 100, 1000)
#: The young generation's threshold of the collector-tuned series (the feed guide's example).
TUNED_THRESHOLD: Final = 20_000
TUNED_SEED: Final = 1_000
#: The scaled-out series: this many streams over :data:`PROCESSES` server processes.
SCALED_STREAMS: Final = 5000
PROCESSES: Final = 2
#: Longest wait for every stream to receive one insert's refresh before the run is abandoned.
ARRIVAL_TIMEOUT: Final = 10.0
PAUSE: Final = 0.05
#: Inserts before the measured ones (see _series).
WARM_UP: Final = 5
_EVENT: Final = b"event: refresh"
_INSERT: Final = (
    "INSERT INTO outbox_notification (event_id, audience, tenant_id, title, body)"
    " VALUES (%s, 'platform', NULL, 'bench', 'bench')"
)


class _Stream(asyncio.Protocol):
    """One SSE client: notes when each ``refresh`` arrived (perf_counter)."""

    def __init__(self, arrived: Callable[[], None]) -> None:
        self.arrivals: list[float] = []
        self.opened = asyncio.get_running_loop().create_future()
        self._arrived = arrived
        self._tail = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        self.transport.write(
            b"GET /feed/stream HTTP/1.1\r\nHost: bench\r\nX-Principal: platform\r\n"
            b"Accept: text/event-stream\r\n\r\n"
        )

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.opened.done():
            self.opened.set_result(data.startswith(b"HTTP/1.1 200"))
        seen = self._tail + data
        for _ in range(seen.count(_EVENT)):
            self.arrivals.append(now)
            self._arrived()
        self._tail = seen[-(len(_EVENT) - 1) :]

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: ARG002 - asyncio's signature
        if not self.opened.done():
            self.opened.set_result(False)


def _itself(stream: _Stream) -> _Stream:
    """The protocol factory of one already made client."""
    return stream


class _Served:
    """A feed server process: its port and pid, and (once it ended) what its collector did."""

    def __init__(self, port: int, pid: int) -> None:
        self.port = port
        self.pid = pid
        #: ``{"full": n, "longest_ms": x}``: generation-2 collections while it served.
        self.collections: dict[str, float] = {}

    def rss_kib(self) -> float:
        """The process's resident set in KiB (:func:`bench.memory.rss_mb`; NaN where there is
        none)."""
        return rss_mb(self.pid) * 1024.0


@contextlib.asynccontextmanager
async def _server(dsn: str, gc_threshold: int | None = None) -> AsyncIterator[_Served]:
    """The feed on uvicorn in a process of its own (its collector's young generation at
    ``gc_threshold``, else CPython's default)."""
    tuned = [] if gc_threshold is None else [str(gc_threshold)]
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.feed", "serve", dsn, *tuned,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    if child.stdout is None or child.stdin is None:  # pragma: no cover - asked for both pipes
        raise RuntimeError("the feed server process has no pipes")
    try:
        async with asyncio.timeout(30):
            line = await child.stdout.readline()
        served = _Served(int(line.split()[1]), child.pid)
        yield served
    finally:
        child.stdin.close()
        try:
            async with asyncio.timeout(10):
                report = await child.stdout.readline()
                await child.wait()
            if report.startswith(b"gc "):
                served.collections = json.loads(report[3:])
        except TimeoutError:
            child.kill()
            await child.wait()


async def _series(  # noqa: PLR0913 - one series' shape
    dsn: str,
    servers: list[_Served],
    streams: int,
    inserts: int,
    *,
    seed: int,
    opened: Callable[[], None] | None = None,
) -> list[float]:
    """``streams`` SSE streams spread over ``servers`` in turn, then ``inserts`` timed inserts;
    every (insert, stream) latency in ms. ``opened`` is called once every stream is open and the
    servers idle again, before the first insert."""
    loop = asyncio.get_running_loop()
    pending = [0]
    done = asyncio.Event()

    def arrived() -> None:
        pending[0] -= 1
        if pending[0] == 0:
            done.set()

    clients: list[_Stream] = []
    try:
        for start in range(0, streams, 100):  # connect in waves: the accept queue is finite
            wave = [_Stream(arrived) for _ in range(min(100, streams - start))]
            await asyncio.gather(
                *(
                    loop.create_connection(
                        functools.partial(_itself, s),
                        "127.0.0.1",
                        servers[(start + n) % len(servers)].port,
                    )
                    for n, s in enumerate(wave)
                )
            )
            async with asyncio.timeout(30):
                if not all(await asyncio.gather(*(s.opened for s in wave))):
                    raise RuntimeError("a feed stream was refused (not 200)")
            clients += wave
        await asyncio.sleep(0.5)  # every stream subscribed; the server is idle again
        if opened is not None:
            opened()
        pauses = random.Random(seed)  # noqa: S311 - spacing, not secrets
        latencies: list[float] = []
        # The clients are the instrument, not the system measured (a browser is a process of its
        # own): a full pass of THIS process's collector over a thousand connections' objects
        # stalled every arrival of an insert by ~0.25 s. The server's collector runs as usual.
        gc.disable()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            # A few inserts first, not measured: the first passes through every path warm it up,
            # and a full pass of the garbage collector over what a thousand new connections made
            # falls among them rather than into the figure (ADR 0022 says how large it was).
            for n in range(-WARM_UP, inserts):
                await asyncio.sleep(pauses.uniform(0, PAUSE))
                pending[0] = streams
                done.clear()
                started = time.perf_counter()
                await conn.execute(_INSERT, (f"bench-{seed}-{streams}-{n}",))
                async with asyncio.timeout(ARRIVAL_TIMEOUT):
                    await done.wait()
                if n >= 0:
                    latencies += [(c.arrivals[n + WARM_UP] - started) * 1000.0 for c in clients]
        return latencies
    finally:
        gc.enable()
        for client in clients:
            if client.transport is not None:
                client.transport.close()
        await asyncio.sleep(0.2)


async def measure(
    server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    p50: dict[int, list[float]] = {n: [] for n in (*STREAM_COUNTS, SCALED_STREAMS)}
    p99: dict[int, list[float]] = {n: [] for n in (*STREAM_COUNTS, SCALED_STREAMS)}
    per_stream_kib: list[float] = []
    full_gcs: list[float] = []
    longest_gc: list[float] = []
    tuned: dict[str, list[float]] = {"p50": [], "p99": [], "full": []}

    def note(streams: int, series: list[float], where: str) -> None:
        p50[streams].append(percentile(series, 50))
        p99[streams].append(percentile(series, 99))
        log(
            f"feed run {len(p99[streams])}: {streams} streams{where}, p50"
            f" {p50[streams][-1]:.1f} ms, p99 {p99[streams][-1]:.1f} ms"
        )

    with fresh_database(server_dsn, "feed") as dsn:
        for run in range(runs):
            async with _server(dsn) as server:
                for streams in STREAM_COUNTS:
                    before = server.rss_kib()

                    def opened(before: float = before, streams: int = streams) -> None:
                        after = server.rss_kib()
                        if streams == max(STREAM_COUNTS) and math.isfinite(after - before):
                            per_stream_kib.append((after - before) / streams)

                    series = await _series(
                        dsn, [server], streams, sizes.feed_inserts, seed=run, opened=opened
                    )
                    note(streams, series, "")
            async with contextlib.AsyncExitStack() as stack:
                servers = [await stack.enter_async_context(_server(dsn)) for _ in range(PROCESSES)]
                series = await _series(dsn, servers, SCALED_STREAMS, sizes.feed_inserts, seed=run)
                note(SCALED_STREAMS, series, f" over {PROCESSES} processes")
            for served in (server, *servers):
                full_gcs.append(served.collections.get("full", 0))
                longest_gc.append(served.collections.get("longest_ms", 0.0))
            await _tuned_series(dsn, sizes.feed_inserts, run, tuned, log)
    figures: dict[str, Any] = {
        f"streams_{n}": {"p50_ms": Figure.of(p50[n], "ms"), "p99_ms": Figure.of(p99[n], "ms")}
        for n in STREAM_COUNTS
    }
    figures[f"streams_{SCALED_STREAMS}_{PROCESSES}_processes"] = {
        "p50_ms": Figure.of(p50[SCALED_STREAMS], "ms"),
        "p99_ms": Figure.of(p99[SCALED_STREAMS], "ms"),
    }
    figures["streams_1000_collector_tuned"] = {
        "p50_ms": Figure.of(tuned["p50"], "ms"),
        "p99_ms": Figure.of(tuned["p99"], "ms"),
        "full_collections": Figure.of(tuned["full"], "collections"),
        "threshold": f"gc.set_threshold({TUNED_THRESHOLD}, 10, 10) in the server",
    }
    return {
        "inserts": sizes.feed_inserts,
        "variant": (
            f"one server process (uvicorn with {_http_parser()}, Feed, one LISTEN connection);"
            " every stream of one scope; clock from just before the INSERT to the refresh bytes"
            f" at each client; and {SCALED_STREAMS:,} streams over {PROCESSES} such processes"
        ),
        **figures,
        "memory_per_stream_kib": Figure.of(per_stream_kib, "KiB") if per_stream_kib else None,
        "server_full_collections": Figure.of(full_gcs, "collections"),
        "server_longest_full_collection_ms": Figure.of(longest_gc, "ms"),
        "goal": f"p99 < 50 ms at 1,000 streams; < 150 ms at {SCALED_STREAMS:,} over {PROCESSES}",
    }


async def _tuned_series(
    dsn: str, inserts: int, run: int, into: dict[str, list[float]], log: Callable[[str], None]
) -> None:
    """1,000 streams on a server whose collector's young generation is at
    :data:`TUNED_THRESHOLD` (what the feed guide suggests to a host): p50, p99, full collections."""
    async with _server(dsn, gc_threshold=TUNED_THRESHOLD) as server:
        # Its own seed: the series' notification ids must not repeat the default series' ones.
        series = await _series(dsn, [server], max(STREAM_COUNTS), inserts, seed=TUNED_SEED + run)
    into["p50"].append(percentile(series, 50))
    into["p99"].append(percentile(series, 99))
    into["full"].append(server.collections.get("full", 0))
    log(
        f"feed run {run + 1}: {max(STREAM_COUNTS)} streams, collector tuned, p50"
        f" {into['p50'][-1]:.1f} ms, p99 {into['p99'][-1]:.1f} ms,"
        f" {into['full'][-1]:g} full collections"
    )


def _http_parser() -> str:
    """What uvicorn parses HTTP with here ("auto": httptools when installed, else h11)."""
    try:
        importlib.import_module("httptools")
    except ImportError:
        return "h11"
    return "httptools"


# --- the server process ---------------------------------------------------------------------------


async def _serve(dsn: str, gc_threshold: int | None = None) -> None:
    import uvicorn  # noqa: PLC0415 - the server process only
    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.requests import HTTPConnection  # noqa: PLC0415
    from starlette.routing import Mount  # noqa: PLC0415

    from outbox_adapters.feed import Feed, FeedSettings, Principal  # noqa: PLC0415

    def everyone_operates(_connection: HTTPConnection) -> Principal:
        return Principal.platform_operator()

    # Every bench stream is the one principal's: the caps (10 a principal, 1,000 a process by
    # default) are raised so that a series' streams and the last series' closing ones all fit.
    most = 2 * max(*STREAM_COUNTS, SCALED_STREAMS)
    if gc_threshold is not None:  # as a host that follows the feed guide would
        gc.set_threshold(gc_threshold, 10, 10)
    collections = _FullCollections()
    settings = FeedSettings(send_timeout=30, max_streams_per_principal=most, max_streams=most)
    async with Feed(dsn, everyone_operates, settings=settings) as feed:
        config = uvicorn.Config(
            Starlette(routes=[Mount("/feed", app=feed.app)]),
            host="127.0.0.1", port=0, log_level="error", lifespan="off", backlog=4096,
            timeout_graceful_shutdown=1,
        )  # fmt: skip
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve())
        while not server.started:  # noqa: ASYNC110 - uvicorn's flag, no event
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        sys.stdout.write(f"port {port}\n")
        sys.stdout.flush()
        # Until the parent closes our stdin (or goes away).
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await feed.aclose()
        server.should_exit = True
        await serving
    sys.stdout.write(f"gc {json.dumps(collections.report())}\n")
    sys.stdout.flush()


class _FullCollections:
    """Times this process's generation-2 garbage collections (a ``gc.callbacks`` entry)."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self._started = 0.0
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:  # the oldest generation
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.durations.append((time.perf_counter() - self._started) * 1000.0)

    def report(self) -> dict[str, float]:
        return {"full": len(self.durations), "longest_ms": max(self.durations, default=0.0)}


if __name__ == "__main__":
    if len(sys.argv) in {3, 4} and sys.argv[1] == "serve":
        from bench import loop

        loop.run(_serve(sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else None))
    else:
        sys.exit("usage: python -m bench.feed serve DSN [GC_THRESHOLD]")
