"""What every broker's errors share: the rules an error map plugs into, and :class:`BrokerUnavailable`.

Each technology maps its own exceptions in its own package (:mod:`.nats.errors` for nats-py,
:mod:`.kafka.errors` for aiokafka): an :class:`ErrorMap` says which exceptions are that library's,
how to name one, and what a publish that raised one means. :class:`BrokerErrors` applies the shared
rules below with one or more maps; each adapter uses its own (the NATS adapter never consults
aiokafka's exceptions, nor the Kafka adapter nats-py's). The module-level functions apply every
map whose library is installed, for code that may hold either broker's exception.

A publish never raises for broker trouble: :meth:`BrokerErrors.publish_outcome` turns the exception
into an :class:`~outbox_core.outcomes.Outcome` (the relay retries a transient one next tick).
Everything else (declaring, listing and redriving the DLQ, connecting) raises
:class:`BrokerUnavailable` for an outage, a subclass of the core's
:class:`~outbox_core.errors.StoreUnavailable`: the broker is the event store of the consumers, and
code that already retries a store outage (the runtime, the CLI's exit codes) handles a broker
outage the same way without learning a new type (docs/adr/0019-brokers.md, "One error mapping").

==========================================  ============================================
exception                                   publish outcome
==========================================  ============================================
a timeout (ours, nats-py's, Kafka's)        transient; ``maybe_delivered`` once connected
                                            (the broker may have stored it: the replay is
                                            dropped or de-duplicated)
connection refused / closed / no servers    transient
JetStream "no stream stores the subject"    transient, naming the missing declaration
Kafka unknown topic, not leader, retriable  transient
Kafka message too large, invalid record     permanent (retrying cannot help)
JetStream API error (other)                 transient with its code and description
==========================================  ============================================
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import attrs

from outbox_core.errors import StoreUnavailable
from outbox_core.outcomes import Outcome

__all__ = [
    "BrokerErrors",
    "BrokerUnavailable",
    "ErrorMap",
    "describe",
    "installed",
    "is_broker_error",
    "operation",
    "publish_outcome",
    "timeout_outcome",
]

log = logging.getLogger("outbox.brokers")
_MAX_REASON = 200
#: The modules holding one technology's error map each (skipped when its library is missing).
_MAP_MODULES = ("outbox_adapters.brokers.nats.errors", "outbox_adapters.brokers.kafka.errors")


class ErrorMap(Protocol):
    """One broker technology's exceptions: which are its errors, how to name one, what a publish
    that raised one means (``None``: not this map's to say)."""

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """The base classes of the library's own exceptions."""
        ...

    def describe(self, exc: BaseException) -> str | None: ...

    def outcome(self, exc: BaseException, subject: str, *, sending: bool) -> Outcome | None: ...


class BrokerUnavailable(StoreUnavailable):
    """The broker could not be reached, or refused an operation: an outage, worth retrying."""


def _clip(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_REASON else flat[: _MAX_REASON - 1] + "…"


@attrs.frozen
class BrokerErrors:
    """The shared rules applied with ``maps``: what a broker adapter calls to describe, classify
    and translate the exceptions its client library raises."""

    maps: tuple[ErrorMap, ...]

    def errors(self) -> tuple[type[BaseException], ...]:
        """Everything a broker client raises for an outage or a refusal (not a bug of ours)."""
        return (*(e for m in self.maps for e in m.errors), OSError, TimeoutError)

    def describe(self, exc: BaseException) -> str:
        """A short, loggable description (type and message; never a body or a header)."""
        for errors in self.maps:
            own = errors.describe(exc)
            if own is not None:
                return _clip(own)
        text = str(exc).strip()
        name = type(exc).__name__
        return _clip(f"{name}: {text}" if text and text != name else name)

    def is_broker_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self.errors())

    def timeout_outcome(self, exc: BaseException, *, sending: bool) -> Outcome:
        """A publish that timed out: it may have reached the broker and be stored (a replay is
        de-duplicated), unless the client was still connecting."""
        if not sending:
            return Outcome.transient(
                f"broker unavailable: no connection in time ({self.describe(exc)})"
            )
        return Outcome.transient(
            f"no acknowledgement in time ({self.describe(exc)})", maybe_delivered=True
        )

    def publish_outcome(
        self, exc: BaseException, subject: str, *, sending: bool = True
    ) -> Outcome | None:
        """The outcome of a publish to ``subject`` that raised ``exc``; ``None`` when ``exc`` is
        not a broker error (a bug: let it propagate). ``sending``: the client was connected and
        the publish may have left (False while still connecting: nothing can have been stored)."""
        for errors in self.maps:
            outcome = errors.outcome(exc, subject, sending=sending)
            if outcome is not None:
                return outcome
        if isinstance(exc, TimeoutError):
            return self.timeout_outcome(exc, sending=sending)
        if isinstance(exc, self.errors()):
            return Outcome.transient(f"broker unavailable: {self.describe(exc)}")
        return None

    @contextlib.asynccontextmanager
    async def operation(
        self, what: str, why: Callable[[], str] = lambda: ""
    ) -> AsyncIterator[None]:
        """Translate a broker client's exception inside an operator or consumer operation into
        :class:`BrokerUnavailable` naming ``what`` (``"declaring stream platform-events"``) and what
        ``why()`` adds (the cause the client reported on the side, e.g. a TLS refusal)."""
        try:
            yield
        except BrokerUnavailable:
            raise
        except Exception as exc:
            if not self.is_broker_error(exc):
                raise
            raise BrokerUnavailable(f"{what} failed: {self.describe(exc)}{why()}") from exc


@functools.cache
def installed() -> BrokerErrors:
    """The shared rules with the error map of every broker whose client library is installed."""
    found: list[ErrorMap] = []
    for name in _MAP_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # that broker's client library is not installed
            continue
        found.append(module.ERROR_MAP)
    return BrokerErrors(tuple(found))


def describe(exc: BaseException) -> str:
    """:meth:`BrokerErrors.describe` with every installed broker's map."""
    return installed().describe(exc)


def is_broker_error(exc: BaseException) -> bool:
    """:meth:`BrokerErrors.is_broker_error` with every installed broker's map."""
    return installed().is_broker_error(exc)


def timeout_outcome(exc: BaseException, *, sending: bool) -> Outcome:
    """:meth:`BrokerErrors.timeout_outcome` with every installed broker's map."""
    return installed().timeout_outcome(exc, sending=sending)


def publish_outcome(exc: BaseException, subject: str, *, sending: bool = True) -> Outcome | None:
    """:meth:`BrokerErrors.publish_outcome` with every installed broker's map."""
    return installed().publish_outcome(exc, subject, sending=sending)


def operation(
    what: str, why: Callable[[], str] = lambda: ""
) -> contextlib.AbstractAsyncContextManager[None]:
    """:meth:`BrokerErrors.operation` with every installed broker's map."""
    return installed().operation(what, why)
