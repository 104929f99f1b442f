"""``PostgresStore``: the outbox store on PostgreSQL with psycopg 3 (catalogue A1).

Theory of operation
-------------------
Every write is one short statement or one short transaction on a pooled connection; nothing holds a
transaction open across a send.

- ``claim_due`` locks due rows with ``FOR UPDATE SKIP LOCKED``, counts the attempt, stamps the lease
  and the claim token, and commits at once (ADR-072 decision 1). The lease is the crash-recovery
  bound *and* the exclusion between workers: a claimed row is not due again until it expires.
  Payloads are fetched as text and decoded here, row by row, by the core's rule
  (:func:`~outbox_core.payload.decode_payload`): a row that can't be decoded is handed out with
  its text, for the worker to fail, and never fails the claim of the rows around it.
- ``mark_if_pending`` is a fenced compare-and-set (``status = 'pending' AND claim_token = :token``)
  on a connection of its own, committed by itself: one row's result never waits for, or rolls back
  with, another's. That is the per-row duplicate bound. Zero rows matched means a sibling owns the
  row now (or it was resolved): the mark is *stale*, logged, counted and reported, never applied.
- ``requeue_failed`` runs in one transaction: lock the candidates, let
  :func:`outbox_core.delivery.check_requeue` judge each, requeue the accepted ones with an audit row.
- ``rewrite_payloads`` (``outbox keys rotate``) walks the unsent rows in batches, one transaction
  each, and writes a new payload only where the stored one is still the one it read
  (compare-and-set), so a worker's mark that lands meanwhile is never overwritten.

The SQL lives in :mod:`.statements` and is looked up at call time, so the mutation matrix can swap
a statement for a mutant.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import attrs
from psycopg import AsyncConnection, AsyncCursor
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres import statements
from outbox_adapters.records import (
    NO_SUCH_ROW,
    ErrorGroup,
    FailedReport,
    StoredRow,
    StoreStats,
    check_distinct_rows,
    coerce_row_id,
    count_mark,
    count_marked,
    log_requeued,
    usable_row_ids,
)
from outbox_core.delivery import Status, check_requeue
from outbox_core.errors import ConfigurationError, InvalidPayload, RequeueRefused
from outbox_core.messages import ClaimedRow, ClaimToken, JSONObject, Mark, RowId
from outbox_core.payload import decode_payload
from outbox_core.ports import ClaimRequest, MarkResult, RequeueRequest, RequeueResult

__all__ = [
    "ErrorGroup",
    "FailedReport",
    "PayloadRewrites",
    "PostgresStore",
    "StoreStats",
    "StoredRow",
]

_log = logging.getLogger(__name__)
R = TypeVar("R")

#: Longest a store keeps one pooled connection between statements before handing it back.
KEEP_FOR: Final = 30.0
_IDLE: Final = TransactionStatus.IDLE


@attrs.frozen
class PayloadRewrites:
    """What :meth:`PostgresStore.rewrite_payloads` did."""

    #: Transactions run (one per batch).
    batches: int
    #: Unsent rows read.
    examined: int
    #: Rows whose new payload was written.
    rewritten: tuple[int, ...]
    #: Rows whose payload changed between the read and the write (a worker marked them): left as
    #: they were.
    changed: tuple[int, ...]


def _decoded(text: str) -> JSONObject | str:
    """The payload as a dict, or its text if it can't be decoded (ClaimedRow.payload)."""
    try:
        return decode_payload(text)
    except InvalidPayload:
        return text


def _stored(record: Mapping[str, Any]) -> StoredRow:
    # The payload comes as text and is decoded here, so one poison row (nested too deep, a
    # 5,000-digit number) can't make `outbox failed` or `outbox get` raise.
    return StoredRow(
        **{**record, "status": Status(record["status"]), "payload": _decoded(record["payload"])}
    )


