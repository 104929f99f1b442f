# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""Where a claim may start its scan of the due rows: past the dead index entries of a burst.

Theory of operation
-------------------
A claim takes the oldest due rows of a lane, in due-time order, through the queue table's index
over pending rows. Every row that went through claim and mark leaves dead entries in that index
until VACUUM removes them; the ones written at insert time sort before every row due later, so
right after a burst each claim would start by walking all of them (docs/benchmarks.md, "Claim
after churn").

The claim returns its rows in due order, so when a claim comes back **full** (as many rows as it
asked for), every pending row due before the oldest row it returned was either returned or held
by a sibling's transaction. The next claim may then start its scan at that due time, the
*floor*, and skip whatever lies before it. What can lie below the floor and still be pending: a
row a sibling held (its claim ended without taking it), a row whose due time was stamped before
the floor but committed after (a producer transaction that began earlier, a row given back with
an older time). Such a row is not lost, only later: the floor is dropped, and the claim scans
from the start, after every claim that comes back short and at least every ``full_every``-th
claim.

:class:`ScanFloor` is that rule, one per lane and claimer; it reads no clock (the due times are
the database's, returned by the claim).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Final

import attrs

from outbox_core.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["FULL_SCAN_EVERY", "ScanFloor"]

#: At most this many claims in a row start at a floor; then one scans from the start.
FULL_SCAN_EVERY: Final = 8


def _at_least_one(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"ScanFloor.{attribute.name}: a positive count, got {value!r}")


@attrs.define
class ScanFloor:
    """The floor of a lane's next claim (``None``: scan from the start). See the module doc."""

    full_every: int = attrs.field(default=FULL_SCAN_EVERY, validator=_at_least_one)
    _floor: datetime | None = attrs.field(default=None, init=False)
    #: Claims since the last one that scanned from the start.
    _since_full: int = attrs.field(default=0, init=False)

    @property
    def floor(self) -> datetime | None:
        """The lowest due time the next claim looks at; ``None``: every due row."""
        return self._floor

    def claimed(self, asked: int, due_times: Sequence[datetime]) -> None:
        """Record the claim just made: it asked for ``asked`` rows and returned rows due at
        ``due_times`` (in any order)."""
        self._since_full += 1
        if len(due_times) < asked or self._since_full >= self.full_every:
            self._floor = None  # short, or time for a full scan: the next one starts at the start
            self._since_full = 0
        else:
            self._floor = min(due_times)
