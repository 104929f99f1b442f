"""The contract suite's shared steps (tests/contract): claiming a row and recording a mark the same
way for every store, so each contract module states promises rather than plumbing.

``h`` is a harness of tests/contract/conftest.py (``h.store``, ``h.now``).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from outbox_core.messages import ClaimedRow, ClaimToken, Mark
from outbox_core.ports import ClaimRequest, MarkResult

LANE = "email"
LEASE = timedelta(seconds=60)
SECRETS = frozenset({"setup_url", "pdf", "invite_url"})

#: The two ways to record a mark: alone, or as a group of one through ``mark_many`` (its own
#: statement, fenced and scrubbing on the same rules).
VIA = pytest.mark.parametrize("via", ["mark_if_pending", "mark_many"])


def new_token() -> ClaimToken:
    return ClaimToken.from_entropy(secrets.token_bytes(16))


def claim(
    at: datetime | None,
    *,
    limit: int = 10,
    lane: str = LANE,
    token: ClaimToken | None = None,
) -> ClaimRequest:
    return ClaimRequest(lane=lane, limit=limit, lease=LEASE, token=token or new_token(), now=at)


async def claim_one(
    h: Any, row_id: int, *, lane: str = LANE, at: datetime | None = None
) -> ClaimedRow:
    """Claim the lane's due rows and return ``row_id``'s (the test made sure it is due)."""
    rows: Sequence[ClaimedRow] = await h.store.claim_due(claim(at or h.now, lane=lane))
    by_id = {row.id: row for row in rows}
    assert row_id in by_id, f"row {row_id} was not claimed; got {sorted(by_id)}"
    return by_id[row_id]


async def apply(h: Any, via: str, mark: Mark) -> MarkResult:
    """Record ``mark`` through ``mark_if_pending`` or as a group of one through ``mark_many``."""
    result: MarkResult
    if via == "mark_if_pending":
        result = await h.store.mark_if_pending(mark)
    else:
        (result,) = await h.store.mark_many([mark])
    return result
