""":class:`Outbox`: what a host's outbox is, in one object; :func:`load_app` finds it by name."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import attrs

from outbox_adapters.lanes.hooks import BounceReport, BrandingLookup, SuppressionCheck, check_hook
from outbox_core.errors import ConfigurationError
from outbox_core.messages import check_lane_name
from outbox_core.ports import Encryptor, Mailer
from outbox_core.timing import EmailStepBudgets, EmailTiming

if TYPE_CHECKING:
    from outbox_adapters.smtp import SmtpSettings  # noqa: TC004 - attrs never resolves it; no smtp extra needed

__all__ = ["EmailLane", "MailerFactory", "Outbox", "load_app"]

#: Makes the lane's mailer: given the SMTP settings (``None`` when the app names none) and the
#: step budgets, an async context manager yielding a :class:`~outbox_core.ports.Mailer`.
MailerFactory = Callable[
    ["SmtpSettings | None", EmailStepBudgets], AbstractAsyncContextManager[Mailer]
]


def _lane_name(_inst: object, _attribute: object, value: str) -> None:
    try:
        check_lane_name(value)
    except ValueError as exc:
        raise ConfigurationError(f"EmailLane.name: {exc}") from None


def _hook(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    del inst
    check_hook(attribute.name, value)


@attrs.frozen
class EmailLane:
    """One e-mail lane of the host: its name and the host's hooks (each ``None``: not used).

    ``mailer``: the host's own mailer instead of SMTP (then ``smtp`` may be left out);
    ``timing``: the lane's step budgets and batch; ``rows_in_flight``: rows sent at once."""

    name: str = attrs.field(default="email", validator=_lane_name)
    suppressed: SuppressionCheck | None = attrs.field(default=None, validator=_hook)
    branding: BrandingLookup | None = attrs.field(default=None, validator=_hook)
    bounce_report: BounceReport | None = attrs.field(default=None, validator=_hook)
    mailer: MailerFactory | None = None
    sender_name: str | None = None
    timing: EmailTiming = attrs.field(factory=EmailTiming)
    rows_in_flight: int = 1


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
        default=(EmailLane(),), converter=tuple, validator=_lanes
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

    @contextlib.asynccontextmanager
    async def running(self, *names: str) -> AsyncIterator[dict[str, asyncio.Task[Any]]]:
        """Run the named lanes' workers (every lane without names) while the block runs; on
        leaving, stop claiming, let the rows in flight finish and be recorded, then return.
        A worker that fails is re-raised on leaving."""
        from outbox_adapters.app.runner import EmailLaneRun, run_email_lane  # noqa: PLC0415

        chosen = [self.lane(name) for name in names] if names else list(self.lanes)
        runs = [EmailLaneRun.of(self, lane) for lane in chosen]
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
