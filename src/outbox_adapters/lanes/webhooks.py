"""The webhook lanes: the drainer's fan-out and the deliveries' attempts, as row handlers.

Two lanes of the one runtime carry a webhook (ADR 0018):

- the **drainer** (lane ``webhooks``) claims rows of the webhook outbox the host wrote in its own
  transaction; :class:`~outbox_adapters.lanes.fan_out.FanOutHandler` turns the rows the runtime
  hands it together into their events, a born-leased delivery per matching enabled endpoint and
  each row's own fenced dispatched mark, in ONE transaction for the batch (the repository's
  ``fan_out_many``), then starts the deliveries' first attempts in this process
  (:class:`~outbox_adapters.runtime.born.BornRows`). Each row's call reports
  :meth:`~outbox_core.outcomes.Outcome.recorded_by_handler`: the runtime writes no second mark.
- the **deliveries** (lane ``webhook_deliveries``): :class:`DeliveryHandler` makes one signed POST
  of one delivery, whether it is a first attempt or a retry the retry worker claimed, after its
  endpoint's rate cap admits it (:class:`~outbox_adapters.lanes.endpoint_pacing.EndpointPacers`;
  a delivery the cap defers is handed back unattempted). The core
  classifies the answer (``classify_http``) and decides (``decide``); the fenced mark records it,
  and a 410 disables the endpoint in the same transaction. Every attempt that made a request
  (delivered, transient, permanent, 410) adds its entry to the delivery's attempt log
  (:mod:`outbox_core.attempt_log`, the last 10 attempts) in the outcome's progress, which the
  same fenced mark writes: a stale mark writes nothing, so an attempt whose mark was refused is
  not in the log. A deferred delivery, a disabled endpoint, or an attempt that sent nothing (no
  secret to sign with, no time left) adds no entry.

Neither has a loop, a claim or a mark of its own: both are ``Worker``s over ``PostgresStore``s of
their tables, with these handlers and :func:`drain_lane` / :func:`delivery_lane` configs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

from outbox_adapters.lanes.endpoint_pacing import EndpointPacers
from outbox_adapters.lanes.fan_out import FanOutHandler, FanOutStore
from outbox_adapters.runtime import LaneConfig
from outbox_adapters.webhook_model import DELIVERY_LANE, WEBHOOK_LANE
from outbox_core.attempt_log import ATTEMPT_LOG_KEY, appended, attempt_entry
from outbox_core.backoff import WEBHOOK_BACKOFF, ExponentialBackoff
from outbox_core.errors import SecretUnavailable, StaleDeliveryMark
from outbox_core.messages import ClaimedRow
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import Clock, WebhookSender
from outbox_core.scrub import ScrubRules
from outbox_core.signing import webhook_headers
from outbox_core.signing_keys import SECRET_PREFIX, SIGNING_KEY_PREFIX, Signer
from outbox_core.webhook_timing import DEFAULT_FAN_OUT_TIMING, DEFAULT_WEBHOOK_TIMING

__all__ = [
    "DELIVERY_LANE",
    "RETRY_AFTER_CAP",
    "WEBHOOK_LANE",
    "DeliveryHandler",
    "FanOutHandler",
    "FanOutStore",
    "delivery_lane",
    "drain_lane",
    "redact_snippet",
]

#: The longest wait a receiver's Retry-After (429/503) can impose on a delivery.
RETRY_AFTER_CAP: Final = timedelta(hours=1)
#: A fan-out that failed (the database, not a receiver) is tried again soon, a few times.
FAN_OUT_BACKOFF: Final = ExponentialBackoff(
    base=timedelta(seconds=2), cap=timedelta(minutes=5), max_attempts=10
)
#: Webhook payloads hold no secret keys of the library's own: nothing is scrubbed by default.
NO_SCRUB: Final = ScrubRules(keys=frozenset())
_REDACTED: Final = "[redacted]"


def drain_lane(**settings: Any) -> LaneConfig:  # noqa: ANN401 - LaneConfig's own keywords
    """The drainer's :class:`LaneConfig`: lane ``webhooks``, :class:`FanOutTiming` (10 s a row,
    batch 20), a short backoff for a fan-out the database refused, and the whole claimed batch
    handed to the handler at once (``rows_in_flight`` = the batch size, grouped marks), so
    :class:`FanOutHandler` fans it out in one transaction; ``settings`` override
    (``rows_in_flight=1``: one transaction per row)."""
    timing = settings.get("timing", DEFAULT_FAN_OUT_TIMING)
    in_flight = settings.get("rows_in_flight", getattr(timing, "batch_size", 1))
    stated: dict[str, Any] = {
        "lane": WEBHOOK_LANE,
        "timing": timing,
        "backoff": FAN_OUT_BACKOFF,
        "scrub": NO_SCRUB,
        "rows_in_flight": in_flight,
        "group_marks": isinstance(in_flight, int) and in_flight > 1,
    }
    return LaneConfig(**{**stated, **settings})


def delivery_lane(**settings: Any) -> LaneConfig:  # noqa: ANN401 - LaneConfig's own keywords
    """The deliveries' :class:`LaneConfig`: lane ``webhook_deliveries``, :class:`WebhookTiming`
    (13 s an attempt, retry batch 10, retry lease 190 s), :data:`WEBHOOK_BACKOFF` and Retry-After
    honoured up to an hour; ``settings`` override."""
    stated: dict[str, Any] = {
        "lane": DELIVERY_LANE,
        "timing": DEFAULT_WEBHOOK_TIMING,
        "backoff": WEBHOOK_BACKOFF,
        "scrub": NO_SCRUB,
        "retry_after_cap": RETRY_AFTER_CAP,
        "stale_mark": StaleDeliveryMark,
    }
    return LaneConfig(**{**stated, **settings})


# --- what the handlers need of the repository (outbox_adapters.postgres.webhooks) ---------------


class _Target(Protocol):
    @property
    def endpoint_id(self) -> int: ...

    @property
    def url(self) -> str: ...

    @property
    def enabled(self) -> bool: ...

    @property
    def secrets(self) -> Sequence[Signer]: ...

    @property
    def msg_id(self) -> str: ...

    @property
    def body(self) -> bytes: ...

    @property
    def max_per_second(self) -> int | None: ...

    @property
    def attempt_log(self) -> object: ...


class TargetStore(Protocol):
    async def delivery_target(self, delivery_id: int) -> _Target | None: ...


# --- one delivery attempt -------------------------------------------------------------------------


class DeliveryHandler:
    """One signed POST of one delivery (a first attempt, or a retry the retry lane claimed)."""

    def __init__(
        self,
        repository: TargetStore,
        sender: WebhookSender,
        *,
        clock: Clock,
        on_gone: Callable[[int], None] | None = None,
        pacers: EndpointPacers | None = None,
    ) -> None:
        self._repository = repository
        self._sender = sender
        self._clock = clock
        #: Told the endpoint of a delivery that answered 410 Gone (FreshTargets.endpoint_gone).
        self._on_gone = on_gone
        #: The endpoints' rate caps: one registry per lane run, shared with the first attempts.
        self.pacers = pacers or EndpointPacers(clock)

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        started = self._clock.monotonic()
        try:
            target = await self._repository.delivery_target(int(row.id))
        except SecretUnavailable as exc:
            # A key-configuration mistake, not the receiver's: post nothing (never unsigned) and
            # retry on the schedule, so fixing the key list loses no delivery (ADR 0030).
            # The class is SECRET_UNAVAILABLE's, written out for the runbook's scan of reasons.
            return Outcome.transient(f"signing secret unavailable, nothing sent: {exc}")
        if target is None:
            return Outcome.permanent("the delivery's event or endpoint no longer exists")
        if not target.enabled:
            return Outcome.skipped("endpoint disabled; re-enable it and replay what it missed")
        # An endpoint's rate cap: wait for its start within half the budget, or hand the
        # delivery back unattempted (deferred: the attempt refunded, never a failure).
        deferred = await self.pacers.admit(
            target.endpoint_id, target.max_per_second, started + budget.total_seconds() / 2
        )
        if deferred is not None:
            return deferred
        left = budget.total_seconds() - (self._clock.monotonic() - started)
        if left <= 0:
            return Outcome.transient("no time left for the request after loading the delivery")
        # A fresh timestamp and signature on every attempt; the same webhook-id on all of them.
        at = self._clock.now()
        timestamp = int(at.timestamp())
        headers = webhook_headers(
            target.secrets, msg_id=target.msg_id, timestamp=timestamp, body=target.body
        )
        outcome = await self._sender.send(
            target.url, headers=headers, body=target.body, budget=timedelta(seconds=left)
        )
        if outcome.disable_endpoint and self._on_gone is not None:
            self._on_gone(target.endpoint_id)
        return _logged(_redacted(outcome, target.secrets, headers), target.attempt_log, at)


def _logged(outcome: Outcome, previous: object, at: datetime) -> Outcome:
    """``outcome`` with this attempt's entry added to the delivery's attempt log in its progress
    (the whole new log, for the fenced mark to write); a deferral, which sent nothing, as it is."""
    if outcome.kind is OutcomeKind.DEFERRED:
        return outcome
    progress = outcome.progress or {}
    status = progress.get("last_status")
    response = progress.get("response")
    entry = attempt_entry(
        at=at,
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        error=None if outcome.kind is OutcomeKind.SENT else outcome.reason,
        response=response if isinstance(response, str) else None,
    )
    return outcome.with_progress({**progress, ATTEMPT_LOG_KEY: appended(previous, entry)})


def _redacted(outcome: Outcome, secrets_: Sequence[Signer], headers: Mapping[str, str]) -> Outcome:
    """``outcome`` with any secret or signature removed from the response snippet it carries."""
    progress = outcome.progress
    if not progress or not isinstance(progress.get("response"), str):
        return outcome
    words = [value for value in headers.values() if value] + [_secret_text(s) for s in secrets_]
    clean = redact_snippet(progress["response"], words)
    return outcome.with_progress({**progress, "response": clean})


def _secret_text(secret: Signer) -> str:
    return secret.to_text()


def redact_snippet(text: str, words: Sequence[str]) -> str:
    """``text`` with every occurrence of ``words`` (secrets, keys, signatures; also without their
    ``whsec_``/``whsk_``/``v1,``/``v1a,`` prefixes, as a receiver may echo the bare base64)
    replaced."""
    needles: set[str] = set()
    for word in words:
        for part in re.split(r"\s+", word):
            bare = part.removeprefix(SECRET_PREFIX).removeprefix(SIGNING_KEY_PREFIX)
            bare = bare.split(",", 1)[-1]
            needles.update(p for p in (part, bare) if len(p) >= 8)
    for needle in sorted(needles, key=len, reverse=True):
        text = text.replace(needle, _REDACTED)
    return text
