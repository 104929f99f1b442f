"""How one lane is worked: :class:`LaneConfig`, checked whole at construction.

Every lane (e-mail, webhook retries, the relay, each consumer channel) is the same runtime with a
config of its own: the lane's name, its timing (any :class:`~outbox_core.timing.LaneTiming`) and
its backoff are stated by the lane, never defaulted; the rest has defaults that suit any lane.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import attrs

from outbox_core._validators import duration, seconds
from outbox_core.backoff import CLAIM_RETRY, Backoff, RetryPause
from outbox_core.decide import DEFAULT_RETRY_AFTER_CAP
from outbox_core.errors import ConfigurationError, StaleMark
from outbox_core.messages import ClaimedRow, check_lane_name
from outbox_core.scrub import ScrubRules
from outbox_core.timing import LaneTiming

__all__ = ["LEADER_RENEWALS_PER_TTL", "LaneConfig"]

#: A leader renews its term this many times per TTL, between batches and while a batch runs.
LEADER_RENEWALS_PER_TTL = 3
_OWNER = "LaneConfig."


def _lane(_inst: object, _attribute: object, value: str) -> None:
    # The producers' rule: a worker started on a lane no row can be written to (a typo'd
    # --lane) would otherwise poll an empty lane for ever without a word.
    try:
        check_lane_name(value)
    except ValueError as exc:
        raise ConfigurationError(f"LaneConfig.lane: {exc}") from None


def _timing(_inst: object, _attribute: object, value: LaneTiming) -> None:
    if not isinstance(value, LaneTiming):
        raise ConfigurationError(
            "LaneConfig.timing must be a lane timing (batch_size, per_row, batch_timeout,"
            f" mark_budget, claim_lease()), such as EmailTiming or WebhookTiming, got {value!r}"
        )


def _backoff(_inst: object, _attribute: object, value: Backoff) -> None:
    if not isinstance(value, Backoff):
        raise ConfigurationError(
            f"LaneConfig.backoff must be a backoff schedule (a delay() method), got {value!r}"
        )


def _rows_in_flight(inst: LaneConfig, _attribute: object, value: int) -> None:
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole or not 1 <= value <= inst.timing.batch_size:
        raise ConfigurationError(
            f"rows_in_flight must be between 1 and the batch size {inst.timing.batch_size},"
            f" got {value}"
        )


def _group_marks(inst: LaneConfig, _attribute: object, value: bool) -> None:  # noqa: FBT001
    if not isinstance(value, bool):
        raise ConfigurationError(f"group_marks must be True or False, got {value!r}")
    if value and inst.rows_in_flight < 2:
        raise ConfigurationError(
            "group_marks needs rows_in_flight of 2 or more (the marks of a window of rows in"
            " flight are grouped)"
        )


def _claim_ahead(_inst: object, _attribute: object, value: bool) -> None:  # noqa: FBT001
    if not isinstance(value, bool):
        raise ConfigurationError(f"claim_ahead must be True or False, got {value!r}")


def _key_of(
    inst: LaneConfig, _attribute: object, value: Callable[[ClaimedRow], str | None] | None
) -> None:
    if value is None:
        return
    if not callable(value):
        raise ConfigurationError(
            f"key_of must be a function of a claimed row (its key, or None), got {value!r}"
        )
    if not inst.group_marks:
        raise ConfigurationError(
            "key_of needs group_marks (a window's rows of one key are sent one after another)"
        )


def _leader_ttl(inst: LaneConfig, attribute: object, value: timedelta) -> None:
    duration(_OWNER)(inst, attribute, value)
    # A leader starts a row only if the row ends inside the term it can prove, and it renews
    # LEADER_RENEWALS_PER_TTL times per TTL. Right after a renewal the term has a whole TTL to run,
    # just before the next one (TTL - TTL/renewals) left: that must still hold a whole row, or a
    # leader would sit idle between renewals, and with a TTL shorter than a row it could never
    # start one at all.
    per_row = inst.timing.per_row
    needed = per_row * LEADER_RENEWALS_PER_TTL / (LEADER_RENEWALS_PER_TTL - 1)
    if value < needed:
        raise ConfigurationError(
            f"LaneConfig.leader_ttl {value.total_seconds():g}s is too short for per_row"
            f" {per_row.total_seconds():g}s: a leader renews every ttl/{LEADER_RENEWALS_PER_TTL}"
            " and starts a row only if it ends inside its term, so the TTL must be at least"
            f" {needed.total_seconds():g}s (per_row {chr(0xD7)} {LEADER_RENEWALS_PER_TTL}/"
            f"{LEADER_RENEWALS_PER_TTL - 1})"
        )


def _stale_mark(_inst: object, _attribute: object, value: object) -> None:
    if not (isinstance(value, type) and issubclass(value, StaleMark)):
        raise ConfigurationError(
            f"LaneConfig.stale_mark must be StaleMark or a subclass, got {value!r}"
        )


def _default_leader_ttl(inst: LaneConfig) -> timedelta:
    # attrs makes every default before it runs a validator: check what this default reads first.
    _timing(inst, None, inst.timing)
    # Twice a row: room for a row between renewals, and a failover of a couple of minutes at most.
    return 2 * inst.timing.per_row


@attrs.frozen
class LaneConfig:
    """How one lane is worked. Validated by its parts (the timing checks its own budget chain)."""

    #: The lane (queue) to claim from: a lane name as ``NewMessage`` takes it.
    lane: str = attrs.field(validator=_lane)
    #: Batch size, per-row budget, batch timeout, mark budget and claim lease.
    timing: LaneTiming = attrs.field(validator=_timing)
    #: When a transient failure is retried, and when the row gives up.
    backoff: Backoff = attrs.field(validator=_backoff)
    #: Payload keys removed when a row is dispatched or skipped.
    scrub: ScrubRules = attrs.Factory(ScrubRules)
    #: Seconds to sleep when a claim found less than a full batch.
    poll_interval: float = attrs.field(default=1.0, validator=seconds(_OWNER))
    #: Longest wait a peer's Retry-After can impose (0: Retry-After is never honoured).
    retry_after_cap: timedelta = attrs.field(
        default=DEFAULT_RETRY_AFTER_CAP, validator=duration(_OWNER, zero_ok=True)
    )
    #: Rows of a batch sent at the same time. 1 (the default) is the strict mode: a crash can
    #: duplicate at most the one row in flight. N widens that bound to N rows per crash.
    rows_in_flight: int = attrs.field(default=1, validator=_rows_in_flight)
    #: Record the marks of each window of ``rows_in_flight`` rows in ONE statement (opt-in). The
    #: worker sends a window, records it with one commit, and only then starts the next window,
    #: so a crash still repeats at most ``rows_in_flight`` rows; each row stays fenced on its own.
    group_marks: bool = attrs.field(default=False, validator=_group_marks)
    #: Longest a claim may take before the worker gives up on it (and pauses).
    claim_budget: timedelta = attrs.field(default=timedelta(seconds=5), validator=duration(_OWNER))
    #: The pause after a failed claim (a store outage): grows, jittered so replicas spread out.
    claim_retry: RetryPause = attrs.field(
        default=CLAIM_RETRY, validator=attrs.validators.instance_of(RetryPause)
    )
    #: Leader lease TTL when a LeaderLease is given (default: twice the per-row budget).
    leader_ttl: timedelta = attrs.field(
        default=attrs.Factory(_default_leader_ttl, takes_self=True), validator=_leader_ttl
    )

    #: How a stale mark of this lane is reported (logged once, as this error's message).
    stale_mark: type[StaleMark] = attrs.field(default=StaleMark, validator=_stale_mark)
    #: Claim the next batch while this one is sent, after a full claim (opt-in; the relay's
    #: default, ADR 0023): the claim's round trip overlaps the sends instead of following the
    #: marks. The batch claimed ahead is worked only if every row of the one before it ended
    #: terminal (``outbox_core.lease.may_work_ahead``); otherwise it is given back unsent.
    claim_ahead: bool = attrs.field(default=False, validator=_claim_ahead)
    #: With ``group_marks``: the key of a claimed row (``None``: a key of its own). A window's rows
    #: of one key are sent one after another, in claim order, by one task, and rows of different
    #: keys at the same time (opt-in; the relay's, ADR 0023: an event's partition key). Without it
    #: every row of a window has a task of its own.
    key_of: Callable[[ClaimedRow], str | None] | None = attrs.field(default=None, validator=_key_of)

    @property
    def mark_budget(self) -> timedelta:
        return self.timing.mark_budget
