"""What the CLI says about a row or a refusal: ``outbox get`` gives no next attempt to a terminal
row, the plain-http refusal names ``--allow-http``, and a drain counts the rows it left undone."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.support.cli import one_line_error, outbox

from outbox_adapters.cli.lane_run import unfinished
from outbox_adapters.cli.operator import shown_row
from outbox_adapters.lanes.webhook_workers import WebhookStats
from outbox_adapters.runtime.report import WorkerStats
from outbox_core.delivery import Status
from outbox_core.destinations import parse_destination
from outbox_core.errors import BlockedDestination
from outbox_core.operator import StoredRow
from outbox_core.scrub import ScrubRules

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def row(status: Status) -> StoredRow:
    return StoredRow(
        id=7, lane="email", status=status, payload={"to": "ann@example.org"}, attempts=3,
        next_attempt_at=NOW, claim_token=None, claimed_at=None, last_error=None,
        idempotency_key=None, created_at=NOW, updated_at=NOW, resolved_at=None, scrubbed_at=None,
    )  # fmt: skip


@pytest.mark.parametrize("status", [Status.DISPATCHED, Status.SKIPPED, Status.FAILED])
def test_get_shows_no_next_attempt_for_a_terminal_row(status: Status) -> None:
    lines = shown_row(row(status), ScrubRules())
    assert "next attempt at: -" in lines
    assert not any(NOW.isoformat() in line and "next attempt" in line for line in lines)


def test_get_shows_when_a_pending_row_is_tried_next() -> None:
    assert f"next attempt at: {NOW.isoformat()}" in shown_row(row(Status.PENDING), ScrubRules())


def test_the_plain_http_refusal_names_allow_http() -> None:
    with pytest.raises(BlockedDestination, match=r"https is required.*--allow-http"):
        parse_destination("http://hooks.example/in")
    result = outbox(
        "endpoints", "add", "--tenant", "acme", "--url", "http://hooks.example/in", "--event-type", "x",
        "--database-url", "postgresql://ops@127.0.0.1:1/outbox",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--allow-http" in one_line_error(result)


def test_a_drain_counts_the_rows_it_put_back_or_could_not_mark() -> None:
    assert unfinished(WorkerStats(claimed=3, dispatched=3)) == 0
    assert unfinished(WorkerStats(claimed=3, retried=2, mark_errors=1)) == 3
    parts = WebhookStats(WorkerStats(), WorkerStats(retried=1), WorkerStats(retried=4))
    assert unfinished(parts) == 5
    assert unfinished("not attrs stats") == 0


def test_an_error_of_outbox_s_own_options_is_redacted_too() -> None:
    result = outbox("--log-level", "postgresql://ops:Cnry8ZqX@db/app", "stats")
    assert result.exit_code == 2
    assert "Cnry8ZqX" not in result.output
    assert "postgresql://ops:***@db/app" in result.output
