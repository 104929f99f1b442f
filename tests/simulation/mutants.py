"""The mutants of the mutation matrix the simulator can express, and the seed that catches each.

The runtime mutants are the matrix's own patches (tests/mutations/matrix.py): the simulator runs
the very code they change. The SQL mutants change statements the simulator never runs; their
equivalents here change the same mechanism in the in-memory store the simulator does run (the
same mechanism as the matrix: one module attribute replaced), and ``test_mutants.py`` shows the
quick run's seeds catch each, recording the first seed that does in ``CAUGHT_BY``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

import attrs

from outbox_adapters.memory import store as memory_store
from outbox_core.delivery import Status
from outbox_core.messages import ClaimToken

__all__ = ["MUTANTS", "SimMutant", "apply"]


@attrs.frozen
class SimMutant:
    name: str
    #: The matrix mutant it stands for (tests/mutations/matrix.py).
    matrix: str
    mechanism: str
    patch: tuple[object, str, object]


def _fence_status_only(
    *, row_status: Status, row_token: ClaimToken | None, mark_token: ClaimToken
) -> bool:
    """The fence without its token test: ``AND claim_token = :token`` dropped."""
    del row_token, mark_token
    return row_status is Status.PENDING


def _no_lease(claimed_at: datetime, lease: timedelta) -> datetime:
    """The claim without its lease stamp: the row stays due (``next_attempt_at`` unchanged)."""
    del lease
    return claimed_at


def _runtime(name: str) -> tuple[object, str, object]:
    from tests.mutations.matrix import BY_NAME  # noqa: PLC0415 - the matrix imports every adapter

    return BY_NAME[name].patch


def _mutants() -> tuple[SimMutant, ...]:
    return (
        SimMutant(
            "fence-no-token", "mark-no-token-fence", "claim-token fence on marks",
            (memory_store, "fence_admits", _fence_status_only),
        ),
        SimMutant(
            "claim-no-lease-stamp", "claim-no-lease-stamp", "lease stamp in the claim",
            (memory_store, "lease_expires_at", _no_lease),
        ),
        SimMutant(
            "mark-attached", "mark-attached", "mark re-run after a cancellation",
            _runtime("mark-attached"),
        ),
        SimMutant(
            "leader-no-renewal-in-batch", "leader-no-renewal-in-batch",
            "leader term renewed while a batch runs", _runtime("leader-no-renewal-in-batch"),
        ),
        SimMutant(
            "consumer-dedup-key-without-kind", "consumer-dedup-key-without-kind",
            "per-recipient dedup key (event_id, kind)",
            _runtime("consumer-dedup-key-without-kind"),
        ),
        SimMutant(
            "window-cancel-drops-ended-rows", "window-cancel-drops-ended-rows",
            "a cancelled window records its ended rows", _runtime("window-cancel-drops-ended-rows"),
        ),
    )  # fmt: skip


MUTANTS: Final = {mutant.name: mutant for mutant in _mutants()}


def apply(name: str, setattr_: Callable[[object, str, object], None] = setattr) -> SimMutant:
    mutant = MUTANTS[name]
    target, attribute, value = mutant.patch
    if not hasattr(target, attribute):  # a renamed target would make the mutant a no-op
        raise LookupError(f"mutant {name} is stale: {target!r} has no attribute {attribute!r}")
    setattr_(target, attribute, value)
    return mutant
