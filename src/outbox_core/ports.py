"""The ports: every seam between the worker loop and the world, as ``typing.Protocol``.

Ports are few, coarse and named for domain operations (``claim_due``, ``mark_if_pending``,
``requeue_failed``), never ``execute(sql)``. They take frozen parameter objects, so a new optional
argument never breaks an adapter. Adapters satisfy them structurally: nothing to inherit.

One contract suite runs against every implementation of a port (the in-memory fakes and every real
adapter), so a fake cannot drift from the real thing.

=====================  ===================================================================
port                   satisfied by (``outbox_adapters``)
=====================  ===================================================================
:class:`OutboxStore`   ``memory.MemoryStore``, ``postgres.PostgresStore``
:class:`OperatorStore` ``memory.MemoryStore``, ``postgres.PostgresStore`` (the ``outbox`` CLI)
:class:`Mailer`        ``smtp.SmtpMailer``, ``memory.RecordingMailer``
:class:`WebhookSender` ``http.HttpxWebhookSender``
:class:`Publisher`     ``nats.JetStreamPublisher``, ``kafka.KafkaPublisher``
:class:`Consumer`      ``nats.JetStreamConsumer``, ``kafka.KafkaConsumer``
:class:`Clock`         ``clock.SystemClock``, ``clock.FakeClock``
:class:`Encryptor`     ``crypto.AesGcmEncryptor`` (sealed payload fields, ADR 0010)
:class:`Ed25519`       ``webhook_keys.CryptographyEd25519`` (v1a webhook signatures, ADR 0017)
:class:`LeaderLease`   ``postgres.PostgresLeaderLease``, ``memory.MemoryLeaderLease``
:class:`RowHandler`    the host's handler, or ``email.EmailHandler``
=====================  ===================================================================
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

import attrs

from outbox_core._validators import optional_aware, positive
from outbox_core.envelope import SealedValue
from outbox_core.mail import OutgoingMail
from outbox_core.messages import ClaimedRow, ClaimToken, JSONObject, Mark, RowId
from outbox_core.operator import FailedReport, LaneStats, PayloadRewrites, StoredRow
from outbox_core.outcomes import Outcome

__all__ = [
    "BrokerMessage",
    "ClaimRequest",
    "Clock",
    "Consumer",
    "Encryptor",
    "EnqueueResult",
    "Heartbeat",
    "LeaderLease",
    "LeaderTerm",
    "Mailer",
    "MarkResult",
    "OperatorStore",
    "OutboxStore",
    "PayloadRewrite",
    "Publisher",
    "ReceivedMessage",
    "RequeueRequest",
    "RequeueResult",
    "RowHandler",
    "WebhookSender",
]


#: The longest requeue reason the audit keeps.
_MAX_REASON = 500


# --- parameter and result objects ---------------------------------------------------------------


@attrs.frozen
class ClaimRequest:
    """Claim up to ``limit`` due rows of ``lane`` under a new lease and token."""

    #: The lane (queue) to claim from.
    lane: str
    #: At most this many rows.
    limit: int = attrs.field(validator=attrs.validators.ge(1))
    #: How long the claim holds the rows (``timing.EmailTiming.claim_lease()``).
    lease: timedelta = attrs.field(validator=positive)
    #: The fencing token every row of this claim will carry.
    token: ClaimToken
    #: ``None`` uses the database clock; tests inject a time.
    now: datetime | None = attrs.field(default=None, validator=optional_aware)
    #: The token of the batch this worker is still working when it claims ahead (ADR 0023): on a
    #: per-key ordered table, that batch's leased rows do not hold their keys back, so the claim
    #: may hand out the rows that follow them. ``None``: every leased row holds its key back.
    #: Tables without per-key order ignore it.
    ahead_of: ClaimToken | None = None


class MarkResult(enum.Enum):
    """What happened to a mark."""

    #: The row was pending under the mark's token and now carries the mark.
    APPLIED = "applied"
    #: The fence refused it (row resolved, or re-claimed under another token): dropped, not applied.
    STALE = "stale"


@attrs.frozen
class EnqueueResult:
    """The outcome of an enqueue."""

    #: The row's id (the existing row's id when the idempotency key was seen before).
    row_id: RowId
    #: False when a row with the same idempotency key already existed: nothing was written.
    created: bool


def _reason(_inst: object, _attribute: object, value: str | None) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise ValueError("a requeue reason is one line of printable text")
    if len(value) > _MAX_REASON:
        raise ValueError(f"a requeue reason is at most {_MAX_REASON} characters, got {len(value)}")


@attrs.frozen
class RequeueRequest:
    """Put failed rows back to pending with attempts reset (an operator's action, audited)."""

    #: Who asks (recorded in the audit log).
    actor: str
    #: Exactly these rows; or ``None`` to select by the filters below.
    row_ids: tuple[RowId, ...] | None = None
    #: Only rows of this lane.
    lane: str | None = None
    #: Only rows that failed at or after this time.
    failed_since: datetime | None = attrs.field(default=None, validator=optional_aware)
    #: Only rows that failed before this time.
    failed_before: datetime | None = attrs.field(default=None, validator=optional_aware)
    #: Only rows whose last error contains this text.
    error_contains: str | None = None
    #: Why (a ticket, a sentence): kept in the audit beside who and when. One line, 500 chars.
    reason: str | None = attrs.field(default=None, validator=_reason)


@attrs.frozen
class RequeueResult:
    """Which rows went back to pending and which were refused, with the reason."""

    requeued: tuple[RowId, ...]
    refused: Mapping[RowId, str] = attrs.field(factory=dict)


@attrs.frozen
class LeaderTerm:
    """A won election. Trust it only until :attr:`trusted_until` on the monotonic clock."""

    #: Which lane the leadership is for.
    lane: str
    #: Who holds it.
    holder: str
    #: The term number; re-election is a compare-and-set on it.
    term: int
    #: Monotonic time (seconds) computed from the attempt's *start* + TTL: past it, stop claiming.
    trusted_until: float


@attrs.frozen
class BrokerMessage:
    """One event to publish: ordered per ``key``, de-duplicated by the broker on ``message_id``."""

    subject: str
    key: str
    message_id: str
    body: bytes
    headers: Mapping[str, str] = attrs.field(factory=dict)


# --- the ports ----------------------------------------------------------------------------------


@runtime_checkable
class OutboxStore(Protocol):
    """Where rows wait. Every write is a compare-and-set; nothing is read-modify-write."""

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        """One short committed transaction: lock due rows (skipping locked ones), attempts + 1,
        stamp the lease and the token, return them."""
        ...

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        """Apply ``mark`` only while the row is pending under ``mark.token``; scrub in the same
        write when the mark is dispatched or skipped."""
        ...

    async def mark_many(self, marks: Sequence[Mark]) -> Sequence[MarkResult]:
        """Apply several marks (of distinct rows) in one write, each fenced as by
        :meth:`mark_if_pending`; the results in the order of ``marks``. One commit for the lot:
        the worker's grouped-mark mode (``LaneConfig.group_marks``)."""
        ...

    async def release(self, row_id: RowId, token: ClaimToken) -> MarkResult:
        """Give back a claimed row that was never started (graceful shutdown): due now, the
        claim's attempt refunded. Fenced like a mark."""
        ...

    async def requeue_failed(self, request: RequeueRequest) -> RequeueResult:
        """Failed → pending with attempts reset; refuses rows that aren't failed, with the reason."""
        ...


#: ``rewrite(row_id, lane, payload)``: the new payload of an unsent row, or ``None`` to leave it.
PayloadRewrite = Callable[[int, str, JSONObject], JSONObject | None]


@runtime_checkable
class OperatorStore(Protocol):
    """What an operator does to a store (``outbox get|failed|stats|requeue|keys rotate``).

    The value types are in :mod:`outbox_core.operator`. Payloads come back raw: whoever shows one
    redacts it first (``ScrubRules.redact``).
    """

    async def get(self, row_id: RowId) -> StoredRow | None:
        """One row, or ``None`` when there is no such row."""
        ...

    async def list_failed(self, lane: str | None = None, limit: int = 100) -> FailedReport:
        """The ``limit`` newest failed rows (of ``lane``, or of all), and all of them grouped by
        error, most frequent first."""
        ...

    async def lane_stats(self) -> Mapping[str, LaneStats]:
        """Per lane: rows per status, and how many marks the fence refused (stale marks)."""
        ...

    async def requeue_failed(self, request: RequeueRequest) -> RequeueResult:
        """Failed → pending with attempts reset, audited; refuses other rows with the reason."""
        ...

    async def rewrite_payloads(
        self, rewrite: PayloadRewrite, *, lane: str | None = None, batch_size: int = 500
    ) -> PayloadRewrites:
        """Give every unsent (pending or failed) row's payload to ``rewrite`` and store what it
        returns, each write a compare-and-set on the payload as read (key rotation)."""
        ...


class Clock(Protocol):
    """Wall time for the database-free paths, monotonic time for budgets, and sleeping."""

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class Encryptor(Protocol):
    """Seals and opens payload field values (ADR 0010). The core owns the envelope format and
    which fields are sealed (:mod:`outbox_core.sealing`); the adapter owns the cipher and the keys.

    ``aad`` (associated data, :func:`outbox_core.sealing.field_aad`) binds a value to its field and
    lane: opening it under another field's or lane's ``aad`` must fail. Implementations never log,
    print or ``repr`` key material or plaintext.
    """

    @property
    def active_key_id(self) -> str:
        """The key id new values are sealed under."""
        ...

    @property
    def key_ids(self) -> frozenset[str]:
        """Every key id this encryptor can open (the active one included)."""
        ...

    def seal(self, plaintext: bytes, *, aad: bytes) -> SealedValue:
        """Encrypt and authenticate ``plaintext`` under the active key, with a fresh nonce."""
        ...

    def open(self, sealed: SealedValue, *, aad: bytes) -> bytes:
        """The plaintext of ``sealed``. Raises :class:`~outbox_core.errors.InvalidPayload` naming
        the key id when the key is not configured or the value does not authenticate (altered,
        moved to another field or lane, or sealed under another key)."""
        ...


class Ed25519(Protocol):
    """The Ed25519 signature primitive (RFC 8032) behind Standard Webhooks' asymmetric scheme
    ``v1a`` (ADR 0017). The core composes what is signed and the headers
    (:mod:`outbox_core.signing`, :mod:`outbox_core.signing_keys`); the adapter runs the curve.

    Keys are raw bytes: the 32-byte private key of RFC 8032 section 5.1.5 and the 32-byte public
    key. Implementations never log, print or ``repr`` a private key.
    """

    def public_key(self, private_key: bytes) -> bytes:
        """The 32-byte public key of a 32-byte private key."""
        ...

    def sign(self, private_key: bytes, message: bytes) -> bytes:
        """The 64-byte signature of ``message`` (pure Ed25519, deterministic)."""
        ...

    def verify(self, public_key: bytes, signature: bytes, message: bytes) -> bool:
        """Whether ``signature`` is a valid signature of ``message`` under ``public_key``; False
        (never an exception) for any signature or key that does not verify."""
        ...


class RowHandler(Protocol):
    """Turns one claimed row into an outcome. It reports; the core decides (``decide``)."""

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome: ...


class Mailer(Protocol):
    """Sends one prepared message within ``budget``; never raises for a delivery problem."""

    async def send(self, mail: OutgoingMail, *, budget: timedelta) -> Outcome: ...


class WebhookSender(Protocol):
    """POSTs one signed body within ``budget`` (an absolute deadline, not per-operation)."""

    async def send(
        self, url: str, *, headers: Mapping[str, str], body: bytes, budget: timedelta
    ) -> Outcome: ...


class Publisher(Protocol):
    """Publishes one event; ``sent`` only on the broker's positive acknowledgement."""

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome: ...


class ReceivedMessage(Protocol):
    """A broker delivery: acknowledge only once every recipient is terminal."""

    @property
    def message_id(self) -> str: ...

    @property
    def body(self) -> bytes: ...

    @property
    def subject(self) -> str:
        """The subject (NATS) or topic (Kafka) it was published to."""
        ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def deliveries(self) -> int:
        """How many times the broker has delivered it (1 the first time)."""
        ...

    async def ack(self) -> None: ...

    async def nak(self, *, delay: timedelta | None = None) -> None: ...


class Consumer(Protocol):
    """Yields broker deliveries (at least once)."""

    def messages(self) -> AsyncIterator[ReceivedMessage]: ...


class Heartbeat(Protocol):
    """Where a worker says it is alive (``outbox healthcheck`` reads it; :mod:`outbox_core.health`)."""

    async def beat(
        self, lane: str, holder: str, *, stale_after: timedelta, leading: bool | None
    ) -> None:
        """Record that ``holder`` works ``lane`` now, and how old that may get before it is stale."""
        ...

    async def stop(self, lane: str, holder: str) -> None:
        """Record that ``holder`` stopped working ``lane`` cleanly (its stop beat): from now on
        its beat is not live, however young."""
        ...


class LeaderLease(Protocol):
    """One worker per lane across replicas (ADR 0008)."""

    async def try_acquire(self, lane: str, holder: str, *, ttl: timedelta) -> LeaderTerm | None:
        """Win or renew leadership of ``lane``; ``None`` when another holder's term is live."""
        ...

    async def release(self, term: LeaderTerm) -> None:
        """Step down (graceful shutdown), so a sibling need not wait for the TTL."""
        ...
