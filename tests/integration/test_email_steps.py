"""The e-mail step chain end to end (ADR 0015): real PostgreSQL, real SMTP servers, the real worker.

What it promises: the SMTP dial lasts what ``outbox worker --budget dial=N`` says (the mailer takes
its windows from the same step budgets the lease is derived from).
"""

from __future__ import annotations

import contextlib
import secrets
import socket
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg.rows import dict_row

from outbox_adapters.cli import main
from outbox_adapters.postgres import schema

pytestmark = pytest.mark.integration

SENDER = "noreply@shop.example"
#: How late an attempt may end after its step's budget on a loaded two-core machine.
LATE = 1.0
#: The small budgets of these tests: only the step under test is long.
SMALL_STEPS = (
    "--budget", "suppression=0.2", "--budget", "branding=0.2", "--budget", "smtp_exchange=2",
    "--budget", "bounce_report=0.2", "--budget", "mark=1", "--budget", "lease_grace=5",
)  # fmt: skip


@pytest.fixture(scope="module")
def dsn(postgres_dsn: str) -> str:
    schema.apply(postgres_dsn)
    return postgres_dsn


@pytest.fixture
def lane() -> str:
    """A lane per test: tests share the database but never see each other's rows."""
    return f"steps-{secrets.token_hex(4)}"


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A port whose TCP handshake completes (the kernel's backlog) but that never says a word:
    an SMTP client connecting there waits for a greeting that never comes."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accepted: the connections sit in the backlog
        yield listener.getsockname()[1]


def outbox(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def enqueue(dsn: str, lane: str, to: str) -> int:
    result = outbox(
        "enqueue", "email", "--database-url", dsn, "--lane", lane, "--to", to,
        "--subject", "Hello", "--text", "Hello there",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return int(result.stdout.split()[-1])


def row(dsn: str, row_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        found = conn.execute("SELECT * FROM outbox_message WHERE id = %s", (row_id,)).fetchone()
    assert found is not None
    return found


@pytest.mark.parametrize("dial", [1.5, 3.0])
def test_the_worker_s_dial_budget_is_the_real_dial_timeout(dsn, lane, blackhole, dial):
    row_id = enqueue(dsn, lane, "ann@example.org")

    result = outbox(
        "worker", "--drain", "--database-url", dsn, "--lane", lane,
        "--smtp-url", f"smtp://127.0.0.1:{blackhole}", "--sender", SENDER,
        "--poll-interval", "0.1", "--no-listen", *SMALL_STEPS, "--budget", f"dial={dial}",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert f"dial {dial:g}s" in result.stdout  # the timing line prints the figure it enforces
    attempt = row(dsn, row_id)
    assert attempt["status"] == "pending"  # a dial that timed out is transient
    assert attempt["last_error"] == (f"SMTP failure at connect: timed out (dial, budget {dial:g}s)")
    # From the claim to the mark, on the database's clock: the dial's budget, and not much more.
    took = (attempt["updated_at"] - attempt["claimed_at"]).total_seconds()
    assert dial - 0.05 <= took < dial + LATE
