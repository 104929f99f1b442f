""":class:`Outbox`: what a host's outbox is, in one object; :func:`load_app` finds it by name."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from outbox_adapters.app.context import Lane
from outbox_adapters.app.lanes import EmailLane
from outbox_adapters.app.runner import check_lane, run_lane
from outbox_core.brokers import StreamSpec
from outbox_core.errors import ConfigurationError
from outbox_core.ports import Encryptor

if TYPE_CHECKING:
    from outbox_adapters.smtp import SmtpSettings  # noqa: TC004 - attrs never resolves it; no smtp extra needed

__all__ = ["Outbox", "load_app"]


def _as_lanes(value: Iterable[Lane]) -> tuple[Lane, ...]:
    return tuple(value)


def _as_streams(value: Iterable[StreamSpec]) -> tuple[StreamSpec, ...]:
    return tuple(value)


def _lanes(_inst: object, _attribute: object, value: Sequence[Lane]) -> None:
    for lane in value:
        if not isinstance(lane, Lane):
            raise ConfigurationError(
                f"Outbox.lanes: {lane!r} is not a lane (EmailLane, WebhookLane, RelayLane,"
                " EmailChannelLane, InAppChannelLane or one of the host's own)"
            )
    names = [lane.name for lane in value]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ConfigurationError(f"Outbox.lanes: lane {duplicated[0]!r} is described twice")


@attrs.frozen
class Outbox:
    """The host's outbox: its database, its SMTP relay and sender, its broker, its keys, and the
    lanes it runs (e-mail lanes, the webhook lane, the relay, the consumer channels).

    Every field the CLI also has a flag for may be left out here and given there
    (``--database-url``, ``--smtp-url``, ``--sender``, ``--broker``, ...); a value given on the
    command line wins. ``environment``: ``production`` refuses plain-text SMTP and http webhooks.
    ``streams``: the broker streams the event lanes declare for the topics they hold (a topic
    none holds gets one of its own, named after it, kept 7 days).
    """

    lanes: tuple[Lane, ...] = attrs.field(
        default=(EmailLane(),), converter=_as_lanes, validator=_lanes
    )
    database_url: str | None = None
    smtp: SmtpSettings | None = None
    sender: str | None = None
    broker: str | None = None
    encryptor: Encryptor | None = None
    environment: str = "development"
    leader: bool = True
    listen: bool = True
    poll_interval: float = 1.0
    streams: tuple[StreamSpec, ...] = attrs.field(default=(), converter=_as_streams)

    def lane(self, name: str) -> Lane:
        """The lane called ``name``; :class:`ConfigurationError` naming the lanes there are."""
        for lane in self.lanes:
            if lane.name == name:
                return lane
        known = ", ".join(repr(lane.name) for lane in self.lanes)
        raise ConfigurationError(f"the application has no lane {name!r} (its lanes: {known})")

    def sender_address(self) -> str | None:
        """The envelope sender: ``sender``, else the SMTP settings' own."""
        if self.sender is not None:
            return self.sender
        return self.smtp.policy.sender if self.smtp is not None else None

    @contextlib.asynccontextmanager
    async def running(self, *names: str) -> AsyncIterator[dict[str, asyncio.Task[Any]]]:
        """Run the named lanes' workers (every lane without names) while the block runs; on
        leaving, stop claiming, let the work in flight finish and be recorded, then return.
        Every lane is checked before any starts (:class:`ConfigurationError` naming what is
        missing); a worker that fails is re-raised on leaving."""
        chosen = [self.lane(name) for name in names] if names else list(self.lanes)
        for lane in chosen:
            check_lane(self, lane)
        stops = [asyncio.Event() for _ in chosen]
        tasks = {
            lane.name: asyncio.create_task(run_lane(self, lane, stop=stop), name=lane.name)
            for lane, stop in zip(chosen, stops, strict=True)
        }
        try:
            yield tasks
        finally:
            for stop in stops:
                stop.set()
            await asyncio.gather(*tasks.values())


def load_app(spec: str) -> Outbox:
    """The :class:`Outbox` that ``package.module:attribute`` names (the attribute may also be a
    function of no arguments returning one); :class:`ConfigurationError` saying what is wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"--app {spec!r}: expected package.module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"--app {spec!r}: cannot import {module_name!r}: {exc}") from None
    try:
        found = getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(f"--app {spec!r}: {module_name!r} has no {attribute!r}") from None
    if callable(found) and not isinstance(found, Outbox):
        found = found()
    if not isinstance(found, Outbox):
        raise ConfigurationError(
            f"--app {spec!r}: {attribute!r} is a {type(found).__name__}, not an outbox Outbox"
        )
    return found
