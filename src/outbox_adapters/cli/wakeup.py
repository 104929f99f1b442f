"""The commands' LISTEN wake-up: one option, one listener per process, one line saying which.

``outbox worker``, ``outbox relay`` and ``outbox consume --channel email`` each run lanes whose
rows are written by other processes' commits (an enqueue, a publish, the e-mail channel's own
rows). With ``--listen`` (the default) the process holds one extra connection LISTENing on
:data:`~outbox_adapters.postgres.WAKEUP_CHANNEL` and a lane wakes within milliseconds of a commit;
polling every ``--poll-interval`` stays the fallback (and is all there is with ``--no-listen``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeVar

import click

from outbox_adapters.cli.options import Failure, option
from outbox_adapters.postgres import WAKEUP_CHANNEL, WakeupListener
from outbox_adapters.wakeup import Wakeup

__all__ = ["lane_wakeups", "listen_option"]

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


@contextlib.asynccontextmanager
async def lane_wakeups(
    database_url: str, lanes: Sequence[str], *, listen: bool, poll_interval: float
) -> AsyncIterator[list[Wakeup | None]]:
    """One wake-up signal per lane of ``lanes`` (all ``None`` without ``listen``: poll only),
    from one LISTEN connection held while the block runs. Prints which it is."""
    every = f"polling every {poll_interval:g}s"
    if not listen:
        click.echo(f"wake-up: {every}")
        yield [None for _ in lanes]
        return
    listener = WakeupListener(database_url)
    try:
        await listener.start()
    except TimeoutError:  # psycopg's own failures reach database_errors() as they are
        raise Failure("cannot use the database (--database-url): LISTEN timed out") from None
    try:
        click.echo(f"wake-up: LISTEN {WAKEUP_CHANNEL} ({every} stays the fallback)")
        # The listener holds its subscribers weakly: the caller's workers keep these alive.
        yield [listener.wakeup(lane) for lane in lanes]
    finally:
        await listener.aclose()
