"""``MemoryStore``: the outbox store in memory, with PostgresStore's semantics (both pass tests/contract).

Theory of operation
-------------------
Each operation does what the PostgreSQL statement of the same name does, and the contract suite
(``tests/contract``) runs the same cases against both:

- ``enqueue`` refuses the payloads PostgreSQL's enqueue refuses (the one rule,
  :func:`outbox_adapters.store_rules.payload_json`), stores what JSON keeps, and honours the per-lane
  idempotency key;
- ``claim_due`` takes the due rows of a lane in (due time, id) order, counts the attempt, stamps the
  lease and the token, and decodes each payload by the core's rule
  (:func:`~outbox_core.payload.decode_payload`): a row that can't be decoded comes back with its
  stored text instead of failing the claim; ``mark_if_pending`` and ``release`` are fenced
  compare-and-sets with :func:`outbox_core.lease.fence_admits`, the scrub in the same step; a retry
  is due ``its delay`` after the mark by this store's clock (PostgreSQL: ``now() + delay``); a
  stale mark is counted for its row's lane (``lane_stats``) and not logged;
  ``requeue_failed`` judges each row with :func:`outbox_core.delivery.check_requeue` and writes an
  audit record. The operator's reads live in :mod:`.operator`.
- ``available = False`` simulates an outage: every operation raises
  :class:`~outbox_core.errors.StoreUnavailable` and touches nothing.

Payloads are kept as JSON text, as PostgreSQL keeps them, so :meth:`MemoryStore.insert_raw` can
hold what a producer that goes around enqueue writes (a JSON string or number, nesting Python
can't decode, an integer too long to read), for tests of how a worker treats such a row. One
difference remains: PostgreSQL's scrub removes the secret keys of an object Python can't parse;
this store can't find them and leaves that text as it is (the worker fails such a row, and a
failed row keeps its payload, so only a direct dispatched mark can see it).

Claims: due time, then id, like every queue table but one. The event outbox claims in per-key
order on PostgreSQL (``claim_forms.per_key_order``); ``MemoryStore(ordered_by=event_key)``
(:mod:`.ordering`) does the same here, so a relay over this store keeps each key's order across
retries and claims too.

Time comes from the request's ``now`` or from the injected :class:`~outbox_core.ports.Clock` (a
:class:`~outbox_adapters.clock.FakeClock` in tests), where PostgreSQL uses the database clock.

Concurrency: each operation yields to the event loop once *before* it starts (a real store does I/O
there, and a loop that only talks to this store must still let other tasks run), then does all its
reading and writing without another ``await``, under a lock. A compare-and-set is therefore atomic
for asyncio tasks, and also for threads (a synchronous host test calling :meth:`MemoryStore.enqueue`
from a worker thread).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime

from outbox_adapters.clock import SystemClock
from outbox_adapters.memory.deliveries import MemoryDeliveryRows
from outbox_adapters.memory.operator import MemoryOperatorReads
from outbox_adapters.memory.ordering import in_key_order
from outbox_adapters.memory.rows import (
    NotJsonError,
    Row,
    decoded,
    matches,
    not_json,
    patched,
    scrubbed,
)
from outbox_adapters.memory.stamps import stamp
from outbox_adapters.store_rules import (
    NO_SUCH_ROW,
    check_distinct_rows,
    coerce_row_id,
    count_mark,
    log_requeued,
    payload_json,
    usable_row_ids,
)
from outbox_adapters.telemetry.tracing import producing
from outbox_adapters.wakeup import LaneWakeup, WakeupHub
from outbox_core.decide import event_for
from outbox_core.delivery import SCRUBBED_ON_MARK, Event, Status, check_requeue
from outbox_core.errors import RequeueRefused
from outbox_core.lease import fence_admits, lease_expires_at
from outbox_core.messages import ClaimedRow, ClaimToken, Mark, NewMessage, RowId, check_lane_name
from outbox_core.operator import (
    AuditEntry,
    StoreStats,
)
from outbox_core.ports import (
    ClaimRequest,
    Clock,
    EnqueueResult,
    MarkResult,
    RequeueRequest,
    RequeueResult,
)

__all__ = ["MemoryStore"]

_log = logging.getLogger(__name__)


class MemoryStore(MemoryOperatorReads, MemoryDeliveryRows):
    """:class:`outbox_core.ports.OutboxStore` in memory, with PostgresStore's semantics.

    ``clock`` supplies the time wherever PostgreSQL would use its own ``now()`` (a
    :class:`~outbox_adapters.clock.FakeClock` makes a test deterministic). Nothing is shared between
    instances.
    """

    def __init__(
        self, clock: Clock | None = None, *, ordered_by: Callable[[Row], str] | None = None
    ) -> None:
        self._clock: Clock = clock or SystemClock()
        #: A row's partition key when claims keep per-key order (the event outbox:
        #: :func:`~outbox_adapters.memory.ordering.event_key`); ``None``: due time, then id, like
        #: every other queue table.
        self._ordered_by = ordered_by
        #: Re-entrant: a webhook repository over this store works under its lock and writes rows
        #: through the store's own steps (``_write``), which take it again.
        self._lock = threading.RLock()
        self._rows: dict[int, Row] = {}
        self._keys: dict[tuple[str, str], int] = {}
        self._next_id = 1
        #: Counters since the store was built.
        self.stats = StoreStats()
        #: One entry per requeued row, oldest first (PostgreSQL: ``outbox_requeue_audit``).
        self.audit: list[AuditEntry] = []
        self._wakeups = WakeupHub()
        #: Stale marks per lane (PostgreSQL: ``outbox_stale_marks``).
        self._stale: dict[str, int] = {}
        #: Set by :meth:`serve_endpoints`: what disables the endpoint of a delivery row.
        self._disable_endpoint: Callable[[int, str | None], None] | None = None
        #: Switch it off to simulate an outage: every operation then raises
        #: :class:`~outbox_core.errors.StoreUnavailable`, as PostgresStore does when the database
        #: can't be reached, and nothing is read or written.
        self.available = True

    # --- producer ---------------------------------------------------------------------------------

    def enqueue(self, message: NewMessage, *, now: datetime | None = None) -> EnqueueResult:
        """Write ``message``; with a key already seen in the lane, write nothing and say so.

        Refuses a payload PostgreSQL's enqueue refuses (:class:`InvalidPayload`), before writing.
        """
        self._check_available("enqueue")
        payload = payload_json(message.payload)
        with producing(message, queue="memory") as produced:
            result = self._write(
                message.lane,
                payload,
                key=message.idempotency_key,
                not_before=message.not_before,
                now=now,
                trace_context=produced.message.trace_context,
            )
            produced.wrote(result.row_id, created=result.created)
        return result

    def insert_raw(self, lane: str, text: str, *, now: datetime | None = None) -> EnqueueResult:
        """Write a row AROUND the payload rules, as a buggy producer or an old row could have:
        ``text`` is stored as the payload's JSON text, whatever it holds (a JSON number, nesting
        too deep to decode, ...). For tests of rows that can't be decoded at send time.

        Text that is not JSON at all is refused (``ValueError``), as PostgreSQL's ``jsonb`` is.
        """
        try:
            json.loads(text, parse_constant=not_json)
        except (json.JSONDecodeError, NotJsonError) as exc:
            raise ValueError(f"the payload text is not JSON ({exc})") from None
        except (RecursionError, ValueError):
            pass  # JSON Python can't read (too deep, too many digits): what this method is for
        return self._write(check_lane_name(lane), text, key=None, not_before=None, now=now)

    def _write(  # noqa: PLR0913 - the row's columns, keyword-only
        self,
        lane: str,
        payload: str,
        *,
        key: str | None,
        not_before: datetime | None,
        now: datetime | None,
        trace_context: str | None = None,
    ) -> EnqueueResult:
        with self._lock:
            if key is not None and (lane, key) in self._keys:
                return EnqueueResult(row_id=self._keys[lane, key], created=False)
            at = stamp(self._clock, now)
            row = Row(
                id=self._next_id,
                lane=lane,
                payload=payload,
                next_attempt_at=at if not_before is None else not_before,
                idempotency_key=key,
                created_at=at,
                updated_at=at,
                trace_context=trace_context,
            )
            self._next_id += 1
            self._rows[row.id] = row
            if key is not None:
                self._keys[lane, key] = row.id
        # PostgreSQL's enqueue NOTIFYs on commit; here the write is already visible.
        self._wakeups.wake(lane)
        return EnqueueResult(row_id=row.id, created=True)

    def rows_by_key(self, lane: str, keys: Sequence[str]) -> dict[str, Row]:
        """The rows of ``lane`` carrying these idempotency keys, by key (the ones that exist)."""
        with self._lock:
            return {
                key: self._rows[self._keys[lane, key]] for key in keys if (lane, key) in self._keys
            }

    def wakeup(self, lane: str) -> LaneWakeup:
        """A signal set by every enqueue into ``lane``, for one worker (``Worker(wakeup=...)``):
        what :meth:`outbox_adapters.postgres.WakeupListener.wakeup` gives on PostgreSQL."""
        return self._wakeups.subscribe(lane)

    # --- the port ---------------------------------------------------------------------------------

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        await asyncio.sleep(0)
        self._check_available("claim_due")
        with self._lock:
            now = self._clock.now() if request.now is None else request.now
            due = self._due(request, now)
            expires = lease_expires_at(now, request.lease)
            claimed = [self._claim(row, request.token, now=now, expires=expires) for row in due]
            self.stats.claimed_rows += len(claimed)
        return claimed

    def _claim(
        self, row: Row, token: ClaimToken, *, now: datetime, expires: datetime
    ) -> ClaimedRow:
        """Claim ``row`` under ``token`` until ``expires`` (the caller holds the lock): the claim's
        attempt, lease stamp and token, as ``CLAIM`` sets them."""
        row.take(Event.CLAIM)
        row.next_attempt_at = expires
        row.claim_token = token
        row.claimed_at = now
        row.updated_at = self._clock.now()
        return ClaimedRow(
            id=row.id,
            lane=row.lane,
            payload=decoded(row.payload),
            attempts=row.attempts,
            token=token,
            lease_expires_at=expires,
            created_at=row.created_at,
            trace_context=row.trace_context,
        )

    def _due(self, request: ClaimRequest, now: datetime) -> list[Row]:
        if self._ordered_by is not None:  # the event outbox's per-key claim
            return in_key_order(
                self._rows.values(),
                lane=request.lane,
                now=now,
                limit=request.limit,
                key_of=self._ordered_by,
                ahead_of=request.ahead_of,
            )
        due = [
            row
            for row in self._rows.values()
            if row.lane == request.lane
            and row.status is Status.PENDING
            and row.next_attempt_at <= now
        ]
        return sorted(self._heads(due), key=lambda row: (row.next_attempt_at, row.id))[
            : request.limit
        ]

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        await asyncio.sleep(0)
        self._check_available("mark_if_pending")
        self._refuse_disable([mark])
        with self._lock:
            return self._apply(mark)

    async def mark_many(self, marks: Sequence[Mark]) -> list[MarkResult]:
        await asyncio.sleep(0)
        self._check_available("mark_many")
        check_distinct_rows(marks)
        self._refuse_disable(marks)
        with self._lock:  # one step for the lot, as one statement is on PostgreSQL
            return [self._apply(mark) for mark in marks]

    def _apply(self, mark: Mark) -> MarkResult:
        """Apply one mark if the fence admits it (the caller holds the lock)."""
        row = self._fenced_row(mark.row_id, mark.token)
        if row is not None:
            if mark.disable_endpoint and self._disable_endpoint is not None:
                # In the mark's own step, before its writes: the endpoint goes with the applied
                # failure, or (if disabling it fails) neither does.
                self._disable_endpoint(row.id, mark.reason)
            now = self._clock.now()
            row.take(event_for(mark))
            if mark.refund:
                # Not attempted (deferred by a cap): the attempt back, the last error and the
                # time of the last real attempt kept, as PostgreSQL's MARK does.
                row.attempts = max(row.attempts - 1, 0)
            else:
                row.last_error = mark.reason
            if mark.retry_delay is not None:
                # In the store's clock, as PostgreSQL stamps now() + delay (not the worker's).
                row.next_attempt_at = now + mark.retry_delay
            if mark.status is Status.PENDING:
                # A retry ends the claim: no later mark of it can land.
                row.resolved_at = None
                row.claim_token = None
            else:
                # A resolved row keeps its token: the record of which claim resolved it.
                row.resolved_at = now
            # The scrub, in the same step as the status change (outbox_core.scrub).
            row.payload = patched(scrubbed(row.payload, mark.scrub_keys), mark.payload_patch)
            if mark.status in SCRUBBED_ON_MARK:
                row.scrubbed_at = now
            if not mark.refund:
                row.updated_at = now
        elif (known := self._rows.get(coerce_row_id(mark.row_id))) is not None:
            # PostgreSQL's MARK counts a stale mark for the lane of the row it found.
            self._stale[known.lane] = self._stale.get(known.lane, 0) + 1
        return count_mark(self.stats, applied=row is not None)

    async def release(
        self, row_id: RowId, token: ClaimToken, *, now: datetime | None = None
    ) -> MarkResult:
        await asyncio.sleep(0)
        self._check_available("release")
        with self._lock:
            row = self._fenced_row(row_id, token)
            if row is not None:
                row.attempts = max(row.attempts - 1, 0)
                row.next_attempt_at = stamp(self._clock, now)
                row.claim_token = None
                row.claimed_at = None
                row.updated_at = self._clock.now()
            return count_mark(self.stats, applied=row is not None)

    async def requeue_failed(self, request: RequeueRequest) -> RequeueResult:
        await asyncio.sleep(0)
        self._check_available("requeue_failed")
        refused: dict[RowId, str] = {}
        with self._lock:
            if request.row_ids is not None:
                wanted = usable_row_ids(request.row_ids, refused)
                candidates = [self._rows[i] for i in sorted(wanted) if i in self._rows]
                refused.update({wanted[i]: NO_SUCH_ROW for i in wanted if i not in self._rows})
            else:
                wanted = {}
                candidates = [row for row in self._by_id() if matches(row, request)]
            requeued: list[RowId] = []
            for row in candidates:
                try:
                    check_requeue(row.status, scrubbed=row.scrubbed_at is not None)
                except RequeueRefused as refusal:
                    refused[wanted.get(row.id, row.id)] = str(refusal)
                else:
                    self._requeue(row, request.actor, request.reason)
                    requeued.append(wanted.get(row.id, row.id))
        log_requeued(_log, requeued, request.actor)
        return RequeueResult(requeued=tuple(requeued), refused=refused)

    # --- helpers ----------------------------------------------------------------------------------

    def _fenced_row(self, row_id: RowId, token: ClaimToken) -> Row | None:
        """The row, if the fence admits a write under ``token``; else ``None``."""
        row = self._rows.get(coerce_row_id(row_id))
        if row is None or not fence_admits(
            row_status=row.status, row_token=row.claim_token, mark_token=token
        ):
            return None
        return row

    def _requeue(self, row: Row, actor: str, reason: str | None = None) -> None:
        now = self._clock.now()
        self.audit.append(
            AuditEntry(
                message_id=row.id,
                actor=actor,
                requeued_at=now,
                previous_attempts=row.attempts,
                previous_error=row.last_error,
                reason=reason,
            )
        )
        row.take(Event.REQUEUE)
        row.next_attempt_at = now
        row.claim_token = None
        row.claimed_at = None
        row.last_error = None
        row.resolved_at = None
        row.updated_at = now