class PostgresStore:
    """:class:`outbox_core.ports.OutboxStore` on a ``psycopg_pool.AsyncConnectionPool``.

    Build it on a pool you own (``PostgresStore(pool)``), or let :meth:`open` create one (then
    :meth:`close`, or ``async with``, closes it). Size the pool for one claim plus the marks in
    flight: marks run on connections of their own. Nothing is done in the constructor.
    """

    def __init__(self, pool: AsyncConnectionPool[Any], *, owns_pool: bool = False) -> None:
        self._pool = pool
        self._owns_pool = owns_pool
        # One connection kept between statements (see _give_back): a worker's claim and marks
        # run one after another, so in the strict mode they all reuse it.
        self._kept: AsyncConnection[Any] | None = None
        self._kept_conn: AsyncConnection[Any] | None = None
        self._kept_until = 0.0
        self._closing = False
        #: Counters since the store was built.
        self.stats = StoreStats()

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> Self:
        """Create and open a pool of autocommit connections, and a store that owns it.

        Autocommit makes a mark a single round trip (the statement is its own transaction);
        multi-statement work still runs inside explicit transactions.
        """
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, **(connect_kwargs or {})},
            open=False,
            name="outbox-store",
        )
        await pool.open(wait=True)
        return cls(pool, owns_pool=True)

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool (share it with ``PostgresLeaderLease`` rather than open another)."""
        return self._pool

    async def close(self) -> None:
        """Close the pool if :meth:`open` created it; a pool you passed in stays yours (the
        connection the store kept goes back to it)."""
        self._closing = True
        kept, self._kept = self._kept, None
        if kept is not None:
            await self._pool.putconn(kept)
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

    # --- the port ---------------------------------------------------------------------------------

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        params = {
            "lane": request.lane,
            "limit": request.limit,
            "lease": request.lease,
            "token": request.token.value,
            "now": request.now,
        }
        records = await self._run(statements.CLAIM, params, _all_rows)
        token = request.token
        # Columns in CLAIM's order: id, lane, payload, attempts, claim_token, lease_expires_at,
        # created_at. The token is the one just written (the statement sets it).
        rows = [ClaimedRow(r[0], r[1], _decoded(r[2]), r[3], token, r[5], r[6]) for r in records]
        self.stats.claimed_rows += len(rows)
        return rows

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        params = {
            "id": coerce_row_id(mark.row_id),
            "token": mark.token.value,
            "status": mark.status.value,
            "reason": mark.reason,
            "next_attempt_at": mark.next_attempt_at,
            "scrub_keys": sorted(mark.scrub_keys),
            "patch": _patch_json(mark),
            "now": None,
        }
        matched = await self._one_statement(statements.MARK, params)
        return count_marked(self.stats, _log, applied=bool(matched), mark=mark)

    async def mark_many(self, marks: Sequence[Mark]) -> list[MarkResult]:
        """Apply several marks in one statement and one commit; each row is fenced on its own.

        The results are in the order of ``marks``. Marks whose scrub keys differ go in separate
        statements (a worker's marks all share its lane's keys, so that is one statement).
        """
        ids = check_distinct_rows(marks)
        applied: set[int] = set()
        for group in _scrub_groups(marks):
            keys = next((sorted(m.scrub_keys) for m in group if m.scrub_keys), [])
            params = {
                "ids": [coerce_row_id(m.row_id) for m in group],
                "tokens": [m.token.value for m in group],
                "statuses": [m.status.value for m in group],
                "reasons": [m.reason for m in group],
                "next_attempt_ats": [m.next_attempt_at for m in group],
                "scrubs": [bool(m.scrub_keys) for m in group],
                "patches": [_patch_json(m) for m in group],
                "scrub_keys": keys,
                "now": None,
            }
            applied.update(await self._returned_ids(statements.MARK_MANY, params))
        return [
            count_marked(self.stats, _log, applied=row_id in applied, mark=m)
            for row_id, m in zip(ids, marks, strict=True)
        ]

    async def release(
        self, row_id: RowId, token: ClaimToken, *, now: datetime | None = None
    ) -> MarkResult:
        params = {"id": coerce_row_id(row_id), "token": token.value, "now": now}
        matched = await self._one_statement(statements.RELEASE, params)
        return self._fenced(matched, row_id, "release")

    async def requeue_failed(self, request: RequeueRequest) -> RequeueResult:
        refused: dict[RowId, str] = {}
        async with self._pool.connection() as conn, conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            if request.row_ids is not None:
                wanted = usable_row_ids(request.row_ids, refused)
                await cur.execute(statements.REQUEUE_CANDIDATES_BY_ID, {"ids": list(wanted)})
            else:
                wanted = {}
                await cur.execute(
                    statements.REQUEUE_CANDIDATES_BY_FILTER,
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
                await cur.execute(statements.REQUEUE, {"ids": accepted, "actor": request.actor})
                requeued = sorted(r["message_id"] for r in await cur.fetchall())
        log_requeued(_log, requeued, request.actor)
        return RequeueResult(requeued=tuple(wanted.get(i, i) for i in requeued), refused=refused)

    async def rewrite_payloads(
        self,
        rewrite: Callable[[int, str, JSONObject], JSONObject | None],
        *,
        lane: str | None = None,
        batch_size: int = 500,
    ) -> PayloadRewrites:
        """Give every pending and failed row's payload to ``rewrite(id, lane, payload)`` and store
        what it returns (``None``: leave the row as it is), ``batch_size`` rows per transaction.

        Each write is a compare-and-set on the payload as it was read: a row a worker marked in
        between is skipped and reported in :attr:`PayloadRewrites.changed`. ``rewrite`` runs
        inside the batch's transaction, so keep it quick (no I/O); whatever it raises rolls the
        current batch back and propagates (earlier batches stay committed).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(
                f"batch_size must be a positive number of rows, got {batch_size!r}"
            )
        after_id, batches, examined = 0, 0, 0
        rewritten: list[int] = []
        changed: list[int] = []
        while True:
            async with self._pool.connection() as conn, conn.transaction():
                cur = conn.cursor(row_factory=dict_row)
                params = {"after_id": after_id, "lane": lane, "limit": batch_size}
                await cur.execute(statements.REWRITE_CANDIDATES, params)
                records = await cur.fetchall()
                if not records:
                    break
                batches += 1
                examined += len(records)
                after_id = records[-1]["id"]
                decoded = [(r, _decoded(r["payload"])) for r in records]
                writes = [
                    (r["id"], r["digest"], new)
                    for r, payload in decoded
                    # a poison row (its payload can't be decoded) has nothing sealed to rotate
                    if not isinstance(payload, str)
                    and (new := rewrite(r["id"], r["lane"], payload)) is not None
                ]
                if writes:
                    await cur.execute(
                        statements.REWRITE_PAYLOADS,
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

    # --- operator reads ---------------------------------------------------------------------------

    async def get(self, row_id: RowId) -> StoredRow | None:
        """One row, or ``None``. The payload is raw: redact before showing it."""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(statements.GET_ROW, {"id": coerce_row_id(row_id)})
            record = await cur.fetchone()
        return None if record is None else _stored(record)

    async def list_failed(self, lane: str | None = None, limit: int = 100) -> FailedReport:
        """The ``limit`` newest failed rows, and all failed rows grouped by error."""
        async with self._pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(statements.FAILED_ROWS, {"lane": lane, "limit": limit})
            rows = tuple(_stored(r) for r in await cur.fetchall())
            await cur.execute(statements.FAILED_BY_ERROR, {"lane": lane})
            groups = tuple(ErrorGroup(**r) for r in await cur.fetchall())
        return FailedReport(rows=rows, by_error=groups)

    async def counts(self) -> dict[str, dict[Status, int]]:
        """Rows per lane and status, e.g. ``{"email": {Status.PENDING: 3, ...}}``."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(statements.COUNTS)
            records = await cur.fetchall()
        result: dict[str, dict[Status, int]] = {}
        for lane, status, rows in records:
            result.setdefault(lane, {})[Status(status)] = rows
        return result

    # --- helpers ----------------------------------------------------------------------------------

    async def _one_statement(self, query: str, params: Mapping[str, Any]) -> int:
        """Run one write as its own transaction on a connection of its own; rows matched."""
        return await self._run(query, params, _rows_matched)

    async def _returned_ids(self, query: str, params: Mapping[str, Any]) -> set[int]:
        """Run one write as its own transaction; the ids it returned."""
        return {r[0] for r in await self._run(query, params, _all_rows)}

    async def _run(
        self,
        query: str,
        params: Mapping[str, Any],
        read: Callable[[AsyncCursor[Any]], Awaitable[R]],
    ) -> R:
        """Run ``query`` as its own transaction (one round trip on an autocommit connection) on
        the kept connection or a pooled one, and ``read`` its cursor."""
        conn = await self._take()
        ok = False
        try:
            if conn.autocommit:
                result = await read(await conn.execute(query, params))
            else:
                async with conn.transaction():
                    result = await read(await conn.execute(query, params))
            ok = True
        finally:
            await self._give_back(conn, ok=ok)
        return result

    async def _take(self) -> AsyncConnection[Any]:
        """The kept connection if it is free, else one from the pool."""
        kept = self._kept
        if kept is not None:
            self._kept = None
            return kept
        conn: AsyncConnection[Any] = await self._pool.getconn()
        return conn

    async def _give_back(self, conn: AsyncConnection[Any], *, ok: bool) -> None:
        """Keep ``conn`` for the next statement, or return it to the pool.

        Only a connection whose statement succeeded and that is idle (no transaction left open)
        is kept, one at a time, and for at most :data:`KEEP_FOR` seconds: then it goes back to
        the pool, whose checks (broken, past its lifetime) apply to it again. Anything else goes
        straight back, and the pool discards it if it is broken.
        """
        now = time.monotonic()
        if self._kept is None and ok and not self._closing:
            if conn is not self._kept_conn:
                self._kept_conn, self._kept_until = conn, now + KEEP_FOR
            if now < self._kept_until and conn.pgconn.transaction_status == _IDLE:
                self._kept = conn
                return
            self._kept_conn = None
        await self._pool.putconn(conn)

    def _fenced(self, matched: int, row_id: RowId, what: str) -> MarkResult:
        return count_mark(self.stats, _log, applied=bool(matched), row_id=row_id, what=what)


def _patch_json(mark: Mark) -> str:
    """The mark's payload patch as JSON text (``{}``: nothing to write)."""
    patch = mark.payload_patch
    return "{}" if not patch else json.dumps(dict(patch), ensure_ascii=False, separators=(",", ":"))


def _scrub_groups(marks: Sequence[Mark]) -> list[list[Mark]]:
    """Marks grouped so that each group scrubs one set of keys (marks that scrub nothing join the
    first group)."""
    groups: dict[frozenset[str], list[Mark]] = {}
    for mark in marks:
        if mark.scrub_keys:
            groups.setdefault(mark.scrub_keys, []).append(mark)
    plain = [m for m in marks if not m.scrub_keys]
    if not groups:
        return [plain] if plain else []
    first = next(iter(groups))
    groups[first].extend(plain)
    return list(groups.values())


async def _rows_matched(cur: AsyncCursor[Any]) -> int:
    return cur.rowcount


async def _all_rows(cur: AsyncCursor[Any]) -> list[Any]:
    return await cur.fetchall()
