"""Fault tooling for the chaos tests (RELIABILITY.md): reusable by every channel's F-tests.

- :mod:`tests.faults.failpoints` — named fail-points (``OUTBOX_FAILPOINT=<point>[:<nth>][:stop]``)
  that make a worker process kill or stop itself at a precise step of a row's delivery.
- :mod:`tests.faults.worker_proc` — the real worker as a subprocess (``python -m
  tests.faults.worker_proc``) with those fail-points, and :class:`WorkerProcess`, the handle a test
  holds on it (its JSON event lines, signals, a standby start).
- :mod:`tests.faults.proxy` — a TCP proxy that passes, stalls, drops, resets or slows connections.
- :mod:`tests.faults.pg` — a throwaway PostgreSQL server a test may restart or cut off.

Nothing here is imported by the library; it lives with the tests so that it can cheat (monkeypatch
a client library inside a subprocess, SIGKILL itself) in ways production code never should.
"""
