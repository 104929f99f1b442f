"""The operator's side of the PostgreSQL store (:class:`~outbox_core.ports.OperatorStore`): get a
row, list the failed ones, count rows and stale marks, requeue failed rows with an audit record,
rewrite unsent payloads (key rotation). Mixed into :class:`~outbox_adapters.postgres.PostgresStore`.

- ``requeue_failed`` runs in one transaction: lock the candidates, let
  :func:`outbox_core.delivery.check_requeue` judge each, requeue the accepted ones with an audit row.
- ``rewrite_payloads`` walks the unsent rows in batches, one transaction each, and writes a new
  payload only where the stored one is still the one it read (compare-and-set), so a worker's mark
  that lands meanwhile is never overwritten.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres import operator_statements as statements
from outbox_adapters.postgres.errors import mapped_outages
from outbox_adapters.store_rules import (
    NO_SUCH_ROW,
    check_batch_size,
    coerce_row_id,
    log_requeued,
    usable_row_ids,
)
from outbox_core.delivery import Status, check_requeue
from outbox_core.errors import InvalidPayload, RequeueRefused
from outbox_core.messages import JSONObject, RowId
from outbox_core.operator import ErrorGroup, FailedReport, LaneStats, PayloadRewrites, StoredRow
from outbox_core.payload import decode_payload
from outbox_core.ports import PayloadRewrite, RequeueRequest, RequeueResult

__all__ = ["OperatorQueries", "stored_payload"]

_log = logging.getLogger("outbox_adapters.postgres.store")


def stored_payload(text: str) -> JSONObject | str:
    """The payload as a dict, or its text if it can't be decoded (ClaimedRow.payload)."""
    try:
        return decode_payload(text)
    except InvalidPayload:
        return text


def _stored(record: Mapping[str, Any]) -> StoredRow:
    # The payload comes as text and is decoded here, so one poison row (nested too deep, a
    # 5,000-digit number) can't make `outbox failed` or `outbox get` raise.
    return StoredRow(
        **{
            **record,
            "status": Status(record["status"]),
            "payload": stored_payload(record["payload"]),
        }
    )


