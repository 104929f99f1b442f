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
- :meth:`~WebhookRepository.delivery_target` reads what one attempt needs in one query, and
  :meth:`~WebhookRepository.delivery_targets` what several need (:mod:`.targets`).

Endpoints, secrets, health and the report are in :mod:`.endpoints`. Every method maps outages to
:class:`~outbox_core.errors.StoreUnavailable`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres import statements as queue_statements
from outbox_adapters.postgres.errors import mapped_outages
from outbox_adapters.postgres.marks import mark_many_params
from outbox_adapters.postgres.webhooks import statements
from outbox_adapters.postgres.webhooks.endpoints import EndpointOps, _all, _one
from outbox_adapters.postgres.webhooks.tables import DELIVERY_LANE, outbox_webhook
from outbox_adapters.postgres.webhooks.targets import TargetReads
from outbox_adapters.store_rules import check_distinct_rows, coerce_row_id
from outbox_adapters.webhook_model import (
    Endpoint,
    FanOut,
    Replay,
    check_replay_target,
    check_tenant,
    event_of,
    new_msg_id,
    ordering_key_of,
    refused_disabled,
    refused_no_endpoint,
    refused_no_event,
    tenant_of,
)
from outbox_core.messages import (
    ClaimedRow,
    ClaimToken,
    JSONObject,
    Mark,
    RowId,
    usable_trace_context,
)
from outbox_core.payload import decode_payload
from outbox_core.ports import Encryptor

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


