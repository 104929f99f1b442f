"""``PostgresStore``: the outbox store on PostgreSQL with psycopg 3 (ADR 0006).

Theory of operation
-------------------
One store object serves one queue table (``PostgresStore(pool, table=...)``, by default
``outbox_message``): any table built by :func:`~outbox_adapters.postgres.tables.queue_table`, whose
queue columns are defined once. Every statement is a template of :mod:`.statements` rendered for
the table, so the e-mail outbox, the webhook deliveries and the event outbox run the same SQL.

Every write is one short statement or one short transaction on a pooled connection; nothing holds a
transaction open across a send.

- ``claim_due`` locks due rows with ``FOR UPDATE SKIP LOCKED``, counts the attempt, stamps the lease
  and the claim token, and commits at once (ADR 0006, "Claim"). The lease is the crash-recovery
  bound *and* the exclusion between workers: a claimed row is not due again until it expires.
  Payloads are fetched as text and decoded here, row by row, by the core's rule
  (:func:`~outbox_core.payload.decode_payload`): a row that can't be decoded is handed out with
  its text, for the worker to fail, and never fails the claim of the rows around it. After a
  claim that came back full, the next one starts its scan at the oldest due time it returned,
  past the dead index entries of a burst (``outbox_core.scan_floor``; ADR 0006, amended): a row
  below that floor is taken by the next full scan, within 8 claims.
- ``mark_if_pending`` is a fenced compare-and-set (``status = 'pending' AND claim_token = :token``)
  on a connection of its own, committed by itself: one row's result never waits for, or rolls back
  with, another's. That is the per-row duplicate bound. The common mark (dispatched or skipped,
  nothing to patch) takes the lean ``MARK_SENT``; every other mark takes ``MARK``. Zero rows
  matched means a sibling owns the row now (or it was resolved): the mark is *stale*, counted per
  lane in ``outbox_stale_marks`` (by ``MARK``'s own statement, or by ``COUNT_STALE`` right after a
  lean mark) and reported as ``MarkResult.STALE``, never applied. The store does not log
  it: the worker that made the mark does, once. A retry's due time is ``now() + delay`` in
  database time, like the lease.
- A failed mark with ``Mark.disable_endpoint`` (a webhook receiver answered 410 Gone) runs the same
  ``MARK`` and, only when it applied, ``DISABLE_ENDPOINTS`` for its row, both in ONE transaction:
  the endpoint is disabled with the delivery's failure or not at all. The store built with
  ``endpoint_notice`` (the webhook lane's is the owner's e-mail) enqueues the notice of each
  endpoint it disabled into ``outbox_message`` in that same transaction, once per disable, as the
  endpoint-health sweep does (ADR 0018). Only a table with an
  ``endpoint_id`` column takes such a mark; any other store refuses it with
  :class:`~outbox_core.errors.ConfigurationError` before writing anything. A plain mark stays one
  statement.
- On a table built with ``queue_table(..., legacy_null_due=True)`` the claim also takes pending
  rows whose due time is NULL (:func:`.claim_forms.legacy_null_due`, derived from ``CLAIM``).
- On the webhook deliveries table (``endpoint_id``, ``event_id``, ``ordering_key``) the claim
  never takes a keyed delivery while an earlier one of its (endpoint, key) is pending
  (:func:`.delivery_order.delivery_key_order`, derived from ``CLAIM``; ADR 0018).
- On a table built with ``queue_table(..., ordered_by=KEY)`` the claim takes rows in id order and
  never a row while an earlier row of its key is pending outside this claim
  (:func:`.claim_forms.per_key_order`, derived from ``CLAIM``): the event relay's per-key order.
- The operator's port (``get``, ``list_failed``, ``lane_stats``, ``requeue_failed``,
  ``rewrite_payloads``) is in :mod:`.operator`, its SQL in :mod:`.operator_statements`.

Every method raises :class:`~outbox_core.errors.StoreUnavailable` for an outage (psycopg's
connection errors, mapped once in :mod:`.errors`); anything else propagates as it is.

The SQL lives in :mod:`.statements` and is looked up at call time, so the mutation matrix can swap
a statement for a mutant.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import Table

from outbox_adapters.postgres import claim_forms, delivery_order, statements
from outbox_adapters.postgres.enqueue import enqueue_async
from outbox_adapters.postgres.errors import mapped_outages
from outbox_adapters.postgres.marks import (
    check_disable,
    disable_params,
    mark_many_params,
    mark_params,
    scrub_groups,
    sent_many_params,
    sent_params,
)
from outbox_adapters.postgres.operator import OperatorQueries, stored_payload
from outbox_adapters.postgres.pools import open_pool
from outbox_adapters.postgres.runner import StatementRunner, all_rows, rows_returned
from outbox_adapters.postgres.tables import (
    check_queue_table,
    has_delivery_key_order,
    has_legacy_null_due,
    key_order_column,
    outbox_message,
)
from outbox_adapters.store_rules import (
    NO_SUCH_ROW,
    check_distinct_rows,
    coerce_row_id,
    count_mark,
)
from outbox_adapters.webhook_model import Endpoint, Notice, owner_message
from outbox_core.messages import ClaimedRow, ClaimToken, Mark, RowId, usable_trace_context
from outbox_core.operator import (
    StoreStats,
)
from outbox_core.ports import (
    ClaimRequest,
    MarkResult,
)
from outbox_core.scan_floor import ScanFloor

__all__ = ["NO_SUCH_ROW", "PostgresStore"]

_log = logging.getLogger(__name__)


class PostgresStore(OperatorQueries):
    """:class:`outbox_core.ports.OutboxStore` and :class:`~outbox_core.ports.OperatorStore` on a
    ``psycopg_pool.AsyncConnectionPool``, for one queue table.

    Build it on a pool you own (``PostgresStore(pool)``), or let :meth:`open` create one (then
    :meth:`close`, or ``async with``, closes it). ``table`` is the queue table it serves (default
    ``outbox_message``); a table not built by ``queue_table()`` is refused with
    :class:`~outbox_core.errors.ConfigurationError`. Size the pool for one claim plus the marks in
    flight: marks run on connections of their own. ``endpoint_notice`` (the webhook deliveries'
    store only): what a 410 disable enqueues for the endpoint's owner. Nothing is done in the
    constructor.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        table: Table = outbox_message,
        owns_pool: bool = False,
        endpoint_notice: Notice | None = None,
    ) -> None:
        self._table = check_queue_table(table)
        self._pool = pool
        #: The webhook deliveries' store: what tells an endpoint's owner that a 410 disabled it.
        self._endpoint_notice = endpoint_notice
        #: Per lane: where the next claim may start its scan (``outbox_core.scan_floor``).
        self._floors: dict[str, ScanFloor] = {}
        self._owns_pool = owns_pool
        self._runner = StatementRunner(pool)
        #: Counters since the store was built.
        self.stats = StoreStats()

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        table: Table = outbox_message,
        min_size: int = 1,
        max_size: int = 10,
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> Self:
        """Create and open a pool of autocommit connections, and a store that owns it.

        Autocommit makes a mark a single round trip (the statement is its own transaction);
        multi-statement work still runs inside explicit transactions.
        """
        check_queue_table(table)
        pool = await open_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            name="outbox-store",
            connect_kwargs=connect_kwargs,
            fail_fast=False,
        )
        return cls(pool, table=table, owns_pool=True)

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool (share it with ``PostgresLeaderLease`` rather than open another)."""
        return self._pool

    @property
    def table(self) -> Table:
        """The queue table this store serves."""
        return self._table

    async def close(self) -> None:
        """Close the pool if :meth:`open` created it; a pool you passed in stays yours (the
        connection the store kept goes back to it)."""
        await self._runner.close()
        if self._owns_pool:
            await self._pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _sql(self, template: str) -> str:
        """``template`` (a module attribute of :mod:`.statements`, read now) for this table."""
        return statements.render(template, self._table)

    # --- the worker's port ------------------------------------------------------------------------

    @mapped_outages
    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        claim = statements.CLAIM
        if has_legacy_null_due(self._table):
            claim = claim_forms.legacy_null_due(claim)
        if has_delivery_key_order(self._table):
            claim = delivery_order.delivery_key_order(claim)
        key = key_order_column(self._table)
        if key is not None:
            claim = claim_forms.per_key_order(claim, key)
        # The scan floor (outbox_core.scan_floor), on the claims that keep it (due-time order,
        # no NULL due times): not the legacy or per-key claims.
        floor = None
        if claim_forms.FLOOR_TEST in claim:
            floor = self._floors.setdefault(request.lane, ScanFloor())
        params = {
            "lane": request.lane,
            "limit": request.limit,
            "lease": request.lease,
            "token": request.token.value,
            "now": request.now,
            "floor": None if floor is None else floor.floor,
            "ahead_of": None if request.ahead_of is None else request.ahead_of.value,
        }
        records = await self._runner.run(self._sql(claim), params, all_rows)
        if floor is not None:
            floor.claimed(request.limit, [r[8] for r in records])
        token = request.token
        # Columns in CLAIM's order: id, lane, payload, attempts, claim_token, lease_expires_at,
        # created_at, trace_context, due_at. The token is the one just written (the statement
        # sets it).
        rows = [
            ClaimedRow(
                r[0],
                r[1],
                stored_payload(r[2]),
                r[3],
                token,
                r[5],
                r[6],
                usable_trace_context(r[7]),
            )
            for r in records
        ]
        self.stats.claimed_rows += len(rows)
        return rows

    @mapped_outages
    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        sent = sent_params(mark)
        if sent is not None:  # the hot path: the lean statement, one round trip
            matched = await self._runner.run(self._sql(statements.MARK_SENT), sent, rows_returned)
            if not matched:  # stale: count it (a second statement, only now)
                await self._runner.run(
                    self._sql(statements.COUNT_STALE), {"id": sent["id"]}, rows_returned
                )
            return count_mark(self.stats, applied=bool(matched))
        params = mark_params(mark)
        if not mark.disable_endpoint:  # one statement, one round trip
            matched = await self._runner.run(self._sql(statements.MARK), params, rows_returned)
            return count_mark(self.stats, applied=bool(matched))
        check_disable(self._table, [mark])
        async with self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(self._sql(statements.MARK), params)
            applied = bool(await cur.fetchall())
            if applied:
                await self._disable_endpoints(conn, [mark])
        return count_mark(self.stats, applied=applied)

    async def _disable_endpoints(self, conn: AsyncConnection[Any], marks: Sequence[Mark]) -> None:
        """In the caller's transaction: disable the endpoints of ``marks`` (all applied) and
        enqueue the owner's notice of each endpoint this disabled (``endpoint_notice``)."""
        params = disable_params(marks)
        if params is None:
            return
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(self._sql(statements.DISABLE_ENDPOINTS), params)
        for record in await cur.fetchall():
            endpoint = Endpoint.from_record(record)
            _log.warning("webhook endpoint %s disabled: %s", endpoint.id, endpoint.disabled_reason)
            message = owner_message(endpoint, self._endpoint_notice)
            if message is not None:
                await enqueue_async(conn, message)

    @mapped_outages
    async def mark_many(self, marks: Sequence[Mark]) -> list[MarkResult]:
        """Apply several marks in one statement and one commit; each row is fenced on its own.

        The results are in the order of ``marks``. Marks whose scrub keys differ go in separate
        statements (a worker's marks all share its lane's keys, so that is one statement). A
        group with a mark that disables its endpoint runs in a transaction with the disable.
        """
        ids = check_distinct_rows(marks)
        check_disable(self._table, marks)
        applied: set[int] = set()
        for group in scrub_groups(marks):
            lean = sent_many_params(group)
            if lean is not None:  # the common group: the lean statement (no endpoint to disable)
                applied.update(await self._mark_sent_many(lean))
                continue
            params = mark_many_params(group)
            if not any(m.disable_endpoint for m in group):
                records = await self._runner.run(self._sql(statements.MARK_MANY), params, all_rows)
                applied.update(r[0] for r in records)
                continue
            async with self._pool.connection() as conn, conn.transaction():
                cur = await conn.execute(self._sql(statements.MARK_MANY), params)
                done = {r[0] for r in await cur.fetchall()}
                await self._disable_endpoints(
                    conn, [m for m in group if coerce_row_id(m.row_id) in done]
                )
            applied.update(done)
        return [count_mark(self.stats, applied=row_id in applied) for row_id in ids]

    async def _mark_sent_many(self, params: dict[str, Any]) -> set[int]:
        """Run ``MARK_SENT_MANY``; count the marks that matched nothing (``COUNT_STALE_MANY``, only
        then). The ids that applied."""
        records = await self._runner.run(self._sql(statements.MARK_SENT_MANY), params, all_rows)
        done = {r[0] for r in records}
        stale = [row_id for row_id in params["ids"] if row_id not in done]
        if stale:
            await self._runner.run(
                self._sql(statements.COUNT_STALE_MANY), {"ids": stale}, rows_returned
            )
        return done

    @mapped_outages
    async def release(
        self, row_id: RowId, token: ClaimToken, *, now: datetime | None = None
    ) -> MarkResult:
        params = {"id": coerce_row_id(row_id), "token": token.value, "now": now}
        matched = await self._runner.run(self._sql(statements.RELEASE), params, rows_returned)
        return count_mark(self.stats, applied=bool(matched))
