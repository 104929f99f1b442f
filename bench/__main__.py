"""``python -m bench [--quick] [--dsn URL] [--only NAME,...] [--runs 3]``

Runs the comparisons of PERFORMANCE.md side by side on one PostgreSQL server, writes
``bench/results/latest.json`` and ``latest.md`` and the plots in ``docs/benchmarks/``, and prints
the tables. Exit status 1 when a comparison failed (the others still run and are written).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import inspect
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from bench import (
    blocked_keys,
    dispatch,
    enqueue,
    feed,
    history,
    latency,
    loop,
    memory,
    meta,
    peers,
    relay,
    report,
    retention,
    server,
    smtp_e2e,
    variants,
    webhook_ordering,
    webhooks,
)
from bench.settings import FULL, QUICK, Sizes

ROOT: Final = Path(__file__).resolve().parent.parent

#: name → the comparison's ``measure(server_dsn, sizes, runs, log)`` (async or not)
COMPARISONS: Final[dict[str, Callable[..., Any]]] = {
    "dispatch": dispatch.measure,
    "peers": peers.measure,
    "smtp": smtp_e2e.measure,
    "webhooks": webhooks.measure,
    "webhook_ordering": webhook_ordering.measure,
    "relay": relay.measure,
    "history": history.measure,
    "blocked_keys": blocked_keys.measure,
    "retention": retention.measure,
    "enqueue": enqueue.measure,
    "latency": latency.measure,
    "memory": memory.measure,
    "feed": feed.measure,
}

#: Extra seconds past a comparison's own timeout before the process is stopped outright.
HARD_STOP_GRACE: Final = 60.0


def _log(message: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[1])
    parser.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    parser.add_argument(
        "--dsn",
        help=f"PostgreSQL server to use (default: ${server.BENCH_DSN_ENV}, else a container, else"
        " an embedded server)",
    )
    parser.add_argument(
        "--only", help=f"comma-separated comparisons to run, of: {', '.join(COMPARISONS)}"
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (at least 3)")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--plots", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    if args.runs < 3:
        parser.error(f"--runs must be at least 3 (a median needs a spread), got {args.runs}")
    names = [n.strip() for n in (args.only or ",".join(COMPARISONS)).split(",") if n.strip()]
    unknown = [n for n in names if n not in COMPARISONS]
    if unknown:
        parser.error(f"unknown comparison(s) {', '.join(unknown)}; known: {', '.join(COMPARISONS)}")
    args.names = names
    return args


def _run_one(name: str, server_dsn: str, sizes: Sizes, runs: int) -> tuple[dict[str, Any], float]:
    measure = COMPARISONS[name]
    started = time.monotonic()
    # Last resort: if a blocking call ignores every timeout, dump the stacks and stop the process.
    faulthandler.dump_traceback_later(sizes.comparison_timeout + HARD_STOP_GRACE, exit=True)
    try:
        if inspect.iscoroutinefunction(measure):

            async def bounded() -> dict[str, Any]:
                async with asyncio.timeout(sizes.comparison_timeout):
                    result: dict[str, Any] = await measure(server_dsn, sizes, runs, _log)
                    return result

            result = loop.run(bounded())
        else:
            result = measure(server_dsn, sizes, runs, _log)
    finally:
        faulthandler.cancel_dump_traceback_later()
    return result, time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    sizes = QUICK if args.quick else FULL
    logging.basicConfig(level=logging.ERROR)
    for noisy in ("mail.log", "mail.debug", "pgqueuer"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    started = time.monotonic()
    failed = False
    with server.server(args.dsn) as found:
        facts = server.server_facts(found.dsn)
        _log(
            f"{sizes.name} run on PostgreSQL {facts.get('server_version')} ({found.source},"
            f" {facts.get('transport')}), loop {loop.loop_name()}, {args.runs} runs per figure"
        )
        results: dict[str, Any] = {
            "meta": {
                "run": sizes.name,
                "runs": args.runs,
                "loop": loop.loop_name(),
                "server_source": found.source,
                "server": facts,
                "machine": meta.machine(),
                "packages": meta.packages(),
                "tree": meta.tree(ROOT),
                "variants": variants.describe(),
                "comparisons": args.names,
                "seconds": {},
                "load_average": {},
            }
        }
        for name in args.names:
            _log(f"{name}: starting")
            load_before = os.getloadavg()[0]
            try:
                result, seconds = _run_one(name, found.dsn, sizes, args.runs)
            except Exception as exc:  # noqa: BLE001 - one broken comparison must not hide the rest
                failed = True
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
                _log(f"{name}: FAILED: {type(exc).__name__}: {exc}")
                continue
            results[name] = result
            results["meta"]["seconds"][name] = round(seconds, 1)
            # The machine's 1-minute load around each comparison: how noisy its figures may be.
            results["meta"]["load_average"][name] = [
                round(load_before, 2),
                round(os.getloadavg()[0], 2),
            ]
            _log(f"{name}: done in {seconds:.0f} s")
    results["meta"]["seconds"]["total"] = round(time.monotonic() - started, 1)
    results["meta"]["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    json_path, md_path = report.write(results, args.results)
    _log(f"wrote {json_path} and {md_path}")
    if not args.no_plots:
        try:
            from bench import plots  # noqa: PLC0415 - matplotlib comes with the bench extra

            for path in plots.draw(results, args.plots):
                _log(f"wrote {path}")
        except ImportError as exc:
            _log(f"no plots ({exc}); install the bench group: python3 -m nox -s bench")
    sys.stdout.write(report.markdown(results) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
