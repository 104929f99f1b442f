"""The commands' LISTEN wake-up: one option, one listener per process, one line saying which.

``outbox worker``, ``outbox relay`` and ``outbox consume --channel email`` each run lanes whose
rows are written by other processes' commits (an enqueue, a publish, the e-mail channel's own
rows). With ``--listen`` (the default) the process holds one extra connection LISTENing on
:data:`~outbox_adapters.postgres.WAKEUP_CHANNEL` and a lane wakes within milliseconds of a commit;
polling every ``--poll-interval`` stays the fallback (and is all there is with ``--no-listen``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from outbox_adapters.cli.options import option
from outbox_adapters.postgres import WAKEUP_CHANNEL

__all__ = ["listen_option"]

F = TypeVar("F", bound=Callable[..., object])


def listen_option(function: F) -> F:
    """``--listen/--no-listen`` (``OUTBOX_LISTEN``), on by default."""
    return option(
        "--listen/--no-listen",
        env="OUTBOX_LISTEN",
        default=True,
        show_default=True,
        help=f"Wake within milliseconds of a commit (LISTEN {WAKEUP_CHANNEL}, one more"
        " connection); polling stays the fallback.",
    )(function)
