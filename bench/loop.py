"""The event loop every comparison runs on: uvloop when installed (as PERFORMANCE.md measured),
else asyncio's own. Which one ran is recorded in the results."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["loop_name", "run"]

T = TypeVar("T")


def _uvloop() -> Any:  # noqa: ANN401 - the module, if installed
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None


def loop_name() -> str:
    uvloop = _uvloop()
    return f"uvloop {uvloop.__version__}" if uvloop is not None else "asyncio"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to the end on a new loop of the chosen kind."""
    uvloop = _uvloop()
    if uvloop is not None:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)
