"""The targets a fan-out round read for the deliveries it just wrote, handed to their first attempts.

A first attempt needs its delivery's target (the endpoint's URL and state, the signing secrets,
the event's id and body). Read one attempt at a time that is a query per delivery, right after the
fan-out that wrote the delivery; the round reads them all in one query instead
(``delivery_targets``) and leaves them here. :class:`FreshTargets` is what the first attempts'
:class:`~outbox_adapters.lanes.webhooks.DeliveryHandler` asks: a target read at most ``max_age``
ago (1 s by default) is used once and dropped; anything else (a retry, a target older than that,
one the round could not read) is read from the repository by the attempt. The bound keeps what an
attempt acts on as fresh as a per-attempt read would: an endpoint disabled, or a secret rotated,
more than ``max_age`` before the attempt starts is seen by it; and an endpoint that answers 410
Gone has its held targets dropped at once (:meth:`FreshTargets.endpoint_gone`), so the attempts
still to come to it read the endpoint's state again instead of POSTing to it on an old read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Final, Protocol

from outbox_core.errors import ConfigurationError
from outbox_core.ports import Clock

__all__ = ["DEFAULT_TARGET_AGE", "FreshTargets"]

#: How old a target read by the fan-out round may be when its first attempt starts.
DEFAULT_TARGET_AGE: Final = timedelta(seconds=1)


class _Target(Protocol):
    @property
    def endpoint_id(self) -> int: ...


class _Targets(Protocol):
    async def delivery_target(self, delivery_id: int) -> Any: ...  # noqa: ANN401 - the store's target

    async def delivery_targets(self, delivery_ids: Sequence[int]) -> Mapping[int, _Target]: ...


class FreshTargets:
    """``delivery_target`` for first attempts: the round's read if fresh, else the repository's."""

    def __init__(
        self, repository: _Targets, *, clock: Clock, max_age: timedelta = DEFAULT_TARGET_AGE
    ) -> None:
        if not isinstance(max_age, timedelta) or max_age < timedelta(0):
            raise ConfigurationError(f"max_age must be a duration of 0 or more, got {max_age!r}")
        self._repository = repository
        self._clock = clock
        self._max_age = max_age.total_seconds()
        #: delivery id -> (monotonic instant it was read, its target)
        self._held: dict[int, tuple[float, _Target]] = {}

    async def prime(self, delivery_ids: Sequence[int]) -> None:
        """Read the targets of ``delivery_ids`` in one query and hold them for their attempts."""
        if not delivery_ids:
            return
        targets = await self._repository.delivery_targets(delivery_ids)
        now = self._clock.monotonic()
        # Whatever no attempt took in time is dropped here: nothing is held for long.
        self._held = {k: v for k, v in self._held.items() if now - v[0] <= self._max_age}
        self._held.update((delivery_id, (now, t)) for delivery_id, t in targets.items())

    async def delivery_target(self, delivery_id: int) -> Any:  # noqa: ANN401 - the store's target
        held = self._held.pop(delivery_id, None)
        if held is not None and self._clock.monotonic() - held[0] <= self._max_age:
            return held[1]
        return await self._repository.delivery_target(delivery_id)

    def endpoint_gone(self, endpoint_id: int) -> None:
        """Drop every held target of ``endpoint_id`` (it answered 410 Gone): the attempts still to
        come read theirs again and see the endpoint disabled once the 410's mark is written."""
        self._held = {k: v for k, v in self._held.items() if v[1].endpoint_id != endpoint_id}

    @property
    def held(self) -> int:
        """Targets read and not used yet (tests and the bench read it)."""
        return len(self._held)
