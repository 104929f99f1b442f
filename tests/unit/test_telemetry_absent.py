"""Without OpenTelemetry installed, every telemetry call is a no-op and nothing of it is imported.

Run in a fresh interpreter where any ``opentelemetry`` import fails, as on a host that installed
the library without the ``otel`` extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import asyncio, importlib.abc, io, json, logging, sys

class NoOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, NoOpenTelemetry())

from outbox_adapters import telemetry
from outbox_adapters.clock import SystemClock
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.memory import MemoryStore, RecordingHandler
from outbox_adapters.runtime import Worker
from outbox_core.messages import NewMessage

stream = io.StringIO()
telemetry.json_logging(logging.INFO, stream=stream)
store = MemoryStore()
store.enqueue(NewMessage("email", {"n": 1}))
handler = RecordingHandler()
worker = Worker(store, handler, email_lane(poll_interval=0.01))
stats = asyncio.run(worker.run(drain=True))
logging.getLogger("outbox_adapters.test").warning("done", extra={"outbox_lane": "email"})
print(json.dumps({
    "available": telemetry.AVAILABLE,
    "dispatched": stats.dispatched,
    "trace_context": handler.calls[0].row.trace_context,
    "imported": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
    "log": json.loads(stream.getvalue().splitlines()[-1]),
}))
"""


def test_without_opentelemetry_the_worker_runs_and_nothing_is_traced_or_imported() -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["available"] is False
    assert found["dispatched"] == 1
    assert found["trace_context"] is None
    assert found["imported"] == []
    log = found["log"]
    assert (log["level"], log["message"], log["lane"]) == ("WARNING", "done", "email")
    assert "trace_id" not in log
