"""``outbox healthcheck`` against a real database and a live worker writing real heartbeats."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from tests.support.cli import one_line_error, outbox
from tests.support.postgres import query

from outbox_adapters.lanes.email import email_lane
from outbox_adapters.memory import RecordingHandler
from outbox_adapters.postgres import PostgresHeartbeat, PostgresLeaderLease, PostgresStore
from outbox_adapters.runtime import Worker

pytestmark = pytest.mark.integration


def health(dsn: str, lane: str, *more: str) -> tuple[int, dict[str, Any]]:
    result = outbox("healthcheck", "--database-url", dsn, "--lane", lane, "--json", *more)
    return result.exit_code, json.loads(result.stdout)


def verdicts(report: dict[str, Any]) -> dict[str, bool]:
    return {check["name"]: check["ok"] for check in report["checks"]}


async def test_a_live_leading_worker_is_healthy_and_a_stopped_or_silent_one_is_not(
    dsn: str, lane: str
) -> None:
    host = socket.gethostname()
    async with AsyncConnectionPool(
        dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False
    ) as pool:
        store = PostgresStore(pool)
        worker = Worker(
            store,
            RecordingHandler(),
            email_lane(lane=lane, poll_interval=0.05),
            leader=PostgresLeaderLease(pool),
            holder=f"{host}:worker-1",
            heartbeat=PostgresHeartbeat(pool),
        )
        running = asyncio.create_task(worker.run())
        try:
            for _ in range(100):
                if query(dsn, "SELECT 1 FROM outbox_heartbeat WHERE lane = %s", lane):
                    break
                await asyncio.sleep(0.05)
            code, report = health(dsn, lane)
            assert code == 0, report
            assert report["healthy"] is True
            assert verdicts(report) == {
                "database": True,
                "clock": True,
                "heartbeat": True,
                "leader": True,
            }
            assert f"led by {host}:worker-1" in report["checks"][3]["detail"]
        finally:
            worker.request_stop()
            await running
            await store.close()

    # Stopped cleanly: it stepped down (the lane has no leader) and wrote its stop beat, so it is
    # not counted live although that beat is young.
    code, report = health(dsn, lane)
    assert code == 1
    assert verdicts(report) == {
        "database": True,
        "clock": True,
        "heartbeat": False,
        "leader": False,
    }
    assert report["checks"][2]["detail"].startswith(
        f"no live worker of lane {lane} on {host}: the newest beat ({host}:worker-1) says it"
        " stopped cleanly"
    )
    assert health(dsn, lane, "--no-leader")[0] == 1

    # Beating again (a restart under the same holder) clears the stop.
    query(
        dsn,
        "UPDATE outbox_heartbeat SET stopped_at = NULL WHERE lane = %s RETURNING 1",
        lane,
    )
    assert health(dsn, lane, "--no-leader")[0] == 0

    # Silent past the bound it stated itself: the heartbeat check fails, naming the worker.
    query(
        dsn,
        "UPDATE outbox_heartbeat SET beat_at = now() - stale_after - interval '1 second'"
        " WHERE lane = %s RETURNING 1",
        lane,
    )
    code, report = health(dsn, lane, "--no-leader")
    assert code == 1
    heartbeat = report["checks"][2]
    assert not heartbeat["ok"]
    assert f"the newest beat ({host}:worker-1)" in heartbeat["detail"]

    code, report = health(dsn, lane, "--no-leader", "--host", "another-host")
    assert code == 1
    assert (
        report["checks"][2]["detail"] == f"no worker of lane {lane} on another-host has ever beaten"
    )


def test_an_unreachable_database_fails_the_first_check_and_bad_settings_exit_2(lane: str) -> None:
    result = outbox(
        "healthcheck", "--database-url", "postgresql://postgres@127.0.0.1:1/none", "--lane", lane
    )
    assert result.exit_code == 1
    assert result.stdout.startswith("FAIL database  unreachable:")
    assert len(result.stdout.strip().splitlines()) == 1
    refused = outbox(
        "healthcheck", "--database-url", "postgresql://x@127.0.0.1:1/y", "--lane", lane,
        "--max-skew", "soon",
    )  # fmt: skip
    assert refused.exit_code == 2
    assert "--max-skew" in one_line_error(refused)