class WebhookRepository(EndpointOps, TargetReads):
    """The webhook model on a ``psycopg_pool.AsyncConnectionPool`` (autocommit connections, as
    ``PostgresStore.open`` and the CLI make, or not: every write runs in an explicit transaction)."""

    def __init__(
        self, pool: AsyncConnectionPool[Any], *, encryptor: Encryptor | None = None
    ) -> None:
        self._pool = pool
        #: With keys, secrets are stored sealed and opened only in ``delivery_target`` (ADR 0030).
        self._encryptor = encryptor

    # --- fan-out ---------------------------------------------------------------------------------

    async def fan_out(
        self, row: ClaimedRow, *, birth_lease: timedelta, birth_token: ClaimToken
    ) -> FanOut:
        """Fan one claimed webhook outbox row out: :meth:`fan_out_many` of one row."""
        (fanned,) = await self.fan_out_many([row], birth_lease=birth_lease, birth_token=birth_token)
        return fanned

    @mapped_outages
    async def fan_out_many(
        self, rows: Sequence[ClaimedRow], *, birth_lease: timedelta, birth_token: ClaimToken
    ) -> tuple[FanOut, ...]:
        """Fan several claimed webhook outbox rows out in ONE transaction; one :class:`FanOut`
        per row, in the order of ``rows`` (see the module docstring).

        Each row is fenced on its own, by its own claim token: a row whose fence refuses gets
        ``FanOut(marked=False)`` and nothing of its own is written (its stale mark is counted);
        the others fan out as if it were not there. Four statements whatever the batch's size:
        the grouped fenced mark (the generic ``MARK_MANY``), the events, the deliveries, and the
        commit. Raises :class:`InvalidMessage` (nothing written) if a row's payload isn't an
        event."""
        events = [event_of(row) for row in rows]
        keys = {row.id: ordering_key_of(row) for row in rows}
        tenants = {row.id: tenant_of(row) for row in rows}
        marks = [Mark.dispatched(row, scrub_keys=frozenset()) for row in rows]
        check_distinct_rows(marks)
        async with self._pool.connection() as conn, conn.transaction():
            drained = await self._mark_drained(conn, marks)
            fenced = _fenced(rows, events, drained)
            if not fenced:
                return tuple(FanOut(marked=False) for _row in rows)
            made = await self._insert_events(conn, fenced, keys, tenants)
            _ids, born = await self._born_deliveries(
                conn,
                events=[
                    (made[row.id][0], kind, row.trace_context, keys[row.id], tenants[row.id])
                    for row, kind, _ in fenced
                ],
                endpoint_id=None,
                birth_lease=birth_lease,
                birth_token=birth_token,
            )
        return tuple(
            FanOut(
                marked=True,
                event_id=made[row.id][0],
                msg_id=made[row.id][1],
                deliveries=born.get(made[row.id][0], ()),
            )
            if row.id in made
            else FanOut(marked=False)
            for row in rows
        )

    async def _mark_drained(
        self, conn: AsyncConnection[Any], marks: Sequence[Mark]
    ) -> frozenset[int]:
        """The outbox rows' dispatched marks: the generic grouped fenced ``MARK_MANY`` (each row
        fenced by its own token; the refused ones counted as stale marks), in the caller's
        transaction. Returns the ids of the rows whose mark applied."""
        sql = queue_statements.render(queue_statements.MARK_MANY, outbox_webhook)
        cur = await conn.execute(sql, mark_many_params(marks))
        return frozenset(r[0] for r in await cur.fetchall())

    async def _insert_events(
        self,
        conn: AsyncConnection[Any],
        fenced: Sequence[_Fenced],
        keys: dict[RowId, str | None],
        tenants: dict[RowId, str],
    ) -> dict[RowId, tuple[int, str]]:
        """One event per fenced row, each with a fresh ``msg_id``: outbox row id -> (event id,
        msg_id)."""
        msg_ids = {row.id: new_msg_id() for row, _type, _data in fenced}
        params = {
            "msg_ids": list(msg_ids.values()),
            "event_types": [event_type for _row, event_type, _data in fenced],
            "datas": [
                json.dumps(dict(data), ensure_ascii=False, separators=(",", ":"))
                for _row, _type, data in fenced
            ],
            "source_outbox_ids": [coerce_row_id(row.id) for row, _type, _data in fenced],
            "ordering_keys": [keys[row.id] for row, _type, _data in fenced],
            "tenants": [tenants[row.id] for row, _type, _data in fenced],
        }
        records = await _all(conn, statements.INSERT_EVENTS, params)
        by_source = {coerce_row_id(row.id): row.id for row, _type, _data in fenced}
        made: dict[RowId, tuple[int, str]] = {}
        for record in records:
            row_id = by_source[record["source_outbox_id"]]
            made[row_id] = (int(record["id"]), msg_ids[row_id])
        return made

    async def _born_deliveries(
        self,
        conn: AsyncConnection[Any],
        *,
        events: Sequence[tuple[int, str, str | None, str | None, str]],
        endpoint_id: int | None,
        birth_lease: timedelta,
        birth_token: ClaimToken | None,
    ) -> tuple[tuple[int, ...], dict[int, tuple[ClaimedRow, ...]]]:
        """The deliveries of ``events`` (event id, event type, trace context, ordering key,
        tenant) to their tenants' endpoints: their ids, and those born leased to this process by event id (none without a token; a keyed
        delivery behind an earlier one of its (endpoint, key) is born waiting, not leased)."""
        records = await _all(
            conn,
            statements.BORN_DELIVERIES,
            {
                "lane": DELIVERY_LANE,
                "event_ids": [event[0] for event in events],
                "event_types": [event[1] for event in events],
                "trace_contexts": [event[2] for event in events],
                "ordering_keys": [event[3] for event in events],
                "tenants": [event[4] for event in events],
                "endpoint_id": endpoint_id,
                "birth_lease": birth_lease,
                "token": None if birth_token is None else birth_token.value,
            },
        )
        ids = tuple(int(r["id"]) for r in records)
        if birth_token is None:
            # No token: due rows for the retry lane, none of them this process's to attempt.
            return ids, {}
        leased = [record for record in records if record["born"]]
        born: dict[int, list[ClaimedRow]] = {}
        for record, row in zip(leased, _claimed(leased, birth_token), strict=True):
            born.setdefault(int(record["event_id"]), []).append(row)
        return ids, {event_id: tuple(rows) for event_id, rows in born.items()}

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
                await self._check_replay_target(
                    conn, source["event_type"], source["tenant"], endpoint_id
                )
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
                    ids, born = await self._born_deliveries(
                        conn,
                        events=[
                            (
                                clone["id"],
                                clone["event_type"],
                                None,
                                clone["ordering_key"],
                                clone["tenant"],
                            )
                        ],
                        endpoint_id=endpoint_id,
                        birth_lease=birth_lease,
                        birth_token=birth_token,
                    )
                    deliveries = born.get(clone["id"], ())
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
        self, conn: AsyncConnection[Any], event_type: str, tenant: str, endpoint_id: int | None
    ) -> None:
        query, params = (
            (statements.ENDPOINTS, {"tenant": tenant})
            if endpoint_id is None
            else (statements.ENDPOINT, {"id": endpoint_id})
        )
        endpoints = [Endpoint.from_record(r) for r in await _all(conn, query, params)]
        check_replay_target(event_type, tenant, endpoint_id, endpoints)

    @mapped_outages
    async def replay_failed(  # noqa: PLR0913 - keyword-only filters of one replay
        self,
        *,
        since: datetime,
        before: datetime | None = None,
        endpoint_id: int | None = None,
        birth_lease: timedelta,
        birth_token: ClaimToken | None,
        tenant: str | None = None,
    ) -> list[Replay]:
        """Replay every delivery that failed in ``[since, before)`` (to ``endpoint_id`` only, when
        given; to ``tenant``'s endpoints only, when given), one replay per (event, endpoint). Deliveries to a disabled endpoint are left alone
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
                    "tenant": None if tenant is None else check_tenant(tenant),
                },
            )
        return [
            await self.replay(
                event, endpoint_id=endpoint, birth_lease=birth_lease, birth_token=birth_token
            )
            for event, endpoint in dict.fromkeys((p["event_id"], p["endpoint_id"]) for p in pairs)
        ]


#: A row whose fenced mark applied, with its event's type and data.
_Fenced = tuple[ClaimedRow, str, JSONObject]


def _fenced(
    rows: Sequence[ClaimedRow],
    events: Sequence[tuple[str, JSONObject]],
    drained: frozenset[int],
) -> list[_Fenced]:
    """The per-row fence inside the batch: only the rows whose own mark applied get an event."""
    return [
        (row, event_type, data)
        for row, (event_type, data) in zip(rows, events, strict=True)
        if coerce_row_id(row.id) in drained
    ]