class OperatorQueries:
    """The operator's port on one queue table (needs ``_pool`` and ``_sql`` of the store)."""

    _pool: AsyncConnectionPool[Any]

    def _sql(self, template: str) -> str:
        raise NotImplementedError

    @mapped_outages
    async def requeue_failed(self, request: RequeueRequest) -> RequeueResult:
        refused: dict[RowId, str] = {}
        async with self._pool.connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            if request.row_ids is not None:
                wanted = usable_row_ids(request.row_ids, refused)
                await cur.execute(
                    self._sql(statements.REQUEUE_CANDIDATES_BY_ID), {"ids": list(wanted)}
                )
            else:
                wanted = {}
                await cur.execute(
                    self._sql(statements.REQUEUE_CANDIDATES_BY_FILTER),
                    {
                        "lane": request.lane,
                        "failed_since": request.failed_since,
                        "failed_before": request.failed_before,
                        "error_contains": request.error_contains,
                    },
                )
            candidates = await cur.fetchall()
            accepted: list[int] = []
            for candidate in candidates:
                try:
                    check_requeue(Status(candidate["status"]), scrubbed=candidate["scrubbed"])
                except RequeueRefused as refusal:
                    refused[wanted.get(candidate["id"], candidate["id"])] = str(refusal)
                else:
                    accepted.append(candidate["id"])
            found = {candidate["id"] for candidate in candidates}
            for number, given in wanted.items():
                if number not in found:
                    refused[given] = NO_SUCH_ROW
            requeued: list[int] = []
            if accepted:
                await cur.execute(
                    self._sql(statements.REQUEUE),
                    {"ids": accepted, "actor": request.actor, "reason": request.reason},
                )
                requeued = sorted(r["message_id"] for r in await cur.fetchall())
        log_requeued(_log, requeued, request.actor)
        return RequeueResult(requeued=tuple(wanted.get(i, i) for i in requeued), refused=refused)

    @mapped_outages
    async def rewrite_payloads(
        self, rewrite: PayloadRewrite, *, lane: str | None = None, batch_size: int = 500
    ) -> PayloadRewrites:
        """Give every pending and failed row's payload to ``rewrite(id, lane, payload)`` and store
        what it returns (``None``: leave the row as it is), ``batch_size`` rows per transaction.

        Each write is a compare-and-set on the payload as it was read: a row a worker marked in
        between is skipped and reported in :attr:`PayloadRewrites.changed`. ``rewrite`` runs
        inside the batch's transaction, so keep it quick (no I/O); whatever it raises rolls the
        current batch back and propagates (earlier batches stay committed).
        """
        check_batch_size(batch_size)
        after_id, batches, examined = 0, 0, 0
        rewritten: list[int] = []
        changed: list[int] = []
        while True:
            async with self._pool.connection() as conn, conn.transaction():
                cur = conn.cursor(row_factory=dict_row)
                params = {"after_id": after_id, "lane": lane, "limit": batch_size}
                await cur.execute(self._sql(statements.REWRITE_CANDIDATES), params)
                records = await cur.fetchall()
                if not records:
                    break
                batches += 1
                examined += len(records)
                after_id = records[-1]["id"]
                decoded = [(r, stored_payload(r["payload"])) for r in records]
                writes = [
                    (r["id"], r["digest"], new)
                    for r, payload in decoded
                    # a poison row (its payload can't be decoded) has nothing sealed to rotate
                    if not isinstance(payload, str)
                    and (new := rewrite(r["id"], r["lane"], payload)) is not None
                ]
                if writes:
                    await cur.execute(
                        self._sql(statements.REWRITE_PAYLOADS),
                        {
                            "ids": [w[0] for w in writes],
                            "digests": [w[1] for w in writes],
                            "payloads": [json.dumps(w[2]) for w in writes],
                        },
                    )
                    written = {r["id"] for r in await cur.fetchall()}
                    rewritten.extend(sorted(written))
                    changed.extend(w[0] for w in writes if w[0] not in written)
            if len(records) < batch_size:
                break
        return PayloadRewrites(
            batches=batches, examined=examined, rewritten=tuple(rewritten), changed=tuple(changed)
        )

    @mapped_outages
    async def get(self, row_id: RowId) -> StoredRow | None:
        """One row, or ``None``. The payload is raw: redact before showing it."""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(self._sql(statements.GET_ROW), {"id": coerce_row_id(row_id)})
            record = await cur.fetchone()
        return None if record is None else _stored(record)

    @mapped_outages
    async def list_failed(self, lane: str | None = None, limit: int = 100) -> FailedReport:
        """The ``limit`` newest failed rows, and all failed rows grouped by error."""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(self._sql(statements.FAILED_ROWS), {"lane": lane, "limit": limit})
            rows = tuple(_stored(r) for r in await cur.fetchall())
            await cur.execute(self._sql(statements.FAILED_BY_ERROR), {"lane": lane})
            groups = tuple(ErrorGroup(**r) for r in await cur.fetchall())
        return FailedReport(rows=rows, by_error=groups)

    @mapped_outages
    async def counts(self) -> dict[str, dict[Status, int]]:
        """Rows per lane and status, e.g. ``{"email": {Status.PENDING: 3, ...}}``."""
        return await self._counts()

    async def _counts(self) -> dict[str, dict[Status, int]]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(self._sql(statements.COUNTS))
            records = await cur.fetchall()
        result: dict[str, dict[Status, int]] = {}
        for lane, status, rows in records:
            result.setdefault(lane, {})[Status(status)] = rows
        return result

    @mapped_outages
    async def lane_stats(self) -> dict[str, LaneStats]:
        """Per lane: rows per status and stale marks (a lane with only stale marks is listed).
        Counts the whole history: an operator command, not something to poll."""
        counts = await self._counts()
        async with self._pool.connection() as conn:
            cur = await conn.execute(self._sql(statements.STALE_COUNTS))
            stale = {lane: int(n) for lane, n in await cur.fetchall()}
        return {
            lane: LaneStats(rows=counts.get(lane, {}), stale_marks=stale.get(lane, 0))
            for lane in sorted(counts.keys() | stale.keys())
        }
