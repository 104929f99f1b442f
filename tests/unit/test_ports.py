from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from outbox_core.messages import ClaimToken
from outbox_core.ports import ClaimRequest, EnqueueResult, RequeueRequest, RequeueResult

TOKEN = ClaimToken("a" * 32)


def test_claim_request_validates_limit_lease_and_now() -> None:
    request = ClaimRequest("email", 5, timedelta(seconds=360), TOKEN)
    assert request.now is None
    with pytest.raises(ValueError, match="limit"):
        ClaimRequest("email", 0, timedelta(seconds=1), TOKEN)
    with pytest.raises(ValueError, match="positive timedelta"):
        ClaimRequest("email", 1, timedelta(0), TOKEN)
    with pytest.raises(ValueError, match="aware"):
        ClaimRequest("email", 1, timedelta(1), TOKEN, now=datetime(2026, 1, 1))  # noqa: DTZ001


def test_requeue_request_defaults_select_nothing_by_filter() -> None:
    request = RequeueRequest(actor="ops@example.org", row_ids=(1, 2))
    assert request.failed_since is None
    assert RequeueResult(requeued=(1,)).refused == {}
    assert EnqueueResult(row_id=1, created=False).created is False
    with pytest.raises(ValueError, match="aware"):
        RequeueRequest(actor="x", failed_since=datetime(2026, 1, 1))  # noqa: DTZ001
    assert RequeueRequest(actor="x", failed_before=datetime(2026, 1, 1, tzinfo=UTC)).lane is None
