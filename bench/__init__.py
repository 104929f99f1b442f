"""The side-by-side benchmark harness of PERFORMANCE.md: ``python -m bench [--quick]``.

Every comparison runs in ONE invocation, on ONE PostgreSQL server, in a database of its own
(``CREATE DATABASE`` per comparison, dropped afterwards), and reports each figure as the median of
``--runs`` runs with its spread (min/max). The machines are shared and noisy, so what a run says is
its *ratios*: the library against the same protocol written by hand, against pgqueuer, against the
naive SMTP loop, against a bare INSERT. An absolute figure from one run is never compared with one
from another.

Modules, one comparison each: :mod:`bench.dispatch`, :mod:`bench.peers`, :mod:`bench.smtp_e2e`,
:mod:`bench.webhooks`, :mod:`bench.history`, :mod:`bench.enqueue`, :mod:`bench.latency`,
:mod:`bench.memory`. The hand written protocol is :mod:`bench.raw`; results go to
``bench/results/latest.{json,md}`` and the plots to ``docs/benchmarks/``. Where the time goes:
:mod:`bench.breakdown` (dispatch), :mod:`bench.webhook_breakdown` (the webhook workers).
"""
