"""The end of a consumer's run (:class:`~outbox_adapters.lanes.consumer.ChannelConsumer`): the
broker's fetch in progress cancelled, every delivery in progress settled, the broker's iterator
closed; a stop that never ends for a broker consumer that ignores its cancellation.

A broker consumer is expected to end a cancelled fetch at once (the library's NATS and Kafka
consumers do). One that does not — it takes the cancellation for a failed fetch and fetches on,
or its close waits on a dead connection — is waited for at most ``grace`` and then left behind
with a warning naming the channel, so the host's shutdown goes on. Deliveries in progress are
not cut short: each already runs under the consumer's per-event deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, Final

from outbox_adapters.lanes.in_flight import InFlight

__all__ = ["STOP_GRACE", "ended_within", "wound_down"]

_log = logging.getLogger("outbox_adapters.lanes.consumer")

#: How long a stop waits for the broker consumer's cancelled fetch, and then for its close.
STOP_GRACE: Final = timedelta(seconds=5)


async def ended_within(future: asyncio.Future[Any], seconds: float) -> bool:
    """Whether ``future`` ends within ``seconds``; its result or error is taken either way (a
    cancelled fetch's answer is of no use any more). (The matrix's "stop waits for the fetch"
    mutant waits without a bound.)"""
    done, _ = await asyncio.wait({future}, timeout=seconds)
    if not done:
        return False
    with contextlib.suppress(BaseException):
        future.result()
    return True


async def wound_down(  # noqa: PLR0913 - keyword-only, one per thing the run leaves behind
    *,
    channel: str,
    stop: asyncio.Future[Any],
    following: asyncio.Future[Any] | None,
    messages: AsyncIterator[Any],
    slots: InFlight,
    grace: timedelta,
) -> None:
    """No delivery fetched any more (``following``, the fetch in progress, cancelled), every one
    in progress settled (``slots``), the broker's iterator (``messages``) closed; the fetch and
    the close each waited for at most ``grace``."""
    seconds = grace.total_seconds()
    stop.cancel()
    if following is not None:
        following.cancel()
        if not await ended_within(following, seconds):
            _log.warning(
                "channel %s: the broker consumer's fetch did not end within %gs of being"
                " cancelled; the channel stops without it",
                channel,
                seconds,
            )
    slots.give_back()
    await slots.settled()
    closer = getattr(messages, "aclose", None)
    if closer is None:
        return
    try:
        closing = asyncio.ensure_future(closer())
    except Exception:  # noqa: BLE001 - a close that failed at once leaves nothing to wait for
        return
    if not await ended_within(closing, seconds):
        closing.cancel()
        _log.warning(
            "channel %s: the broker consumer did not close within %gs; the channel stops"
            " without it",
            channel,
            seconds,
        )
