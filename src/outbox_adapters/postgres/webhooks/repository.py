"""``WebhookRepository``: the webhook model on PostgreSQL (ADR 0017).

Theory of operation
-------------------
The webhook outbox and the deliveries are queue tables served by the one ``PostgresStore`` (claim,
fenced marks, release, operator port); this repository does only what is webhook-specific:

- :meth:`~WebhookRepository.fan_out` turns one claimed webhook outbox row into an event and its
  deliveries in ONE transaction: the outbox row's dispatched mark, fenced by the row's claim token
  (the generic ``MARK`` template), then the event, then one *born-leased* delivery per enabled
  endpoint subscribed to the event type. Born leased: already claimed by the in-process first
  attempt (``attempts = 1``, the birth token, due at ``now + birth lease``), so the retry worker's
  claim can't take it while that attempt may still run. A crash anywhere before the commit leaves
  nothing (the row is still pending under its lease, and the next claim fans it out once); after
  it, everything. A refused fence writes nothing but the stale-mark counter: another claim owns
  the row. The drainer's handler owns the mark (``Outcome.recorded_by_handler``): the runtime
  writes no second one.
- :meth:`~WebhookRepository.replay` clones an event (committed first: an interrupted replay is a
  clone with ``replay_completed_at`` NULL, visible and re-runnable), then creates the clone's
  born-leased deliveries and completes it in one transaction. Re-running completes the open clone;
  the unique (event, endpoint) index makes a second delivery impossible.
- :meth:`~WebhookRepository.delivery_target` reads what one attempt needs in one query.

Endpoints, secrets, health and the report are in :mod:`.endpoints`. Every method maps outages to
:class:`~outbox_core.errors.StoreUnavailable`.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres import statements as queue_statements
from outbox_adapters.postgres.errors import mapped_outages
from outbox_adapters.postgres.marks import mark_params
from outbox_adapters.postgres.webhooks import statements
from outbox_adapters.postgres.webhooks.endpoints import EndpointOps, _all, _one
from outbox_adapters.postgres.webhooks.tables import DELIVERY_LANE, outbox_webhook
from outbox_adapters.webhook_model import (
    DeliveryTarget,
    Endpoint,
    FanOut,
    Replay,
    check_replay_target,
    event_body,
    event_of,
    new_msg_id,
    refused_disabled,
    refused_no_endpoint,
    refused_no_event,
)
from outbox_core.messages import ClaimedRow, ClaimToken, JSONObject, Mark, usable_trace_context
from outbox_core.payload import decode_payload
from outbox_core.signing import WebhookSecret

__all__ = ["WebhookRepository", "event_of"]


def _claimed(records: list[dict[str, Any]], token: ClaimToken) -> tuple[ClaimedRow, ...]:
    return tuple(
        ClaimedRow(
            id=r["id"],
            lane=r["lane"],
            payload=decode_payload(r["payload"]),
            attempts=r["attempts"],
            token=token,
            lease_expires_at=r["lease_expires_at"],
            created_at=r["created_at"],
            trace_context=usable_trace_context(r["trace_context"]),
        )
        for r in records
    )


class WebhookRepository(EndpointOps):
    """The webhook model on a ``psycopg_pool.AsyncConnectionPool`` (autocommit connections, as
    ``PostgresStore.open`` and the CLI make, or not: every write runs in an explicit transaction)."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    # --- fan-out ---------------------------------------------------------------------------------

    @mapped_outages
    async def fan_out(
        self, row: ClaimedRow, *, birth_lease: timedelta, birth_token: ClaimToken
    ) -> FanOut:
        """Fan one claimed webhook outbox row out, in ONE transaction (see the module docstring).
        Raises :class:`InvalidMessage` (nothing written) for a row whose payload isn't an event."""
        event_type, data = event_of(row)
        async with self._pool.connection() as conn, conn.transaction():
            if not await self._mark_drained(conn, row):
                return FanOut(marked=False)
            event_id, msg_id = await self._insert_event(conn, row, event_type, data)
            _ids, deliveries = await self._born_deliveries(
                conn,
                event_id=event_id,
                event_type=event_type,
                endpoint_id=None,
                birth_lease=birth_lease,
                birth_token=birth_token,
                trace_context=row.trace_context,
            )
        return FanOut(marked=True, event_id=event_id, msg_id=msg_id, deliveries=deliveries)

    async def _mark_drained(self, conn: AsyncConnection[Any], row: ClaimedRow) -> bool:
        """The outbox row's dispatched mark: the generic fenced ``MARK``, in the caller's
        transaction. False: the fence refused (counted as a stale mark)."""
        mark = Mark.dispatched(row, scrub_keys=frozenset())
        sql = queue_statements.render(queue_statements.MARK, outbox_webhook)
        cur = await conn.execute(sql, mark_params(mark))
        return bool(await cur.fetchall())

    async def _insert_event(
        self, conn: AsyncConnection[Any], row: ClaimedRow, event_type: str, data: JSONObject
    ) -> tuple[int, str]:
        msg_id = new_msg_id()
        params = {
            "msg_id": msg_id,
            "event_type": event_type,
            "data": json.dumps(dict(data), ensure_ascii=False, separators=(",", ":")),
            "source_outbox_id": row.id,
        }
        record = await _one(conn, statements.INSERT_EVENT, params)
        assert record is not None  # noqa: S101 - INSERT ... RETURNING returns its row
        return int(record["id"]), msg_id

    async def _born_deliveries(  # noqa: PLR0913 - one per column the statement writes
        self,
        conn: AsyncConnection[Any],
        *,
        event_id: int,
        event_type: str,
        endpoint_id: int | None,
        birth_lease: timedelta,
        birth_token: ClaimToken | None,
        trace_context: str | None = None,
    ) -> tuple[tuple[int, ...], tuple[ClaimedRow, ...]]:
        """The deliveries' ids, and those born leased to this process (none without a token)."""
        records = await _all(
            conn,
            statements.BORN_DELIVERIES,
            {
                "lane": DELIVERY_LANE,
                "event_id": event_id,
                "event_type": event_type,
                "endpoint_id": endpoint_id,
                "birth_lease": birth_lease,
                "token": None if birth_token is None else birth_token.value,
                "trace_context": trace_context,
            },
        )
        ids = tuple(int(r["id"]) for r in records)
        # No token: due rows for the retry lane, none of them this process's to attempt.
        return ids, () if birth_token is None else _claimed(records, birth_token)

    # --- one attempt's target ----------------------------------------------------------------------

    @mapped_outages
    async def delivery_target(
        self, delivery_id: int, *, now: datetime | None = None
    ) -> DeliveryTarget | None:
        """What one attempt of ``delivery_id`` needs (``None``: no such delivery). ``secrets``
        holds every secret unexpired at ``now`` (default: the database's now)."""
        async with self._pool.connection() as conn:
            record = await _one(conn, statements.DELIVERY_TARGET, {"id": delivery_id, "now": now})
        if record is None:
            return None
        return DeliveryTarget(
            delivery_id=record["id"],
            event_id=record["event_id"],
            endpoint_id=record["endpoint_id"],
            url=record["url"],
            enabled=record["enabled"],
            secrets=tuple(WebhookSecret.parse(s) for s in record["secrets"]),
            msg_id=record["msg_id"],
            event_type=record["event_type"],
            body=event_body(record["event_type"], record["created_at"], json.loads(record["data"])),
        )

    # --- replay ------------------------------------------------------------------------------------

    @mapped_outages
    async def replay(
        self,
        event_id: int,
        *,
        endpoint_id: int | None = None,
        birth_lease: timedelta,
        birth_token: ClaimToken | None,
    ) -> Replay:
        """Replay ``event_id`` to ``endpoint_id`` (or to every enabled endpoint subscribed to its
        type): the clone commits first, then its born-leased deliveries and its completion in one
        transaction. With ``birth_token=None`` (no first attempt in this process: the CLI) the
        deliveries are due rows for the retry lane instead, no attempt counted. Re-running a replay that was interrupted in between completes its open
        clone (same scope) instead of making a second one. Refused (:class:`WebhookRefused`,
        nothing written) for an unknown event, an unknown or disabled endpoint, an endpoint not
        subscribed to the type, or no endpoint to send to."""
        scope = json.dumps({"endpoint_id": endpoint_id})
        async with self._pool.connection() as conn:
            async with conn.transaction():
                source = await _one(conn, statements.EVENT, {"id": event_id})
                if source is None:
                    raise refused_no_event(event_id)
                await self._check_replay_target(conn, source["event_type"], endpoint_id)
                clone = await _one(
                    conn, statements.OPEN_REPLAY, {"replay_of": event_id, "scope": scope}
                )
                resumed = clone is not None
                if clone is None:
                    clone = await _one(
                        conn,
                        statements.CLONE_EVENT,
                        {"msg_id": new_msg_id(), "replay_of": event_id, "scope": scope},
                    )
                assert clone is not None  # noqa: S101 - the source row is locked
            async with conn.transaction():
                current = await _one(conn, statements.EVENT, {"id": clone["id"]})
                deliveries: tuple[ClaimedRow, ...] = ()
                ids: tuple[int, ...] = ()
                if current is not None and current["replay_completed_at"] is None:
                    ids, deliveries = await self._born_deliveries(
                        conn,
                        event_id=clone["id"],
                        event_type=clone["event_type"],
                        endpoint_id=endpoint_id,
                        birth_lease=birth_lease,
                        birth_token=birth_token,
                    )
                    await conn.execute(statements.COMPLETE_REPLAY, {"id": clone["id"]})
        return Replay(
            event_id=clone["id"],
            replay_of=event_id,
            msg_id=clone["msg_id"],
            endpoint_id=endpoint_id,
            delivery_ids=ids,
            deliveries=deliveries,
            resumed=resumed,
        )

    async def _check_replay_target(
        self, conn: AsyncConnection[Any], event_type: str, endpoint_id: int | None
    ) -> None:
        query, params = (
            (statements.ENDPOINTS, {})
            if endpoint_id is None
            else (statements.ENDPOINT, {"id": endpoint_id})
        )
        endpoints = [Endpoint.from_record(r) for r in await _all(conn, query, params)]
        check_replay_target(event_type, endpoint_id, endpoints)

    @mapped_outages
    async def replay_failed(
        self,
        *,
        since: datetime,
        before: datetime | None = None,
        endpoint_id: int | None = None,
        birth_lease: timedelta,
        birth_token: ClaimToken | None,
    ) -> list[Replay]:
        """Replay every delivery that failed in ``[since, before)`` (to ``endpoint_id`` only, when
        given), one replay per (event, endpoint). Deliveries to a disabled endpoint are left alone
        (enable it first: that also reports what it missed); a failure already replayed by a
        completed replay is not replayed again, and an interrupted one is completed."""
        if endpoint_id is not None:
            async with self._pool.connection() as conn:
                endpoint = await _one(conn, statements.ENDPOINT, {"id": endpoint_id})
            if endpoint is None:
                raise refused_no_endpoint(endpoint_id)
            if not endpoint["enabled"]:
                raise refused_disabled(endpoint_id, None, replay_failed=True)
        async with self._pool.connection() as conn:
            pairs = await _all(
                conn,
                statements.FAILED_TO_REPLAY,
                {
                    "lane": DELIVERY_LANE,
                    "since": since,
                    "before": before,
                    "endpoint_id": endpoint_id,
                },
            )
        return [
            await self.replay(
                event, endpoint_id=endpoint, birth_lease=birth_lease, birth_token=birth_token
            )
            for event, endpoint in dict.fromkeys((p["event_id"], p["endpoint_id"]) for p in pairs)
        ]
