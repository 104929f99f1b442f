""":class:`Outbox`: what a host's outbox is, in one object; :func:`load_app` finds it by name."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from outbox_adapters.app.lanes import EmailLane
from outbox_adapters.app.runner import EmailLaneRun, run_email_lane
from outbox_adapters.lanes.email import email_lane
from outbox_core.errors import ConfigurationError
from outbox_core.ports import Encryptor

if TYPE_CHECKING:
    from outbox_adapters.smtp import SmtpSettings  # noqa: TC004 - attrs never resolves it; no smtp extra needed

__all__ = ["Outbox", "load_app"]


def _as_lanes(value: Iterable[EmailLane]) -> tuple[EmailLane, ...]:
    return tuple(value)


def _lanes(_inst: object, _attribute: object, value: Sequence[EmailLane]) -> None:
    names = [lane.name for lane in value]
    if not all(isinstance(lane, EmailLane) for lane in value):
        raise ConfigurationError("Outbox.lanes: each lane must be an EmailLane")
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ConfigurationError(f"Outbox.lanes: lane {duplicated[0]!r} is described twice")


@attrs.frozen
class Outbox:
    """The host's outbox: its database, its SMTP relay and sender, its keys, its e-mail lanes.

    Every field the CLI also has a flag for may be left out here and given there
    (``--database-url``, ``--smtp-url``, ``--sender``); a value given on the command line wins.
    """

    lanes: tuple[EmailLane, ...] = attrs.field(
        default=(EmailLane(),), converter=_as_lanes, validator=_lanes
    )
    database_url: str | None = None
    smtp: SmtpSettings | None = None
    sender: str | None = None
    encryptor: Encryptor | None = None
    leader: bool = True
    listen: bool = True
    poll_interval: float = 1.0

    def lane(self, name: str) -> EmailLane:
        """The lane called ``name``; :class:`ConfigurationError` naming the lanes there are."""
        for lane in self.lanes:
            if lane.name == name:
                return lane
        known = ", ".join(repr(lane.name) for lane in self.lanes)
        raise ConfigurationError(f"the application has no lane {name!r} (its lanes: {known})")

    def lane_run(self, lane: EmailLane, *, drain: bool = False) -> EmailLaneRun:
        """The run this application describes for ``lane`` (nothing left to the command line)."""
        if self.database_url is None:
            raise ConfigurationError("the application names no database_url")
        sender = self.sender or (self.smtp.policy.sender if self.smtp is not None else None)
        if sender is None:
            raise ConfigurationError("the application names no sender")
        config = email_lane(
            lane=lane.name,
            timing=lane.timing,
            poll_interval=self.poll_interval,
            rows_in_flight=lane.rows_in_flight,
        )
        return EmailLaneRun(
            database_url=self.database_url,
            lane=lane,
            config=config,
            sender=sender,
            smtp=self.smtp,
            encryptor=self.encryptor,
            leader=self.leader,
            listen=self.listen,
            drain=drain,
        )

    @contextlib.asynccontextmanager
    async def running(self, *names: str) -> AsyncIterator[dict[str, asyncio.Task[Any]]]:
        """Run the named lanes' workers (every lane without names) while the block runs; on
        leaving, stop claiming, let the rows in flight finish and be recorded, then return.
        A worker that fails is re-raised on leaving."""
        chosen = [self.lane(name) for name in names] if names else list(self.lanes)
        runs = [self.lane_run(lane) for lane in chosen]
        stops = [asyncio.Event() for _ in runs]
        tasks = {
            run.lane.name: asyncio.create_task(run_email_lane(run, stop=stop), name=run.lane.name)
            for run, stop in zip(runs, stops, strict=True)
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
