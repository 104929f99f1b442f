"""Which grouped mark statement a group of marks takes on PostgreSQL (``postgres.marks``): the lean
``MARK_SENT_MANY`` only when every mark is sent or skipped, with nothing to patch and one set of
scrub keys for all; any other group takes ``MARK_MANY``. Both are run by the store contract
(tests/contract/test_store_contract.py); this checks the choice between them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from outbox_adapters.postgres.marks import sent_many_params
from outbox_core.delivery import Status
from outbox_core.messages import ClaimedRow, ClaimToken, Mark

NOW = datetime(2026, 12, 7, tzinfo=UTC)
KEYS = frozenset({"setup_url", "pdf"})


def row(row_id: int) -> ClaimedRow:
    token = ClaimToken(f"token-{row_id:04d}")
    return ClaimedRow(row_id, "email", {"to": "a@example.org"}, 1, token, NOW, NOW)


def test_a_group_of_sent_and_skipped_marks_takes_the_lean_statement() -> None:
    group = [
        Mark.dispatched(row(1), scrub_keys=KEYS),
        Mark.skipped(row(2), "opted out", scrub_keys=KEYS),
    ]
    params = sent_many_params(group)
    assert params == {
        "ids": [1, 2],
        "tokens": ["token-0001", "token-0002"],
        "statuses": ["dispatched", "skipped"],
        "reasons": [None, "opted out"],
        "scrub_keys": '{"pdf","setup_url"}',
    }
    assert sent_many_params([Mark.dispatched(row(3), scrub_keys=frozenset())])["scrub_keys"] == "{}"  # type: ignore[index]


def test_any_other_group_takes_the_full_statement() -> None:
    sent = Mark.dispatched(row(1), scrub_keys=KEYS)
    assert sent_many_params([]) is None
    assert sent_many_params([sent, Mark.failed(row(2), "550 no such user")]) is None
    assert (
        sent_many_params([sent, Mark.retry(row(3), "451 busy", delay=timedelta(minutes=1))]) is None
    )
    # Another set of scrub keys, or none beside some: the scrub is per row in MARK_MANY.
    assert sent_many_params([sent, Mark.dispatched(row(4), scrub_keys=frozenset())]) is None
    patched = Mark(
        row(5).id, row(5).token, Status.DISPATCHED, scrub_keys=KEYS, payload_patch={"n": 1}
    )
    assert sent_many_params([sent, patched]) is None
