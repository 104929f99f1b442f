"""What every lane description is and what the one runner hands it.

A lane description (:class:`Lane`) says what a lane is: its name, the ``outbox worker`` options it
takes, the connections it needs (pool size, the wake-up it listens for, the broker streams), and
a factory that builds its workers from a :class:`LaneContext`. The runner
(:func:`~outbox_adapters.app.runner.run_lane`) builds that context the same way for every lane:
pool, wake-up, leader lease, heartbeat, broker. A description never opens a connection itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import attrs
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.wakeup import Wakeup
from outbox_core.brokers import Broker, StreamSpec
from outbox_core.errors import ConfigurationError
from outbox_core.messages import check_lane_name
from outbox_core.ports import Clock, Heartbeat, LeaderLease

if TYPE_CHECKING:
    from outbox_adapters.smtp import SmtpSettings
    from outbox_core.ports import Encryptor

__all__ = ["COMMON_OPTIONS", "AppSettings", "Lane", "LaneContext", "Runnable", "lane_name"]

#: The ``outbox worker`` options every lane takes (where the rows are, how the worker wakes and
#: stops, the sealed-field keys, the metrics endpoint).
COMMON_OPTIONS: Final = frozenset(
    {
        "database_url",
        "drain",
        "listen",
        "poll_interval",
        "lane",
        "encryption_keys",
        "encryption_keys_file",
        "metrics_port",
        "metrics_host",
    }
)


def strings(value: Iterable[str]) -> tuple[str, ...]:
    """The attrs converter of a description's tuple of names (topics, networks)."""
    return tuple(value)


def lane_name(owner: str) -> Any:  # noqa: ANN401 - an attrs validator
    """The attrs validator of a description's ``name``: a lane name, or a ConfigurationError."""

    def check(_inst: object, _attribute: object, value: str) -> None:
        try:
            check_lane_name(value)
        except ValueError as exc:
            raise ConfigurationError(f"{owner}.name: {exc}") from None

    return check


class AppSettings(Protocol):
    """What a lane reads of the application (:class:`~outbox_adapters.app.Outbox` is one)."""

    @property
    def database_url(self) -> str | None: ...
    @property
    def smtp(self) -> SmtpSettings | None: ...
    @property
    def broker(self) -> str | None: ...
    @property
    def encryptor(self) -> Encryptor | None: ...
    @property
    def environment(self) -> str: ...
    @property
    def leader(self) -> bool: ...
    @property
    def listen(self) -> bool: ...
    @property
    def poll_interval(self) -> float: ...
    @property
    def streams(self) -> Sequence[StreamSpec]: ...

    def sender_address(self) -> str | None: ...


@runtime_checkable
class Runnable(Protocol):
    """What a lane's factory yields: run until stopped (or, with ``drain``, until none is due);
    :meth:`request_stop` stops taking work, and ``run`` returns once what is in flight is
    recorded."""

    def request_stop(self) -> None: ...

    async def run(self, *, drain: bool = False) -> Any: ...  # noqa: ANN401 - the lane's stats


@attrs.frozen
class LaneContext:
    """What the runner built for one lane: the app's settings (``app.database_url`` is set), the
    pool, the clock, this process's holder name, the leader lease (``None`` with ``--no-leader``),
    the heartbeat, the lane's wake-up (``None`` when polling only) and the broker (``None`` for a
    lane that needs none)."""

    app: AppSettings
    pool: AsyncConnectionPool[Any]
    clock: Clock
    holder: str
    leader: LeaderLease | None
    heartbeat: Heartbeat
    wakeup: Wakeup | None = None
    broker: Broker | None = None
    drain: bool = False
    #: Which database this is (:mod:`outbox_adapters.postgres.identity`): the scope of the e-mail
    #: lane's Message-IDs ("" when unknown).
    database_scope: str = ""


@runtime_checkable
class Lane(Protocol):
    """One lane as a host or the built-in description names it."""

    @property
    def name(self) -> str:
        """The lane's name: what ``--lane`` selects and the leader lease is keyed by."""
        ...

    @property
    def options(self) -> frozenset[str]:
        """The ``outbox worker`` options (parameter names) this lane takes."""
        ...

    @property
    def wakeup_lane(self) -> str | None:
        """The lane whose commits wake it (LISTEN), or ``None``."""
        ...

    def check(self, app: AppSettings) -> None:
        """Raise :class:`ConfigurationError` naming what ``app`` lacks for this lane (before any
        connection is opened)."""
        ...

    def pool_size(self) -> int:
        """Connections the lane's workers use at once."""
        ...

    def streams(self, app: AppSettings) -> Sequence[StreamSpec] | None:
        """The broker streams to declare, or ``None`` for a lane that needs no broker."""
        ...

    def describe(self, app: AppSettings) -> list[str]:
        """What the lane will do, one line each (printed by ``outbox worker`` at start)."""
        ...

    def workers(self, context: LaneContext) -> AbstractAsyncContextManager[Runnable]:
        """Build the lane's workers over ``context`` (the handler factory)."""
        ...
