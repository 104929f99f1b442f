# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Send caps: how many sends may be in flight to one recipient domain, and how fast a lane sends.

Theory of operation
-------------------
Two caps sit in front of a lane's sends, besides the webhook sender's per-origin cap (ADR 0016):

* **Per recipient domain** (e-mail): at most N sends in flight to one domain at a time, because a
  provider such as gmail.com throttles a sender that opens too much at once. The domain of a
  recipient is the part after the last ``@`` of its normalised envelope address
  (:func:`~outbox_core.mail.validate_address`: lower-case, IDNA A-labels), so ``Bob@Gmail.COM`` and
  ``ann@gmail.com`` share one domain. A message whose recipients are in several domains takes one
  slot of each of them, in sorted order (:func:`recipient_domains`): every send takes its slots in
  the same order, so two sends can never each hold a slot the other waits for (no deadlock).
* **Per lane, per second**: at most R sends start per second (a provider such as SES gives a send
  rate). :class:`TokenBucket` decides, for a send asking at ``now``, when it may start; the
  adapter waits until then. The core reads no clock: ``now`` and ``latest`` are arguments
  (monotonic seconds, as the worker reads them).

The bucket is the generic cell rate algorithm (GCRA): with ``rate`` sends a second and room for
``burst`` sends at once, the k-th send after an idle spell starts at once while ``k <= burst``,
and the sends beyond that are spaced ``1/rate`` apart. Whatever the requests, the starts it
grants satisfy ``start_j - start_i >= (j - i - burst + 1) / rate`` for the i-th and j-th grant,
so a window of ``t`` seconds holds at most ``burst + rate * t`` starts; with ``burst = 1`` (what
the lanes use) a half-open window of one second holds at most ``rate`` starts.

A grant is a reservation: a send told to wait keeps its place, so the sends waiting together are
spaced out instead of all retrying at the same instant. A send whose start would come after
``latest`` (its row's deadline) is refused and reserves nothing: the row's time would run out
before it could start, so the adapter reports a transient failure (nothing was sent) and the
row is retried on its schedule. Waiting for a slot (of a domain or of the rate) spends the row's
budget, like waiting for an SMTP session (ADR 0015).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import attrs

from outbox_core.errors import ConfigurationError
from outbox_core.mail.addresses import validate_address

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["Admission", "TokenBucket", "check_cap", "recipient_domains"]


def check_cap(option: str, value: object) -> None:
    """Refuse a cap that is not a whole number of at least 1, naming ``option``; ``None`` (no
    cap) passes."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{option}: a whole number of at least 1, or none; got {value!r}")


def recipient_domains(recipients: Iterable[str]) -> tuple[str, ...]:
    """The domains of ``recipients``' addresses, normalised, each once, in sorted order: the order
    in which a send takes its per-domain slots. Raises ``InvalidRecipient`` for a bad address."""
    return tuple(sorted({validate_address(address).rpartition("@")[2] for address in recipients}))


class Admission(NamedTuple):
    """The bucket's answer: when the send may start, and whether that slot was reserved for it."""

    #: The instant (monotonic seconds) the send may start; ``now`` when it need not wait.
    start: float
    #: False: ``start`` came after ``latest``, and nothing was reserved.
    admitted: bool

    def wait(self, now: float) -> float:
        """Seconds from ``now`` until the start (0 when it may start at once)."""
        return max(0.0, self.start - now)


def _finite(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of monotonic seconds, got {value!r}")


@attrs.define
class TokenBucket:
    """At most ``rate`` starts a second, ``burst`` at once (GCRA; see the module docstring).

    Its only state is the theoretical arrival time of the next send; :meth:`admit` is the one
    operation, and it reads no clock.
    """

    rate: int = attrs.field()
    burst: int = attrs.field(default=1)
    #: When the bucket is next empty of the burst's worth (monotonic seconds; None: never used).
    _arrival: float | None = attrs.field(default=None, init=False)

    @rate.validator
    def _check_rate(self, _attribute: object, value: int) -> None:
        check_cap("rate (sends per second)", value)

    @burst.validator
    def _check_burst(self, _attribute: object, value: int) -> None:
        check_cap("burst (sends at once)", value)

    def idle(self, now: float) -> bool:
        """True when a send asking at ``now`` or later would be answered as by a fresh bucket
        (every reservation made has passed): a holder of many buckets may drop this one."""
        _finite("now", now)
        return self._arrival is None or self._arrival <= now

    def admit(self, now: float, *, latest: float = math.inf) -> Admission:
        """May a send asking at ``now`` start, and when? Reserves the slot unless it would start
        after ``latest`` (then the bucket is unchanged and the answer is not admitted)."""
        _finite("now", now)
        interval = 1.0 / self.rate
        arrival = now if self._arrival is None else max(self._arrival, now)
        start = max(now, arrival - (self.burst - 1) * interval)
        if start > latest:
            return Admission(start, admitted=False)
        self._arrival = arrival + interval
        return Admission(start, admitted=True)
