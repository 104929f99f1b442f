"""In-memory adapters for tests (catalogue A11): a store, a leader lease, a recording mailer.

They are shipped for host applications' tests as much as for ours. :class:`MemoryStore` has the
semantics of :class:`outbox_adapters.postgres.store.PostgresStore`, statement for statement, and the
contract suite (``tests/contract``) runs the same cases against both, so it cannot drift:

- ``enqueue`` refuses the payloads PostgreSQL's enqueue refuses, keeps what JSON keeps (a tuple comes
  back a list), and honours the per-lane idempotency key;
- ``claim_due`` takes the due rows of a lane in (due time, id) order, counts the attempt, stamps the
  lease and the token; ``mark_if_pending`` and ``release`` are fenced compare-and-sets with
  :func:`outbox_core.lease.fence_admits`, the scrub in the same step; ``requeue_failed`` judges each
  row with :func:`outbox_core.delivery.check_requeue` and writes an audit record.

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
import copy
import json
import logging
import math
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Generic, TypeAlias, TypeVar

import attrs

from outbox_adapters.clock import SystemClock
from outbox_core.delivery import Status, check_requeue
from outbox_core.errors import InvalidPayload, RequeueRefused
from outbox_core.lease import fence_admits, lease_expires_at
from outbox_core.mail import OutgoingMail, validate_address
from outbox_core.messages import ClaimedRow, ClaimToken, JSONObject, Mark, NewMessage, RowId
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import (
    ClaimRequest,
    Clock,
    EnqueueResult,
    LeaderTerm,
    MarkResult,
    RequeueRequest,
    RequeueResult,
)

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "NO_SUCH_ROW",
    "AuditEntry",
    "ErrorGroup",
    "FailedReport",
    "HandlerCall",
    "MailAttempt",
    "MemoryLeaderLease",
    "MemoryStore",
    "RecordingHandler",
    "RecordingMailer",
    "Scripted",
    "StoreStats",
    "StoredRow",
]

_log = logging.getLogger(__name__)

#: The largest payload accepted, as UTF-8 JSON (the same cap as PostgreSQL's enqueue).
MAX_PAYLOAD_BYTES: Final = 256 * 1024
#: The reason given for a requeue of an id no row has.
NO_SUCH_ROW: Final = "no such row"


# --- value types (the same fields as the PostgreSQL store's) --------------------------------------


@attrs.define
class StoreStats:
    """Counters since the store was built (for logs, metrics and tests)."""

    #: Rows handed out by ``claim_due``.
    claimed_rows: int = 0
    #: Marks (and releases) the fence accepted.
    applied_marks: int = 0
    #: Marks (and releases) the fence refused: dropped, never applied.
    stale_marks: int = 0


@attrs.frozen
class StoredRow:
    """A row as an operator sees it. ``payload`` is raw: redact it before showing it anywhere."""

    id: int
    lane: str
    status: Status
    payload: JSONObject
    attempts: int
    next_attempt_at: datetime
    claim_token: str | None
    claimed_at: datetime | None
    last_error: str | None
    idempotency_key: str | None
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    scrubbed_at: datetime | None


@attrs.frozen
class ErrorGroup:
    """Failed rows that share an error."""

    error: str | None
    rows: int
    first_failed_at: datetime | None
    last_failed_at: datetime | None


@attrs.frozen
class FailedReport:
    """The newest failed rows, and every failed row grouped by error."""

    rows: tuple[StoredRow, ...]
    by_error: tuple[ErrorGroup, ...]


@attrs.frozen
class AuditEntry:
    """Who put which failed row back to pending, and what it had failed with."""

    message_id: int
    actor: str
    requeued_at: datetime
    previous_attempts: int
    previous_error: str | None


# --- payload checks (the PostgreSQL enqueue's refusals) --------------------------------------------


def _check_json(value: object, path: str) -> None:
    """JSON types only, string keys, finite numbers, no NUL (PostgreSQL's jsonb refuses it)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_key(key, path)
            _check_json(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json(item, f"{path}[{index}]")
    elif isinstance(value, str):
        if "\x00" in value:
            raise InvalidPayload(f"{path} contains a NUL character, which PostgreSQL can't store")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidPayload(f"{path} is {value!r}, which is not a JSON number")
    elif value is not None and not isinstance(value, bool | int):
        raise InvalidPayload(
            f"{path} is a {type(value).__name__} ({value!r:.60}), which is not a JSON value"
        )


def _check_key(key: object, path: str) -> None:
    # json.dumps would silently turn 1, 1.5, True or None into a string key: refuse instead.
    if not isinstance(key, str):
        raise InvalidPayload(
            f"payload keys must be strings; {path} has the key {key!r} ({type(key).__name__})"
        )
    _check_json(key, f"{path} key {key[:40]!r}")


def _stored_payload(payload: object) -> dict[str, Any]:
    """What PostgreSQL would store: checked, size-capped, and decoded back from JSON text."""
    if not isinstance(payload, Mapping):
        raise InvalidPayload(
            f"a payload must be a JSON object (a dict), got {type(payload).__name__} "
            f"{payload!r:.60}"
        )
    _check_json(payload, "payload")
    text = json.dumps(payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode())
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidPayload(
            f"the payload is {size} bytes of JSON, over the {MAX_PAYLOAD_BYTES}-byte limit; "
            "store large content elsewhere and put a reference in the payload"
        )
    decoded: dict[str, Any] = json.loads(text)
    return decoded


def _or_clock(clock: Clock, now: datetime | None) -> datetime:
    """``now`` if given (timezone-aware: a naive one would mix local time with UTC), else the
    clock's time."""
    if now is None:
        return clock.now()
    if now.utcoffset() is None:
        raise ValueError(f"now must be a timezone-aware datetime, got {now!r}")
    return now


def _row_id(value: RowId) -> int:
    """Ids are integers, as in PostgreSQL; a string of digits is accepted (typed on a CLI)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"a row id is an int, got {type(value).__name__} {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"a row id is an integer, got {value!r}") from None


# --- the store ------------------------------------------------------------------------------------


@attrs.define
class _Row:
    id: int
    lane: str
    payload: dict[str, Any]
    next_attempt_at: datetime
    idempotency_key: str | None
    created_at: datetime
    updated_at: datetime
    status: Status = Status.PENDING
    attempts: int = 0
    claim_token: ClaimToken | None = None
    claimed_at: datetime | None = None
    last_error: str | None = None
    resolved_at: datetime | None = None
    scrubbed_at: datetime | None = None

    def snapshot(self) -> StoredRow:
        return StoredRow(
            id=self.id,
            lane=self.lane,
            status=self.status,
            payload=copy.deepcopy(self.payload),
            attempts=self.attempts,
            next_attempt_at=self.next_attempt_at,
            claim_token=None if self.claim_token is None else self.claim_token.value,
            claimed_at=self.claimed_at,
            last_error=self.last_error,
            idempotency_key=self.idempotency_key,
            created_at=self.created_at,
            updated_at=self.updated_at,
            resolved_at=self.resolved_at,
            scrubbed_at=self.scrubbed_at,
        )


class MemoryStore:
    """:class:`outbox_core.ports.OutboxStore` in memory, with PostgresStore's semantics.

    ``clock`` supplies the time wherever PostgreSQL would use its own ``now()`` (a
    :class:`~outbox_adapters.clock.FakeClock` makes a test deterministic). Nothing is shared between
    instances.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._rows: dict[int, _Row] = {}
        self._keys: dict[tuple[str, str], int] = {}
        self._next_id = 1
        #: Counters since the store was built.
        self.stats = StoreStats()
        #: One entry per requeued row, oldest first (PostgreSQL: ``outbox_requeue_audit``).
        self.audit: list[AuditEntry] = []

    # --- producer ---------------------------------------------------------------------------------

    def enqueue(self, message: NewMessage, *, now: datetime | None = None) -> EnqueueResult:
        """Write ``message``; with a key already seen in the lane, write nothing and say so.

        Refuses a payload PostgreSQL's enqueue refuses (:class:`InvalidPayload`), before writing.
        """
        payload = _stored_payload(message.payload)
        with self._lock:
            key = message.idempotency_key
            if key is not None and (message.lane, key) in self._keys:
                return EnqueueResult(row_id=self._keys[message.lane, key], created=False)
            stamp = _or_clock(self._clock, now)
            row = _Row(
                id=self._next_id,
                lane=message.lane,
                payload=payload,
                next_attempt_at=stamp if message.not_before is None else message.not_before,
                idempotency_key=key,
                created_at=stamp,
                updated_at=stamp,
            )
            self._next_id += 1
            self._rows[row.id] = row
            if key is not None:
                self._keys[message.lane, key] = row.id
        return EnqueueResult(row_id=row.id, created=True)

    # --- the port ---------------------------------------------------------------------------------

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        await asyncio.sleep(0)
        with self._lock:
            now = self._clock.now() if request.now is None else request.now
            due = sorted(
                (
                    row
                    for row in self._rows.values()
                    if row.lane == request.lane
                    and row.status is Status.PENDING
                    and row.next_attempt_at <= now
                ),
                key=lambda row: (row.next_attempt_at, row.id),
            )[: request.limit]
            expires = lease_expires_at(now, request.lease)
            claimed: list[ClaimedRow] = []
            for row in due:
                row.attempts += 1
                row.next_attempt_at = expires
                row.claim_token = request.token
                row.claimed_at = now
                row.updated_at = self._clock.now()
                claimed.append(
                    ClaimedRow(
                        id=row.id,
                        lane=row.lane,
                        payload=copy.deepcopy(row.payload),
                        attempts=row.attempts,
                        token=request.token,
                        lease_expires_at=expires,
                        created_at=row.created_at,
                    )
                )
            self.stats.claimed_rows += len(claimed)
        return claimed

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        await asyncio.sleep(0)
        with self._lock:
            row = self._fenced_row(mark.row_id, mark.token)
            if row is not None:
                now = self._clock.now()
                row.status = mark.status
                row.last_error = mark.reason
                if mark.next_attempt_at is not None:
                    row.next_attempt_at = mark.next_attempt_at
                if mark.status is Status.PENDING:
                    # A retry ends the claim: no later mark of it can land.
                    row.resolved_at = None
                    row.claim_token = None
                else:
                    # A resolved row keeps its token: the record of which claim resolved it.
                    row.resolved_at = now
                # The scrub, in the same step as the status change (catalogue C6).
                row.payload = {k: v for k, v in row.payload.items() if k not in mark.scrub_keys}
                if mark.status in (Status.DISPATCHED, Status.SKIPPED):
                    row.scrubbed_at = now
                row.updated_at = now
            return self._result(row is not None, mark.row_id, f"mark {mark.status}")

    async def release(
        self, row_id: RowId, token: ClaimToken, *, now: datetime | None = None
    ) -> MarkResult:
        await asyncio.sleep(0)
        with self._lock:
            row = self._fenced_row(row_id, token)
            if row is not None:
                row.attempts = max(row.attempts - 1, 0)
                row.next_attempt_at = _or_clock(self._clock, now)
                row.claim_token = None
                row.claimed_at = None
                row.updated_at = self._clock.now()
            return self._result(row is not None, row_id, "release")

    async def requeue_failed(self, request: RequeueRequest) -> RequeueResult:
        await asyncio.sleep(0)
        refused: dict[RowId, str] = {}
        with self._lock:
            if request.row_ids is not None:
                wanted = self._known_ids(request.row_ids, refused)
                candidates = [self._rows[i] for i in sorted(wanted) if i in self._rows]
                refused.update({wanted[i]: NO_SUCH_ROW for i in wanted if i not in self._rows})
            else:
                wanted = {}
                candidates = [row for row in self._by_id() if _matches(row, request)]
            requeued: list[RowId] = []
            for row in candidates:
                try:
                    check_requeue(row.status, scrubbed=row.scrubbed_at is not None)
                except RequeueRefused as refusal:
                    refused[wanted.get(row.id, row.id)] = str(refusal)
                else:
                    self._requeue(row, request.actor)
                    requeued.append(wanted.get(row.id, row.id))
        if requeued:
            _log.info(
                "requeued %d failed row(s) for %s",
                len(requeued),
                request.actor,
                extra={"outbox_row_ids": requeued, "outbox_actor": request.actor},
            )
        return RequeueResult(requeued=tuple(requeued), refused=refused)

    # --- operator reads ---------------------------------------------------------------------------

    async def get(self, row_id: RowId) -> StoredRow | None:
        """One row, or ``None``. The payload is raw: redact before showing it."""
        with self._lock:
            row = self._rows.get(_row_id(row_id))
            return None if row is None else row.snapshot()

    async def list_failed(self, lane: str | None = None, limit: int = 100) -> FailedReport:
        """The ``limit`` newest failed rows, and all failed rows grouped by error."""
        with self._lock:
            failed = [
                row.snapshot()
                for row in self._by_id()
                if row.status is Status.FAILED and (lane is None or row.lane == lane)
            ]
        # PostgreSQL: ORDER BY resolved_at DESC, id DESC (a NULL would sort first).
        newest = sorted(failed, key=_failed_order, reverse=True)
        groups: dict[str | None, list[StoredRow]] = {}
        for row in failed:
            groups.setdefault(row.last_error, []).append(row)
        by_error = [_error_group(error, rows) for error, rows in groups.items()]
        # PostgreSQL: ORDER BY count(*) DESC, last_error (a NULL sorts last).
        by_error.sort(key=lambda g: (-g.rows, g.error is None, g.error or ""))
        return FailedReport(rows=tuple(newest[:limit]), by_error=tuple(by_error))

    async def counts(self) -> dict[str, dict[Status, int]]:
        """Rows per lane and status, e.g. ``{"email": {Status.PENDING: 3, ...}}``."""
        result: dict[str, dict[Status, int]] = {}
        with self._lock:
            for row in self._by_id():
                lane = result.setdefault(row.lane, {})
                lane[row.status] = lane.get(row.status, 0) + 1
        return result

    def rows(self, lane: str | None = None) -> list[StoredRow]:
        """Every row (of ``lane``), oldest first: what a host's test asserts it enqueued."""
        with self._lock:
            return [row.snapshot() for row in self._by_id() if lane is None or row.lane == lane]

    # --- helpers ----------------------------------------------------------------------------------

    def _by_id(self) -> list[_Row]:
        return [self._rows[i] for i in sorted(self._rows)]

    def _fenced_row(self, row_id: RowId, token: ClaimToken) -> _Row | None:
        """The row, if the fence admits a write under ``token``; else ``None``."""
        row = self._rows.get(_row_id(row_id))
        if row is None or not fence_admits(
            row_status=row.status, row_token=row.claim_token, mark_token=token
        ):
            return None
        return row

    def _result(self, applied: bool, row_id: RowId, what: str) -> MarkResult:  # noqa: FBT001
        if applied:
            self.stats.applied_marks += 1
            return MarkResult.APPLIED
        self.stats.stale_marks += 1
        # The row id only: a payload may hold secrets, and a stale mark is no reason to show one.
        _log.warning(
            "stale %s dropped: row %s is no longer pending under this claim "
            "(its lease expired and a sibling re-claimed it, or it was already resolved)",
            what,
            row_id,
            extra={"outbox_row_id": row_id, "outbox_stale": what},
        )
        return MarkResult.STALE

    def _requeue(self, row: _Row, actor: str) -> None:
        now = self._clock.now()
        self.audit.append(
            AuditEntry(
                message_id=row.id,
                actor=actor,
                requeued_at=now,
                previous_attempts=row.attempts,
                previous_error=row.last_error,
            )
        )
        row.status = Status.PENDING
        row.attempts = 0
        row.next_attempt_at = now
        row.claim_token = None
        row.claimed_at = None
        row.last_error = None
        row.resolved_at = None
        row.updated_at = now

    @staticmethod
    def _known_ids(row_ids: Sequence[RowId], refused: dict[RowId, str]) -> dict[int, RowId]:
        """Map each usable id to the value the caller gave; an unusable one is no such row."""
        wanted: dict[int, RowId] = {}
        for given in row_ids:
            try:
                wanted[_row_id(given)] = given
            except (TypeError, ValueError):
                refused[given] = NO_SUCH_ROW
        return wanted


def _matches(row: _Row, request: RequeueRequest) -> bool:
    """The requeue filter: failed rows matching every filter given (``None`` = any); a row with
    no value for a filtered column does not match it, as SQL's NULL comparisons don't."""
    failed_at = row.resolved_at
    if row.status is not Status.FAILED:
        return False
    if request.lane is not None and row.lane != request.lane:
        return False
    if request.failed_since is not None and (failed_at is None or failed_at < request.failed_since):
        return False
    if request.failed_before is not None and (
        failed_at is None or failed_at >= request.failed_before
    ):
        return False
    return request.error_contains is None or (
        row.last_error is not None and request.error_contains in row.last_error
    )


def _failed_order(row: StoredRow) -> tuple[bool, datetime, int]:
    return (row.resolved_at is None, row.resolved_at or row.created_at, row.id)


def _error_group(error: str | None, rows: list[StoredRow]) -> ErrorGroup:
    times = [row.resolved_at for row in rows if row.resolved_at is not None]
    return ErrorGroup(
        error=error,
        rows=len(rows),
        first_failed_at=min(times, default=None),
        last_failed_at=max(times, default=None),
    )


# --- leader lease ---------------------------------------------------------------------------------


@attrs.define
class _Leadership:
    holder: str
    term: int
    elected_at: datetime
    expires_at: datetime


class MemoryLeaderLease:
    """:class:`outbox_core.ports.LeaderLease` in memory, with PostgresLeaderLease's semantics.

    A live lease is renewed by its holder (same term) and refused to anyone else; an expired one
    goes to whoever asks next with a new term (its old holder included: it stopped trusting itself
    at expiry). Expiry is in the clock's wall time; the term's ``trusted_until`` is the clock's
    monotonic time at the *start* of the attempt + ttl.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._lanes: dict[str, _Leadership] = {}

    async def try_acquire(
        self, lane: str, holder: str, *, ttl: timedelta, now: datetime | None = None
    ) -> LeaderTerm | None:
        """Win or renew ``lane``; ``None`` while another holder's lease is live."""
        if ttl <= timedelta(0):
            raise ValueError(f"a leader lease needs a positive ttl, got {ttl!r}")
        started = self._clock.monotonic()
        await asyncio.sleep(0)
        with self._lock:
            at = _or_clock(self._clock, now)
            current = self._lanes.get(lane)
            if current is None:
                current = self._lanes[lane] = _Leadership(holder, 1, at, at + ttl)
            elif current.holder == holder and current.expires_at > at:
                current.expires_at = at + ttl
            elif current.expires_at <= at:
                self._lanes[lane] = current = _Leadership(holder, current.term + 1, at, at + ttl)
            else:
                return None
            term = current.term
        return LeaderTerm(
            lane=lane, holder=holder, term=term, trusted_until=started + ttl.total_seconds()
        )

    async def release(self, term: LeaderTerm, *, now: datetime | None = None) -> None:
        """Expire the lease at once if it is still ``term``; a lost lease is left alone."""
        await asyncio.sleep(0)
        with self._lock:
            current = self._lanes.get(term.lane)
            if current is not None and (current.holder, current.term) == (term.holder, term.term):
                at = _or_clock(self._clock, now)
                current.expires_at = min(current.expires_at, at)


# --- recording peers ------------------------------------------------------------------------------

#: What a scripted send does: return this outcome, raise this exception, or await this callable
#: (to make a send slow, block on an event, or decide at the last moment).
Scripted: TypeAlias = Outcome | BaseException | Callable[[], Awaitable[Outcome]]

_K = TypeVar("_K", bound=Hashable)


class _Script(Generic[_K]):
    """Results to hand out: the first key with a queue wins, then the shared queue, then the
    default."""

    def __init__(self, default: Outcome) -> None:
        self.default = default
        self._queue: deque[Scripted] = deque()
        self._by_key: dict[_K, deque[Scripted]] = {}

    def add(self, results: Iterable[Scripted]) -> None:
        self._queue.extend(results)

    def add_for(self, key: _K, results: Iterable[Scripted]) -> None:
        self._by_key.setdefault(key, deque()).extend(results)

    def pop(self, keys: Iterable[_K]) -> Scripted:
        for key in keys:
            queue = self._by_key.get(key)
            if queue:
                return queue.popleft()
        return self._queue.popleft() if self._queue else self.default


async def _play(result: Scripted) -> Outcome:
    if isinstance(result, BaseException):
        raise result
    if isinstance(result, Outcome):
        return result
    return await result()


@attrs.frozen
class MailAttempt:
    """One call of :meth:`RecordingMailer.send`."""

    mail: OutgoingMail
    budget: timedelta
    #: What the send returned; ``None`` when it raised.
    outcome: Outcome | None
    #: What the send raised, if it did.
    error: BaseException | None = None


class RecordingMailer:
    """:class:`outbox_core.ports.Mailer` that records every message and sends nothing.

    By default every send returns ``Outcome.sent()``. Script other results with :meth:`script`
    (in sequence, for whatever mail comes next) or :meth:`script_recipient` (for mail to one
    address; it wins over the sequence); each scripted result is used once, then the default
    applies again.
    """

    def __init__(self, *, default: Outcome | None = None) -> None:
        self._script: _Script[str] = _Script(default or Outcome.sent())
        #: Every call, in order, with what it returned or raised.
        self.attempts: list[MailAttempt] = []

    def script(self, *results: Scripted) -> None:
        """The results of the next sends, in order, whoever they are for."""
        self._script.add(results)

    def script_recipient(self, address: str, *results: Scripted) -> None:
        """The results of the next sends to ``address`` (normalised as the mail's recipients are)."""
        self._script.add_for(validate_address(address), results)

    async def send(self, mail: OutgoingMail, *, budget: timedelta) -> Outcome:
        result = self._script.pop(mail.recipients)
        try:
            outcome = await _play(result)
        except BaseException as error:
            self.attempts.append(MailAttempt(mail, budget, None, error))
            raise
        self.attempts.append(MailAttempt(mail, budget, outcome))
        return outcome

    @property
    def sent(self) -> list[OutgoingMail]:
        """The messages whose send returned ``sent``, in order."""
        return [
            a.mail
            for a in self.attempts
            if a.outcome is not None and a.outcome.kind is OutcomeKind.SENT
        ]

    def count(self, recipient: str | None = None) -> int:
        """How many sends were attempted (to ``recipient``, when given)."""
        if recipient is None:
            return len(self.attempts)
        address = validate_address(recipient)
        return sum(1 for a in self.attempts if address in a.mail.recipients)


@attrs.frozen
class HandlerCall:
    """One call of :class:`RecordingHandler`."""

    row: ClaimedRow
    budget: timedelta
    #: What the handler returned; ``None`` when it raised.
    outcome: Outcome | None
    #: What the handler raised, if it did.
    error: BaseException | None = None


class RecordingHandler:
    """:class:`outbox_core.ports.RowHandler` that records every row and returns scripted outcomes.

    Like :class:`RecordingMailer`: ``Outcome.sent()`` by default; :meth:`script` for the next rows
    in order, :meth:`script_row` for one row id (it wins).
    """

    def __init__(self, *, default: Outcome | None = None) -> None:
        self._script: _Script[RowId] = _Script(default or Outcome.sent())
        #: Every call, in order, with what it returned or raised.
        self.calls: list[HandlerCall] = []

    def script(self, *results: Scripted) -> None:
        """The results of the next rows, in order, whichever they are."""
        self._script.add(results)

    def script_row(self, row_id: RowId, *results: Scripted) -> None:
        """The results of the next attempts of row ``row_id``."""
        self._script.add_for(row_id, results)

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        result = self._script.pop([row.id])
        try:
            outcome = await _play(result)
        except BaseException as error:
            self.calls.append(HandlerCall(row, budget, None, error))
            raise
        self.calls.append(HandlerCall(row, budget, outcome))
        return outcome

    def count(self, row_id: RowId | None = None) -> int:
        """How many times the handler ran (for row ``row_id``, when given)."""
        return sum(1 for c in self.calls if row_id is None or c.row.id == row_id)
