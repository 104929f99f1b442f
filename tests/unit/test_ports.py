from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from outbox_core.messages import ClaimToken
from outbox_core.ports import ClaimRequest, EnqueueResult, RequeueRequest, RequeueResult

ONE_LINE = "a requeue reason is one line of printable text"

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


def test_a_requeue_reason_is_one_line_of_printable_text_of_at_most_500_characters() -> None:
    assert RequeueRequest(actor="ops", reason="TICKET-7: SMTP was down").reason is not None
    assert RequeueRequest(actor="ops", reason="x" * 500).reason == "x" * 500
    assert RequeueRequest(actor="ops").reason is None
    for bad in ("", "   ", "two\nlines", 7):
        with pytest.raises(ValueError, match=ONE_LINE) as caught:
            RequeueRequest(actor="ops", reason=bad)  # type: ignore[arg-type]
        assert str(caught.value) == ONE_LINE
    with pytest.raises(ValueError, match="at most") as caught:
        RequeueRequest(actor="ops", reason="x" * 501)
    assert str(caught.value) == "a requeue reason is at most 500 characters, got 501"
