"""The mutation matrix of RELIABILITY.md: each safety mechanism, its mutant, and its test.

mutmut cannot mutate SQL held in strings, so the SQL mechanisms are mutated by hand here: each
mutant replaces one named statement template in ``outbox_adapters.postgres.statements`` (the store
reads the template at call time and renders it for its queue table, so a mutant reaches every
queue table's SQL) or one function of the worker, and names the one test that must turn red.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import attrs

from outbox_adapters.brokers.nats import consumer as _nats_consumer
from outbox_adapters.feed import routes as _feed_routes
from outbox_adapters.http import guard as http_guard
from outbox_adapters.http import sender as _http_sender
from outbox_adapters.lanes import consumer as _consumer
from outbox_adapters.lanes import email as email_lane
from outbox_adapters.lanes import email_channel as _email_channel
from outbox_adapters.lanes import endpoint_pacing as _endpoint_pacing
from outbox_adapters.lanes import fresh_targets as _fresh_targets
from outbox_adapters.lanes import in_flight as _in_flight
from outbox_adapters.lanes import relay as _relay
from outbox_adapters.lanes import row_channel as _row_channel
from outbox_adapters.lanes import send_caps as _send_caps
from outbox_adapters.lanes import webhooks as _webhook_lane
from outbox_adapters.lanes import wind_down as _wind_down
from outbox_adapters.portal import app as _portal_app
from outbox_adapters.postgres import claim_forms, operator_statements, statements
from outbox_adapters.postgres import delivery_order as _delivery_order
from outbox_adapters.postgres import retention as _retention
from outbox_adapters.postgres import store as _postgres_store
from outbox_adapters.postgres.channels import feed as _feed_sql
from outbox_adapters.postgres.channels import redrive as _channel_redrive
from outbox_adapters.postgres.channels import repository as _channel_repository
from outbox_adapters.postgres.tables import outbox_message
from outbox_adapters.postgres.webhooks import FanOut as _FanOut
from outbox_adapters.postgres.webhooks import WebhookRepository as _WebhookRepository
from outbox_adapters.postgres.webhooks import event_of as _event_of
from outbox_adapters.postgres.webhooks import repository as _webhook_repository
from outbox_adapters.postgres.webhooks import secrets as _webhook_secrets
from outbox_adapters.postgres.webhooks import statements as _webhook_statements
from outbox_adapters.postgres.webhooks import tenant_statements as _tenant_statements
from outbox_adapters.runtime import Worker
from outbox_adapters.runtime import loop as _runtime_loop
from outbox_adapters.runtime import marking as worker
from outbox_adapters.runtime.batch import BatchRunner
from outbox_adapters.runtime.deadline import Deadlines, WindowDeadline
from outbox_adapters.runtime.leadership import Leadership
from outbox_adapters.runtime.marking import Marker
from outbox_adapters.smtp import mailer as smtp_mailer
from outbox_adapters.webhook_model import ordering_key_of as _ordering_key_of
from outbox_adapters.webhook_model import tenant_of as _tenant_of
from outbox_core import signing as _signing
from outbox_core.failures import FailureTally
from outbox_core.lease import BatchClock, exchange_deadline
from outbox_core.messages import Mark as _Mark
from outbox_core.outcomes import Outcome
from outbox_core.scan_floor import ScanFloor
from outbox_core.send_caps import Admission, TokenBucket
from outbox_core.signing_keys import V1, Ed25519Signer

STORE = "tests/integration/test_postgres_store.py"
WORKER = "tests/integration/test_email_worker.py"
ENCRYPTION = "tests/integration/test_encryption.py"
STALE_WRITER = "tests/chaos/test_f5_stale_writer.py"  # F5: worker subprocesses, SIGSTOP/SIGCONT
CONTRACT = "tests/contract/test_store_contract.py"
PATCH = "tests/contract/test_mark_patch_contract.py"
LEADER = "tests/integration/test_leader.py"
STEPS = "tests/integration/test_email_steps.py"


@attrs.frozen
class Mutant:
    name: str
    mechanism: str
    mutation: str
    #: The test that must turn red (pytest node id).
    test: str
    #: (module, attribute, new value)
    patch: tuple[object, str, object]


def _replace(name: str, old: str, new: str, module: Any = statements) -> tuple[object, str, object]:
    original: str = getattr(module, name)
    if old not in original:
        msg = f"mutant for statements.{name} is stale: {old!r} is not in the statement"
        raise LookupError(msg)
    mutated = original.replace(old, new)
    # What the store will run: the mutated template, rendered for a queue table as the store does.
    if statements.render(mutated, outbox_message) == statements.render(original, outbox_message):
        msg = f"mutant for statements.{name} changes nothing the store runs"
        raise LookupError(msg)
    return (module, name, mutated)


async def _attached(attempt: Callable[[], Coroutine[Any, Any, Any]], _keep: set[Any]) -> Any:
    """The mutant of run_surviving_cancel: a mark cut off by the batch's cancellation is lost."""
    return await attempt()


async def _gathered_wait(self: Marker) -> None:
    """The mutant of Marker.wait: gather, which cancels the marks when the waiter is cancelled."""
    while self.in_flight:
        await asyncio.gather(*list(self.in_flight), return_exceptions=True)


def _one_row_a_chain(_self: BatchRunner, window: Any) -> list[list[int]]:
    """The mutant of BatchRunner._chains: the lane's key_of ignored."""
    return [[index] for index in range(len(window))]


def _no_detached_group(_self: Marker, marks: Any) -> None:
    """The mutant of Marker.detach_group: a cancelled window's ended rows are not recorded."""
    del marks


def _unanswered(self: BatchClock, at: float) -> BatchClock:
    """The mutant of BatchClock.answered: the deadline stays counted from the claim's start."""
    del at
    return self


@contextlib.asynccontextmanager
async def _unrenewed(_self: Leadership) -> AsyncIterator[None]:
    """The mutant of Leadership.renewed: no renewal task beside the batch."""
    yield


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "claim-no-skip-locked",
        "FOR UPDATE SKIP LOCKED in the claim",
        "delete FOR UPDATE SKIP LOCKED",
        f"{STORE}::test_a_claim_skips_rows_a_sibling_transaction_holds_and_takes_them_after",
        _replace("CLAIM", "    FOR UPDATE SKIP LOCKED\n", ""),
    ),
    Mutant(
        "claim-for-update-blocking",
        "FOR UPDATE SKIP LOCKED in the claim",
        "keep FOR UPDATE without SKIP LOCKED",
        f"{STORE}::test_a_claim_skips_rows_a_sibling_transaction_holds_and_takes_them_after",
        _replace("CLAIM", "FOR UPDATE SKIP LOCKED", "FOR UPDATE"),
    ),
    Mutant(
        "claim-no-lease-stamp",
        "lease stamp in the claim UPDATE",
        "drop the lease stamp",
        f"{STORE}::test_two_concurrent_claimers_attempt_every_row_exactly_once",
        _replace(
            "CLAIM",
            "next_attempt_at = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,",
            "",
        ),
    ),
    Mutant(
        "mark-no-status-guard",
        "status guard on marks",
        "drop AND status = 'pending'",
        f"{STORE}::test_a_mark_on_a_resolved_row_is_stale_even_with_the_same_token",
        _replace("MARK", "  AND status = 'pending'\n", ""),
    ),
    Mutant(
        "mark-no-token-fence",
        "claim-token fence on marks",
        "drop AND claim_token = :token",
        f"{STALE_WRITER}::test_f5_a_paused_worker_s_late_failure_never_overwrites_a_sibling_s_delivery",
        _replace("MARK", "  AND claim_token = %(token)s\n", ""),
    ),
    Mutant(
        "mark-attached",
        "mark re-run after a cancellation",
        "drop the re-run: a mark cut off by the batch's cancellation is lost",
        f"{WORKER}::test_mark_survives_the_batch_being_cancelled",
        (worker, "run_surviving_cancel", _attached),
    ),
    Mutant(
        "mark-no-scrub",
        "scrub in the dispatched/skipped UPDATE",
        "drop the scrub (MARK: a success mark that also writes a patch)",
        f"{PATCH}::test_a_mark_writes_its_patch_over_the_payload_after_the_scrub[postgres-dispatched-mark_if_pending]",
        _replace(
            "MARK",
            "(payload - %(scrub_keys)s::text[])",
            "payload",
        ),
    ),
)

# The lean mark (MARK_SENT: dispatched or skipped, nothing to patch) is the statement most marks
# take: the same three mechanisms as MARK, and the stale count it leaves to COUNT_STALE.
MUTANTS += (
    Mutant(
        "mark-sent-no-status-guard",
        "status guard on lean marks",
        "drop AND status = 'pending'",
        f"{CONTRACT}::test_a_mark_on_a_resolved_row_is_stale[postgres-mark_if_pending]",
        _replace("MARK_SENT", "  AND status = 'pending'\n", ""),
    ),
    Mutant(
        "mark-sent-no-token-fence",
        "claim-token fence on lean marks",
        "drop AND claim_token = :token",
        f"{CONTRACT}::test_a_late_mark_after_a_sibling_reclaimed_the_row_is_stale[postgres-mark_if_pending]",
        _replace("MARK_SENT", "  AND claim_token = %(token)s\n", ""),
    ),
    Mutant(
        "mark-sent-no-scrub",
        "scrub in the lean dispatched/skipped UPDATE",
        "drop the scrub",
        f"{STORE}::test_dispatched_and_skipped_marks_scrub_exactly_the_secret_keys_in_the_same_update",
        _replace("MARK_SENT", "THEN payload - %(scrub_keys)s::text[]", "THEN payload"),
    ),
    Mutant(
        "mark-sent-stale-not-counted",
        "a stale lean mark counted for outbox stats",
        "COUNT_STALE matches no row",
        f"{CONTRACT}::test_stale_marks_are_counted_per_lane_for_outbox_stats[postgres-mark_if_pending]",
        _replace("COUNT_STALE", "WHERE id = %(id)s\n", "WHERE id = %(id)s AND false\n"),
    ),
)

MUTANTS += (
    Mutant(
        "rotate-no-payload-cas",
        "compare-and-set on the payload in key rotation",
        "drop the digest check from the rewrite",
        f"{ENCRYPTION}::test_rotation_never_writes_back_over_a_row_a_worker_marked_meanwhile",
        _replace(
            "REWRITE_PAYLOADS",
            "  AND sha256(convert_to(m.payload::text, 'UTF8')) = r.digest\n",
            "",
            operator_statements,
        ),
    ),
)

# The grouped mark (LaneConfig.group_marks) is a statement of its own: the same three mechanisms.
MUTANTS += (
    Mutant(
        "mark-many-no-status-guard",
        "status guard on grouped marks",
        "drop AND m.status = 'pending'",
        f"{CONTRACT}::test_a_mark_on_a_resolved_row_is_stale[postgres-mark_many]",
        _replace("MARK_MANY", "  AND m.status = 'pending'\n", ""),
    ),
    Mutant(
        "mark-many-no-token-fence",
        "claim-token fence on grouped marks",
        "drop AND m.claim_token = v.token",
        f"{CONTRACT}::test_a_late_mark_after_a_sibling_reclaimed_the_row_is_stale[postgres-mark_many]",
        _replace("MARK_MANY", "  AND m.claim_token = v.token\n", ""),
    ),
    Mutant(
        "mark-many-no-scrub",
        "scrub in the grouped dispatched/skipped UPDATE",
        "drop the scrub",
        # A group with marks of several kinds: MARK_MANY (a group of sent marks alone takes
        # MARK_SENT_MANY, below).
        f"{CONTRACT}::test_mark_many_applies_each_mark_fenced_on_its_own_and_answers_in_order[postgres]",
        _replace(
            "MARK_MANY",
            "(m.payload - %(scrub_keys)s::text[])",
            "m.payload",
        ),
    ),
)

# The lean grouped mark (MARK_SENT_MANY: a group of sent or skipped marks, nothing to patch) is the
# statement a lane's grouped marks nearly always take: the same mechanisms as MARK_MANY, and the
# stale count it leaves to COUNT_STALE_MANY.
MUTANTS += (
    Mutant(
        "mark-sent-many-no-status-guard",
        "status guard on lean grouped marks",
        "drop AND m.status = 'pending'",
        f"{CONTRACT}::test_a_mark_on_a_resolved_row_is_stale[postgres-mark_many]",
        _replace("MARK_SENT_MANY", "  AND m.status = 'pending'\n", ""),
    ),
    Mutant(
        "mark-sent-many-no-token-fence",
        "claim-token fence on lean grouped marks",
        "drop AND m.claim_token = v.token",
        f"{CONTRACT}::test_a_group_of_sent_marks_fences_each_row_and_counts_its_stale_ones[postgres]",
        _replace("MARK_SENT_MANY", "  AND m.claim_token = v.token\n", ""),
    ),
    Mutant(
        "mark-sent-many-no-scrub",
        "scrub in the lean grouped dispatched/skipped UPDATE",
        "drop the scrub",
        f"{CONTRACT}::test_dispatched_mark_scrubs_exactly_the_scrub_keys_and_keeps_the_rest[postgres-mark_many]",
        _replace("MARK_SENT_MANY", "THEN m.payload - %(scrub_keys)s::text[]", "THEN m.payload"),
    ),
    Mutant(
        "mark-sent-many-stale-not-counted",
        "a stale lean grouped mark counted for outbox stats",
        "COUNT_STALE_MANY matches no row",
        f"{CONTRACT}::test_a_group_of_sent_marks_fences_each_row_and_counts_its_stale_ones[postgres]",
        _replace(
            "COUNT_STALE_MANY",
            "WHERE id = ANY(%(ids)b::bigint[])\n",
            "WHERE id = ANY(%(ids)b::bigint[]) AND false\n",
        ),
    ),
)

# One template serves every queue table: the same mutants reach a second table's SQL, and the
# contract run over that table (``other-table``) kills them too.
MUTANTS += (
    Mutant(
        "queue-table-claim-no-lease-stamp",
        "lease stamp in the claim UPDATE, on a second queue table",
        "drop the lease stamp",
        f"{CONTRACT}::test_a_claimed_row_is_not_claimable_again_until_its_lease_ends[other-table]",
        _replace(
            "CLAIM",
            "next_attempt_at = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,",
            "",
        ),
    ),
    Mutant(
        "queue-table-mark-sent-no-token-fence",
        "claim-token fence on lean marks, on the webhook deliveries table",
        "drop AND claim_token = :token",
        f"{CONTRACT}::test_a_late_mark_after_a_sibling_reclaimed_the_row_is_stale[deliveries-mark_if_pending]",
        _replace("MARK_SENT", "  AND claim_token = %(token)s\n", ""),
    ),
    Mutant(
        "queue-table-mark-no-token-fence",
        "claim-token fence on marks, on a second queue table",
        "drop AND claim_token = :token",
        f"{CONTRACT}::test_a_late_mark_after_a_sibling_reclaimed_the_row_is_stale[other-table-mark_if_pending]",
        _replace("MARK", "  AND claim_token = %(token)s\n", ""),
    ),
    Mutant(
        "mark-retry-not-in-database-time",
        "retry due time stamped in the store's clock",
        "keep the old due time (the delay is dropped)",
        f"{CONTRACT}::test_retry_mark_sets_the_next_due_time_in_the_store_s_clock_and_ends_the_claim[postgres-mark_if_pending]",
        _replace(
            "MARK",
            "coalesce(%(now)s::timestamptz, now()) + %(retry_delay)s::interval, next_attempt_at",
            "NULL::timestamptz, next_attempt_at",
        ),
    ),
)

# The leader lease (ADR 0008): the term renewed while a batch runs. Also red without it: F6
# (tests/chaos/test_f6_leader.py, unforced losses) and tests/unit/test_leadership.py.
MUTANTS += (
    Mutant(
        "leader-no-renewal-in-batch",
        "leader term renewed while a batch runs",
        "drop the renewal task beside the batch (Leadership.renewed does nothing)",
        f"{LEADER}::test_a_worker_keeps_its_lane_through_a_batch_longer_than_the_ttl",
        (Leadership, "renewed", _unrenewed),
    ),
    # The same mechanism on the webhook lane's retry worker, judged by its leader-loss chaos test:
    # three retry workers, the receiver holding each reply so batches outlast the term (~60 s).
    Mutant(
        "webhook-retries-leader-no-renewal-in-batch",
        "the webhook retry worker's leader term renewed while a batch runs",
        "drop the renewal task beside the batch (Leadership.renewed does nothing)",
        "tests/chaos/test_f6_webhook_leader.py"
        "::test_f6_webhook_retries_leader_loss_one_poster_at_a_time_nothing_lost",
        (Leadership, "renewed", _unrenewed),
    ),
    Mutant(
        "window-cancel-drops-ended-rows",
        "a window cancelled mid-send records the rows whose send ended",
        "drop their marks (Marker.detach_group does nothing)",
        "tests/unit/test_worker.py::"
        "test_a_window_cancelled_while_one_row_hangs_records_the_rows_that_ended",
        (Marker, "detach_group", _no_detached_group),
    ),
    Mutant(
        "marks-wait-cancels-marks",
        "a stopping worker's wait leaves its detached marks running when cancelled again",
        "wait with gather (a second cancellation cancels the marks it waits for)",
        "tests/unit/test_worker.py::"
        "test_a_mark_survives_a_second_cancellation_of_a_stopping_worker",
        (Marker, "wait", _gathered_wait),
    ),
    Mutant(
        "batch-timeout-from-claim-start",
        "the batch timeout counts from the claim's answer (a batch of one can start its row)",
        "keep the deadline counted from the claim's start (BatchClock.answered returns the clock)",
        "tests/unit/test_worker.py::"
        "test_a_batch_of_one_row_starts_its_row_after_a_claim_that_took_time",
        (BatchClock, "answered", _unanswered),
    ),
)


def _suppressed_only_if_all(recipients: Any, suppressed: Any) -> Outcome | None:
    """The mutant of the per-recipient suppression check: the row fails only when EVERY
    recipient is suppressed (what the handler did before ADR 0015, sending to the others)."""
    blocked = {address.casefold() for address in suppressed}
    if recipients and all(address.casefold() in blocked for address in recipients):
        return Outcome.permanent("every recipient is suppressed")
    return None


def _constant_window(*, now: float, row_deadline: float, cap: float) -> float:
    """The mutant of the mailer's step windows: a constant 10 s (the old SmtpSettings.dial
    default) instead of the step budget it is given."""
    del cap
    return exchange_deadline(now=now, row_deadline=row_deadline, cap=10.0)


# The e-mail step chain and the per-recipient rules (ADR 0015).
MUTANTS += (
    Mutant(
        "suppression-all-not-each",
        "per-recipient suppression before any SMTP traffic",
        "fail the row only when every recipient is suppressed (all() instead of per recipient)",
        f"{STEPS}::test_one_suppressed_recipient_fails_the_row_before_any_smtp_traffic",
        (email_lane, "suppression_outcome", _suppressed_only_if_all),
    ),
    Mutant(
        "smtp-window-constant",
        "SMTP dial/exchange windows derived from the step budgets",
        "the mailer ignores the step budget and uses a constant 10 s",
        f"{STEPS}::test_the_worker_s_dial_budget_is_the_real_dial_timeout[1.5]",
        (smtp_mailer, "exchange_deadline", _constant_window),
    ),
    Mutant(
        "mark-no-progress",
        "who already has the message, recorded by the fenced mark",
        "drop the payload patch from MARK",
        f"{STEPS}::test_a_4xx_refused_recipient_is_retried_and_the_accepted_one_is_not_sent_again",
        _replace("MARK", " || %(patch)s::jsonb", ""),
    ),
)

# --- webhooks: the HTTP sender's destination guard (ADR 0016) ----------------------------------

HOSTILE_URLS = "tests/security/test_hostile_urls.py"


async def _unchecked_connect_addresses(
    self: http_guard.DestinationGuard, host: str, port: int
) -> tuple[Any, ...]:
    """The mutant of DestinationGuard.connect_addresses: resolve, but judge nothing (the guard
    bypassed at connect time; registration-time checks pass for a name that rebinds later)."""
    literal = http_guard._literal(host)
    if literal is not None:
        return (literal,)
    answers = await self._resolver(host, port)
    return tuple(http_guard._address(str(answer)) for answer in answers)


def _uncapped_slot(self: Any, url: str) -> asyncio.Semaphore:
    """The mutant of HttpxWebhookSender._slot: no cap on the requests in flight to an origin."""
    del self, url
    return asyncio.Semaphore(1_000_000)


MUTANTS += (
    Mutant(
        "guard-bypassed-at-connect",
        "destination guard at connect time (resolved addresses checked, connection pinned)",
        "connect_addresses resolves but checks nothing",
        f"{HOSTILE_URLS}::test_dns_rebinding_between_registration_and_connect_reaches_nothing",
        (http_guard.DestinationGuard, "connect_addresses", _unchecked_connect_addresses),
    ),
    Mutant(
        "sender-no-origin-cap",
        "send cap per origin (B5: at most max_per_origin requests in flight to one origin)",
        "every request takes a slot of its own (no cap)",
        "tests/integration/test_http_sender.py::test_at_most_max_per_origin_requests_are_in_flight_to_one_origin_the_rest_are_not_sent",
        (_http_sender.HttpxWebhookSender, "_slot", _uncapped_slot),
    ),
)


# --- webhooks: the PostgreSQL model (ADR 0017) ----------------------------------------------------
# The fan-out's transaction, the birth lease of the deliveries it makes, and the fenced mark on the
# deliveries table (the generic MARK template, which the deliveries' store renders too).


WEBHOOK_FAN_OUT = "tests/integration/test_webhook_fan_out.py"
WEBHOOK_FAN_OUT_BATCH = "tests/integration/test_webhook_fan_out_batch.py"
#: The repository's semantics: one contract suite for PostgreSQL and the in-memory repository.
WEBHOOK_CONTRACT = "tests/contract/test_webhook_repository_contract.py"
ATTEMPT_LOG = "tests/contract/test_attempt_log_contract.py"


def _replace_in(module: Any, name: str, old: str, new: str) -> tuple[object, str, object]:
    """A mutant of the SQL text ``module.name``: ``old`` replaced by ``new``."""
    original: str = getattr(module, name)
    if old not in original:
        msg = f"mutant for {module.__name__}.{name} is stale: {old!r} is not in it"
        raise LookupError(msg)
    return (module, name, original.replace(old, new))


def _webhook_replace(name: str, old: str, new: str) -> tuple[object, str, object]:
    return _replace_in(_webhook_statements, name, old, new)


async def _fan_out_in_two_transactions(
    self: _WebhookRepository, rows: Any, *, birth_lease: Any, birth_token: Any
) -> tuple[_FanOut, ...]:
    """The mutant of WebhookRepository.fan_out_many: the events commit in a transaction of their
    own, then the deliveries and the outbox marks in a second one (the dual write ADR 0017
    removed)."""
    fenced = [(row, *_event_of(row)) for row in rows]
    keys = {row.id: _ordering_key_of(row) for row in rows}
    tenants = {row.id: _tenant_of(row) for row in rows}
    marks = [_Mark.dispatched(row, scrub_keys=frozenset()) for row in rows]
    async with self._pool.connection() as conn:
        async with conn.transaction():
            made = await self._insert_events(conn, fenced, keys, tenants)
        async with conn.transaction():
            if not await self._mark_drained(conn, marks):
                return tuple(_FanOut(marked=False) for _row in rows)
            _ids, born = await self._born_deliveries(
                conn,
                events=[
                    (made[row.id][0], kind, None, keys[row.id], tenants[row.id])
                    for row, kind, _data in fenced
                ],
                endpoint_id=None, birth_lease=birth_lease, birth_token=birth_token,
            )  # fmt: skip
    return tuple(
        _FanOut(
            marked=True,
            event_id=made[row.id][0],
            msg_id=made[row.id][1],
            deliveries=born.get(made[row.id][0], ()),
        )
        for row in rows
    )


def _unlogged(outcome: Any, previous: object, at: Any) -> Any:
    """The mutant of the delivery handler's ``_logged``: the attempt's entry is dropped."""
    del previous, at
    return outcome


def _keeps_gone_endpoint(self: Any, endpoint_id: int) -> None:
    """The mutant of FreshTargets.endpoint_gone: the held targets of a gone endpoint stay."""
    del self, endpoint_id


def _fenced_as_a_batch(rows: Any, events: Any, drained: frozenset[int]) -> list[Any]:
    """The mutant of the per-row fence inside a batched fan-out: once any row's mark applied,
    every row of the batch gets its event, a stale one too."""
    if not drained:
        return []
    return [(row, kind, data) for row, (kind, data) in zip(rows, events, strict=True)]


MUTANTS += (
    Mutant(
        "webhook-born-lease-null",
        "born-leased delivery rows",
        "create them with a NULL due time (the legacy claim branch takes them at once)",
        f"{WEBHOOK_CONTRACT}::test_the_retry_claim_cannot_take_a_delivery_inside_its_birth_lease_and_takes_it_after[postgres]",
        _webhook_replace(
            "BORN_DELIVERIES",
            "ELSE now() + %(birth_lease)s::interval END,",
            "ELSE NULL END,",
        ),
    ),
    Mutant(
        "webhook-born-lease-now",
        "born-leased delivery rows",
        "create them due now (no birth lease)",
        f"{WEBHOOK_CONTRACT}::test_the_retry_claim_cannot_take_a_delivery_inside_its_birth_lease_and_takes_it_after[postgres]",
        _webhook_replace(
            "BORN_DELIVERIES",
            "ELSE now() + %(birth_lease)s::interval END,",
            "ELSE now() END,",
        ),
    ),
    Mutant(
        "webhook-fan-out-two-transactions",
        "atomic fan-out",
        "split it into two transactions (the event commits first)",
        f"{WEBHOOK_FAN_OUT}::test_a_failure_between_the_fan_out_statements_leaves_nothing_and_a_re_drain_makes_one_event",
        (_WebhookRepository, "fan_out_many", _fan_out_in_two_transactions),
    ),
    Mutant(
        "fresh-targets-keep-a-gone-endpoint",
        "a 410 drops the fan-out round's reads of its endpoint (first attempts re-read it)",
        "FreshTargets.endpoint_gone drops nothing: later first attempts POST on the old read",
        f"{WEBHOOK_FAN_OUT_BATCH}::test_after_a_410_the_first_attempts_still_to_come_skip_the_endpoint_not_post_on_an_old_read",
        (_fresh_targets.FreshTargets, "endpoint_gone", _keeps_gone_endpoint),
    ),
    Mutant(
        "webhook-attempt-not-logged",
        "each attempt's entry in the delivery's attempt log, written by its fenced mark",
        "the delivery handler drops the attempt's entry (the outcome's progress without the log)",
        f"{ATTEMPT_LOG}::test_a_delivery_retried_twice_then_delivered_logs_its_three_attempts[postgres]",
        (_webhook_lane, "_logged", _unlogged),
    ),
    Mutant(
        "webhook-fan-out-batch-no-row-fence",
        "per-row fence inside a batched fan-out",
        "fan every row of the batch out once any row's fenced mark applied",
        f"{WEBHOOK_FAN_OUT_BATCH}::test_a_stale_row_in_a_batch_is_dropped_and_the_others_fan_out_in_the_same_transaction",
        (_webhook_repository, "_fenced", _fenced_as_a_batch),
    ),
    Mutant(
        "webhook-delivery-mark-no-token-fence",
        "claim-token fence on delivery marks",
        "drop AND claim_token = :token (MARK, as the deliveries' store renders it)",
        f"{WEBHOOK_CONTRACT}::test_the_first_attempt_s_late_mark_after_the_retry_worker_reclaimed_the_delivery_is_stale[postgres-mark_if_pending]",
        _replace("MARK", "  AND claim_token = %(token)s\n", ""),
    ),
)

# --- events: the event outbox's per-key claim order and the relay (ADR 0020) ---------------------
# The per-key claim is derived at render time from the one CLAIM template
# (claim_forms.per_key_order), so the CLAIM mutants above reach the event outbox too; these
# mutants drop its own guards. The relay's ack: the handler's publish_acknowledged.

EVENT_CLAIM = "tests/integration/test_event_claim_order.py"
EVENT_RELAY = "tests/integration/test_event_relay.py"
RELAY_WINDOW = "tests/integration/test_relay_window_order.py"


def _no_key_order(claim: str, key: str) -> str:
    """The mutant of claim_forms.per_key_order: the claim in id order, with no per-key guard."""
    del key
    return claim.replace("    ORDER BY next_attempt_at, id\n", "    ORDER BY id\n")


async def _publish_not_awaited(publisher: Any, message: Any, budget: Any) -> Outcome:
    """The mutant of relay.publish_acknowledged: the publish is fired off and ``sent`` answered at
    once, without waiting for (or looking at) the broker's acknowledgement."""
    task = asyncio.ensure_future(publisher.publish(message, budget=budget))
    _FIRED.add(task)
    task.add_done_callback(_FIRED.discard)
    return Outcome.sent()


_FIRED: set[Any] = set()


def _any_turn(batch: Any, key: str) -> asyncio.Lock:
    """The mutant of relay.key_turn: a fresh lock each time, so a key's rows do not wait for each
    other (a later event goes out while the earlier one is unacknowledged)."""
    del batch, key
    return asyncio.Lock()


def _never_held_back(batch: Any, key: str) -> bool:
    """The mutant of relay.held_back: a key whose earlier row failed in the batch publishes its
    later rows anyway."""
    del batch, key
    return False


_PER_KEY_ORDER = claim_forms.per_key_order


#: The per-key claim's first guard as a probe of the key-order index per candidate (also the other
#: side of bench/blocked_keys.py's comparison).
BLOCKED_PROBED_PER_CANDIDATE = """      AND NOT EXISTS (
          SELECT FROM {queue} AS earlier
          WHERE earlier.lane = {queue}.lane
            AND earlier.{key} = {queue}.{key}
            AND earlier.status = 'pending'
            AND earlier.id < {queue}.id
            AND earlier.next_attempt_at > coalesce(%(now)s::timestamptz, now())
            AND (earlier.claim_token IS NULL
                 OR earlier.claim_token IS DISTINCT FROM %(ahead_of)s::text)
      )
"""


def _ahead_of_anyone(claim: str, key: str) -> str:
    """The mutant of claim_forms.per_key_order: a claim made ahead lets EVERY leased row stop
    holding its key back, not only the rows of the batch it names."""
    return _PER_KEY_ORDER(claim, key).replace(
        "earlier.claim_token IS DISTINCT FROM %(ahead_of)s::text", "%(ahead_of)s::text IS NULL"
    )


def _always_work_ahead(*, claimed: int, terminal: int, timed_out: bool) -> bool:
    """The mutant of the runtime's may_work_ahead: a batch claimed ahead is sent whatever became
    of the batch before it."""
    del claimed, terminal, timed_out
    return True


CLAIM_AHEAD = "tests/unit/test_claim_ahead.py"

MUTANTS += (
    Mutant(
        "event-claim-ahead-of-anyone",
        "a claim ahead passes only the rows still leased by the batch it names",
        "let a claim ahead pass the rows leased by any claim",
        f"{EVENT_CLAIM}::test_a_claim_ahead_takes_the_rows_that_follow_its_own_batch_and_no_one_elses",
        (claim_forms, "per_key_order", _ahead_of_anyone),
    ),
    Mutant(
        "claim-ahead-past-a-retry",
        "a batch claimed ahead is sent only after every row of the batch before it ended terminal",
        "send the batch claimed ahead even when a row before it was retried",
        f"{CLAIM_AHEAD}::test_a_batch_claimed_ahead_of_a_retry_is_given_back_unsent",
        (_runtime_loop, "may_work_ahead", _always_work_ahead),
    ),
    Mutant(
        "event-claim-no-key-order",
        "per-key order in the event outbox's claim",
        "drop the per-key predicate (claim in id order only)",
        f"{EVENT_CLAIM}::test_a_key_s_later_row_waits_while_its_earlier_row_waits_for_a_retry",
        (claim_forms, "per_key_order", _no_key_order),
    ),
    Mutant(
        "event-claim-key-order-blocked-rows-take-slots",
        "per-key order: a blocked key's later rows are no candidates",
        "drop the due-level guard (the later rows fill the batch, then the second guard drops them)",
        f"{EVENT_CLAIM}::test_a_blocked_key_does_not_freeze_the_other_keys",
        (claim_forms, "_KEY_NOT_BLOCKED", ""),
    ),
    Mutant(
        "event-claim-blocked-keys-probed-per-candidate",
        "the per-key claim reads the blocked keys once a claim, not once a candidate",
        "check each candidate's earlier rows in the key-order index (a claim walks every due row"
        " of the blocked keys, each with its probe)",
        f"{EVENT_CLAIM}::test_the_claim_reads_the_blocked_keys_once_not_once_a_candidate",
        (claim_forms, "_KEY_NOT_BLOCKED", BLOCKED_PROBED_PER_CANDIDATE),
    ),
    Mutant(
        "event-claim-key-order-ignores-locked-earlier-row",
        "per-key order: every earlier pending row of the key is in this claim",
        "drop the UPDATE-level guard (an earlier row held by a concurrent claim is not seen)",
        f"{EVENT_CLAIM}::test_an_earlier_row_held_by_a_concurrent_transaction_keeps_its_later_rows",
        (claim_forms, "_KEY_ALL_EARLIER_CLAIMED", ""),
    ),
    Mutant(
        "event-claim-key-guard-joins-the-backlog",
        "the per-key claim's cost follows its batch, not the pending backlog",
        "drop the fence that keeps the UPDATE-level guard a per-candidate index probe (PostgreSQL"
        " then hash-joins every pending row of the table into each claim)",
        f"{EVENT_CLAIM}::test_the_claim_checks_each_candidate_s_earlier_rows_in_the_key_index",
        (
            claim_forms,
            "_KEY_ALL_EARLIER_CLAIMED",
            claim_forms._KEY_ALL_EARLIER_CLAIMED.replace(claim_forms.PROBE_EACH_CANDIDATE, ""),
        ),
    ),
    Mutant(
        "relay-mark-before-ack",
        "published_at only after the broker's positive acknowledgement",
        "publish without waiting for the ack and answer sent (the mark is written whatever the broker says)",
        f"{EVENT_RELAY}::test_published_at_is_set_only_after_the_broker_acknowledged",
        (_relay, "publish_acknowledged", _publish_not_awaited),
    ),
    Mutant(
        "relay-key-not-awaited",
        "per-key order in a relay window: a key's next event only after the earlier one's ack",
        "no per-key turn (every row of the window on the wire at once)",
        f"{RELAY_WINDOW}::test_a_key_s_later_event_is_not_published_before_the_earlier_one_s_late_puback[handler-turns]",
        (_relay, "key_turn", _any_turn),
    ),
    Mutant(
        "relay-past-a-failed-event",
        "per-key order in a relay window: a failed event holds its key's later events back",
        "publish a key's later rows after its earlier row failed in the batch",
        f"{RELAY_WINDOW}::test_an_unacknowledged_event_holds_its_key_s_later_events_back_for_the_retry[chained]",
        (_relay, "held_back", _never_held_back),
    ),
    Mutant(
        "window-key-chain-ignored",
        "a window's rows of one key (LaneConfig.key_of) sent one after another, in claim order",
        "every row of the window a chain of its own (all started at once)",
        "tests/unit/test_window_chains.py::"
        "test_a_key_s_rows_are_never_in_flight_together_and_keep_claim_order",
        (BatchRunner, "_chains", _one_row_a_chain),
    ),
)

# --- consumer channels (ADR 0021) -----------------------------------------------------------------

EMAIL_CHANNEL = "tests/integration/test_email_channel.py"
CONSUMER_BOUNDS = "tests/unit/test_consumer_bounds.py"
BROKER_FUZZ = "tests/chaos/test_p7_broker_fuzz.py"


def _ack_always(settlement: Any) -> bool:
    """The mutant of consumer.should_ack: acknowledge whatever the recipients' state."""
    del settlement
    return True


def _cancellation_ignored(exc: BaseException) -> None:
    """The mutant of the NATS consumer's ``_raise_if_cancelled``: a cancelled fetch that nats-py
    answered with an error of its own is taken for an empty or failed fetch."""
    del exc


async def _waited_without_bound(future: Any, seconds: float) -> bool:
    """The mutant of ``wind_down.ended_within``: a stop waits for the broker consumer's cancelled
    fetch, and for its close, however long they take."""
    del seconds
    with contextlib.suppress(BaseException):
        await future
    return True


def _never_exhausted(self: Any, message_id: str) -> bool:
    """The mutant of FailureTally.failed: no bound on failed handlings."""
    del self, message_id
    return False


async def _unguarded_attempt(self: Any, message: Any) -> tuple[Any, str]:
    """The mutant of ChannelConsumer._attempt: no per-message guard (a step's error escapes)."""
    return await self._settle(message), ""


def _unsealed_email_message(**parts: Any) -> Any:
    """The mutant of the e-mail channel's ``email_message``: the application's keys dropped."""
    return email_lane.email_message(**{**parts, "encryptor": None})


def _key_without_kind(event_id: str, kind: str) -> str:
    """The mutant of row_channel.recipient_key: the event id alone."""
    del kind
    return event_id


MUTANTS += (
    Mutant(
        "consumer-ack-before-terminal",
        "ack only when every recipient is terminal",
        "ack before the recipients are terminal (should_ack returns True)",
        f"{EMAIL_CHANNEL}::test_the_broker_message_is_acked_only_when_every_recipient_is_terminal",
        (_consumer, "should_ack", _ack_always),
    ),
    Mutant(
        "channel-rows-unsealed",
        "the e-mail channel seals its rows' secret fields with the application's keys",
        "the channel writes its e-mail rows without the encryptor",
        "tests/security/test_channel_rows_sealed.py"
        "::test_the_e_mail_channel_seals_its_rows_secret_fields",
        (_email_channel, "email_message", _unsealed_email_message),
    ),
    Mutant(
        "redrive-rows-not-rearmed",
        "a redriven event's failed recipient rows go back to pending (dlq redrive sends them)",
        "the re-arm drops the lifted parks but leaves the rows failed",
        "tests/integration/test_dlq_redrive.py::test_a_redrive_sends_the_parked_e_mail_once",
        _replace_in(
            _channel_redrive, "REARM_REDRIVEN", "SET status = 'pending'", "SET status = 'failed'"
        ),
    ),
    Mutant(
        "channel-rows-not-stamped",
        "each recipient row keeps the context of its own PRODUCER span (the one-statement write)",
        "the write stores no trace context: the rows' deliveries link to nothing",
        "tests/contract/test_channel_rows_contract.py"
        "::test_each_row_carries_its_own_producer_span_under_the_delivery[postgres]",
        _replace_in(_channel_repository, "_WRITE", "           m.trace_context", "           NULL"),
    ),
    Mutant(
        "nats-consumer-swallows-cancellation",
        "a NATS consumer stops when its task is cancelled, whatever nats-py answers the fetch",
        "a fetch cancelled on a closed connection (ConnectionClosedError) is retried: the"
        " channel's stop waits for ever",
        "tests/unit/test_nats_consumer_cancel.py::"
        "test_a_cancelled_fetch_ends_the_messages_whatever_nats_py_answers[connection-closed]",
        (_nats_consumer, "_raise_if_cancelled", _cancellation_ignored),
    ),
    Mutant(
        "consumer-stop-waits-for-the-fetch",
        "a channel's stop ends within its grace when the broker consumer ignores its cancel",
        "the stop waits for the cancelled fetch and the close without a bound: a broker consumer"
        " that takes the cancel for a failed fetch holds the host's shutdown for ever",
        "tests/unit/test_consumer_stop_grace.py::"
        "test_a_stop_ends_within_the_grace_when_the_broker_consumer_ignores_it[fetch-ignores-cancel]",
        (_wind_down, "ended_within", _waited_without_bound),
    ),
    Mutant(
        "consumer-no-failure-bound",
        "a message whose handling keeps failing is parked at the bound (max_failures)",
        "FailureTally.failed never says the bound is reached: the message is retried without end",
        f"{CONSUMER_BOUNDS}::test_a_failing_step_is_parked_at_the_bound_and_acknowledged",
        (FailureTally, "failed", _never_exhausted),
    ),
    Mutant(
        "consumer-no-per-message-guard",
        "no message ends the consumer (the per-message guard)",
        "drop the guard around one message's handling: a step's error escapes the consumer",
        f"{BROKER_FUZZ}::test_p7_memory_broker_fuzz",
        (_consumer.ChannelConsumer, "_attempt", _unguarded_attempt),
    ),
    Mutant(
        "consumer-dedup-key-without-kind",
        "per-recipient dedup key (event_id, kind)",
        "dedup key without kind (the event id alone)",
        f"{EMAIL_CHANNEL}::test_an_event_delivered_three_times_sends_one_email_per_recipient_kind",
        (_row_channel, "recipient_key", _key_without_kind),
    ),
)

# --- the in-app feed (ADR 0022): the scope of every query comes from the principal alone ----------

FEED = "tests/integration/test_feed.py"


async def _scope_from_query(authenticate: Any, connection: Any) -> Any:
    """The mutant of principal_scope (as the routes use it): a ``?tenant_id=`` overrides the
    principal's tenant."""
    answer = authenticate(connection)
    principal = await answer if asyncio.iscoroutine(answer) else answer
    if principal is None:
        return None
    asked = connection.query_params.get("tenant_id")
    return _feed_sql.Scope.tenant(asked) if asked else principal.scope


MUTANTS += (
    Mutant(
        "feed-scope-no-tenant-filter",
        "the tenant predicate of the feed's queries (list, count, mark one, mark all)",
        "drop AND tenant_id = :tenant (every tenant's rows in scope)",
        f"{FEED}::test_marking_another_tenant_s_notification_is_a_404_and_leaves_it_unread",
        _replace_in(_feed_sql, "TENANT_SCOPE", " AND tenant_id = %(tenant_id)s", ""),
    ),
    Mutant(
        "feed-scope-from-query",
        "the scope comes from the authenticated principal only",
        "let ?tenant_id= override the principal's tenant",
        f"{FEED}::test_a_spoofed_tenant_id_or_audience_changes_nothing[&tenant_id=globex]",
        (_feed_routes, "principal_scope", _scope_from_query),
    ),
)

PORTAL = "tests/integration/test_portal.py"


async def _portal_tenant_from_query(self: Any, request: Any) -> str | None:
    """The mutant of EndpointPortal._tenant: a ``?tenant=`` overrides the host's tenant."""
    asked = request.query_params.get("tenant")
    return asked or await _PORTAL_TENANT(self, request)


_PORTAL_TENANT = _portal_app.EndpointPortal._tenant


def _portal_unguarded(app: Any, **_settings: Any) -> Any:
    """The mutant of the portal's BrowserGuard: the routes served bare."""
    return app


MUTANTS += (
    Mutant(
        "portal-tenant-from-query",
        "the portal's tenant comes from the host's tenant_of only",
        "let ?tenant= override the host's tenant",
        f"{PORTAL}::test_the_tenant_never_comes_from_the_request",
        (_portal_app.EndpointPortal, "_tenant", _portal_tenant_from_query),
    ),
    Mutant(
        "portal-unguarded",
        "the portal is behind BrowserGuard (cross-site changes refused, no framing)",
        "serve the routes without the guard",
        f"{PORTAL}::test_a_cross_site_change_is_refused_and_changes_nothing[headers0]",
        (_portal_app, "BrowserGuard", _portal_unguarded),
    ),
)

PRUNE = "tests/integration/test_prune.py"
PRUNE_DEPENDANTS = "tests/integration/test_prune_dependants.py"
HEALTH = "tests/integration/test_healthcheck.py"


async def _no_beat(_self: Any, _leading: bool) -> None:
    """The mutant of Worker._beat: the loop never writes its heartbeat."""


MUTANTS += (
    Mutant(
        "prune-unsent-rows",
        "retention deletes only rows that were sent (dispatched or skipped)",
        "drop the status test: pending and failed rows older than the cut-off are deleted too",
        f"{PRUNE}::test_prune_removes_what_was_sent_long_ago_and_keeps_everything_else",
        _replace_in(_retention, "PRUNE_QUEUE", "AND q.status IN ('dispatched', 'skipped')", ""),
    ),
    Mutant(
        "prune-waits-for-held-rows",
        "a prune batch skips a row someone holds instead of waiting for it",
        "FOR UPDATE SKIP LOCKED -> FOR UPDATE",
        f"{PRUNE}::test_a_held_row_is_skipped_not_waited_for",
        _replace_in(_retention, "PRUNE_QUEUE", "FOR UPDATE SKIP LOCKED", "FOR UPDATE"),
    ),
    Mutant(
        "prune-deliveries-drop-newest-success",
        "a prune keeps each endpoint's newest successful delivery (the health sweep reads it)",
        "deliveries pruned without the keep condition: every old success goes",
        f"{PRUNE_DEPENDANTS}"
        "::test_pruned_deliveries_keep_each_endpoint_s_newest_success_for_the_health_sweep",
        (
            _retention,
            "PRUNABLE",
            {
                **_retention.PRUNABLE,
                "deliveries": attrs.evolve(_retention.PRUNABLE["deliveries"], keep=""),
            },
        ),
    ),
    Mutant(
        "prune-dedup-records-under-retention",
        "sent e-mails (the e-mail channel's dedup record) are not pruned under the broker's"
        " retention",
        "messages lose their floor: --only messages --older-than 1d deletes them",
        f"{PRUNE_DEPENDANTS}"
        "::test_a_prune_under_the_broker_s_retention_keeps_the_channel_s_dedup_rows",
        (
            _retention,
            "PRUNABLE",
            {
                **_retention.PRUNABLE,
                "messages": attrs.evolve(_retention.PRUNABLE["messages"], needed_by=None),
            },
        ),
    ),
    Mutant(
        "heartbeat-not-written",
        "the worker's loop writes its heartbeat (outbox healthcheck reads it)",
        "Worker._beat does nothing",
        f"{HEALTH}::test_a_live_leading_worker_is_healthy_and_a_stopped_or_silent_one_is_not",
        (Worker, "_beat", _no_beat),
    ),
)

DEADLINE = "tests/unit/test_deadline.py"


def _fires_for_any_scope(self: Deadlines) -> None:
    """The mutant of Deadlines._fire: the reused timer cuts whatever scope is open when it fires,
    even one whose own deadline is later (no re-arm)."""
    self._handle, self._armed_at = None, math.inf
    task = self._task
    if self._when is None or task is None or self._expired:
        return
    self._expired = True
    task.cancel()


def _window_cuts_nothing(self: WindowDeadline) -> None:
    """The mutant of WindowDeadline._fire: the window's deadline passes and its sends run on."""
    self._expired = True


MUTANTS += (
    Mutant(
        "window-deadline-cuts-nothing",
        "a window's sends are cut at the window's deadline, on its one timer",
        "WindowDeadline._fire cancels no send",
        f"{DEADLINE}::test_a_window_cuts_every_send_still_running_at_its_deadline_and_only_those",
        (WindowDeadline, "_fire", _window_cuts_nothing),
    ),
    Mutant(
        "deadline-fires-early",
        "the reused time limit re-arms for the open scope's own deadline (ADR 0012)",
        "Deadlines._fire cuts the open scope at an earlier scope's deadline",
        f"{DEADLINE}::test_a_later_scope_is_not_cut_at_an_earlier_scope_s_deadline",
        (Deadlines, "_fire", _fires_for_any_scope),
    ),
)

# --- webhook signing secrets at rest (ADR 0030) ---------------------------------------------------

WEBHOOK_SECRETS = "tests/integration/test_webhook_secrets.py"

MUTANTS += (
    Mutant(
        "webhook-secret-reseal-no-cas",
        "compare-and-set of a sealing pass's write (RESEAL_SECRET)",
        "drop AND secret = %(old)s: a pass with an older key list writes over a newer re-seal",
        f"{WEBHOOK_SECRETS}::test_a_sealing_pass_never_writes_over_a_secret_changed_meanwhile",
        _replace_in(_webhook_secrets, "RESEAL_SECRET", " AND secret = %(old)s", ""),
    ),
    Mutant(
        "webhook-health-counts-our-key-failures",
        "endpoint health leaves out attempts our keys could not sign (UNHEALTHY_ENDPOINTS)",
        "drop AND d.last_error NOT LIKE %(not_theirs)s: a key mistake disables the endpoint",
        f"{WEBHOOK_SECRETS}::test_endpoint_health_does_not_count_attempts_our_keys_could_not_sign",
        _webhook_replace(
            "UNHEALTHY_ENDPOINTS", "AND d.last_error NOT LIKE %(not_theirs)s", "AND true"
        ),
    ),
)


def _untold(_endpoint: Any, _notice: Any) -> None:
    """The mutant of the store's owner_message: a 410 disable builds no notice."""


DRAINER_CLAIM = "tests/integration/test_webhook_drainer_claim.py"

MUTANTS += (
    Mutant(
        "drainer-claim-no-lease-stamp",
        "lease stamp in the webhook-outbox drainer's claim",
        "drop the lease stamp from CLAIM (as the drainer runs it on outbox_webhook)",
        f"{DRAINER_CLAIM}::test_two_drainers_claiming_at_once_take_every_webhook_outbox_row_exactly_once",
        _replace(
            "CLAIM",
            "next_attempt_at = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,",
            "",
        ),
    ),
    Mutant(
        "drainer-claim-no-skip-locked",
        "FOR UPDATE SKIP LOCKED in the webhook-outbox drainer's claim",
        "keep FOR UPDATE without SKIP LOCKED",
        f"{DRAINER_CLAIM}::test_the_drainer_s_claim_passes_over_rows_a_sibling_holds_and_takes_them_after",
        _replace("CLAIM", "FOR UPDATE SKIP LOCKED", "FOR UPDATE"),
    ),
    Mutant(
        "gone-disable-untold",
        "a 410 disable tells the endpoint's owner, in the mark's transaction",
        "the deliveries store disables the endpoint and enqueues no notice",
        f"{WEBHOOK_CONTRACT}::test_a_410_disable_tells_the_endpoint_s_owner_once_in_the_mark_s_step[postgres-mark_if_pending]",
        (_postgres_store, "owner_message", _untold),
    ),
)


async def _unordered_run(self: Any, before: Any, work: Any) -> None:
    """The mutant of InFlight._run: a delivery does not wait for the one of its key before it."""
    del before
    try:
        await work
    finally:
        self._free.release()


IN_FLIGHT = "tests/unit/test_consumer_in_flight.py"

MUTANTS += (
    Mutant(
        "consumer-in-flight-unordered-key",
        "a consumer's deliveries of one event key one after the other, in arrival order",
        "InFlight runs a delivery without waiting for its key's earlier one",
        f"{IN_FLIGHT}::test_at_most_in_flight_at_once_and_one_key_s_events_one_after_the_other_in_order[4]",
        (_in_flight.InFlight, "_run", _unordered_run),
    ),
)


# --- send caps: per recipient domain and per lane rate (outbox_core.send_caps) -------------------

SEND_CAPS = "tests/unit/test_capped_sends.py"
_original_admit = TokenBucket.admit


def _one_domain_for_all(recipients: Any) -> tuple[str, ...]:
    """The mutant of recipient_domains: every send takes the same slot, whatever its domains."""
    del recipients
    return ("*",)


def _never_released(self: Any, domains: Any) -> None:
    """The mutant of DomainSlots.release: a slot once taken is never given back."""
    del self, domains


def _admits_at_once(self: Any, now: float, *, latest: float = math.inf) -> Admission:
    """The mutant of TokenBucket.admit: every send may start at once (no rate)."""
    del self, latest
    return Admission(now, admitted=True)


def _admits_past_latest(self: Any, now: float, *, latest: float = math.inf) -> Admission:
    """The mutant of TokenBucket.admit: a start after the row's deadline is reserved anyway."""
    del latest
    return _original_admit(self, now, latest=math.inf)


MUTANTS += (
    Mutant(
        "domain-cap-ignores-domain",
        "send cap per recipient domain (slots keyed by the recipients' domains)",
        "recipient_domains gives one key for every message: one domain's cap holds all domains",
        "tests/integration/test_send_caps.py::test_no_more_than_n_sends_in_flight_to_one_domain_while_others_proceed",
        (_send_caps, "recipient_domains", _one_domain_for_all),
    ),
    Mutant(
        "domain-cap-never-released",
        "send cap per recipient domain (a slot is given back when its send ends)",
        "DomainSlots.release gives nothing back: a domain stops after N sends",
        f"{SEND_CAPS}::test_domain_slots_given_back_let_the_next_send_in",
        (_send_caps.DomainSlots, "release", _never_released),
    ),
    Mutant(
        "rate-cap-never-waits",
        "send rate cap per lane (token bucket: a send starts no sooner than its slot)",
        "TokenBucket.admit lets every send start at once",
        f"{SEND_CAPS}::test_the_rate_cap_spaces_sends_by_its_interval_and_the_wait_spends_the_budget",
        (TokenBucket, "admit", _admits_at_once),
    ),
    Mutant(
        "rate-cap-waits-past-deadline",
        "send rate cap per lane (a slot after the row's deadline is refused, nothing reserved)",
        "TokenBucket.admit ignores latest: the send waits past its row's deadline",
        f"{SEND_CAPS}::test_a_send_whose_slot_comes_after_its_deadline_is_not_started",
        (TokenBucket, "admit", _admits_past_latest),
    ),
)

# --- each webhook endpoint's rate cap (ADR 0018) ---------------------------------------------------

RATE_CAP = "tests/integration/test_webhook_rate_cap.py"
_CAP_TEST = f"{RATE_CAP}::test_a_capped_endpoint_gets_at_most_its_cap_a_second_and_an_uncapped_one_is_not_slowed"


async def _ignores_the_cap(self: Any, endpoint_id: int, cap: int | None, deadline: float) -> None:
    """The mutant of EndpointPacers.admit: every delivery starts at once, whatever its cap."""
    del self, endpoint_id, cap, deadline


def _deferral_spends_the_attempt(reason: str, *, retry_after: Any = None) -> Outcome:
    """The mutant of Outcome.deferred: a deferral is a transient failure (it spends an attempt,
    rides the schedule, and can end ``failed``)."""
    return Outcome.transient(reason, retry_after=retry_after)


MUTANTS += (
    Mutant(
        "endpoint-cap-ignored",
        "an endpoint's rate cap (deliveries to it start at most max_per_second a second)",
        "EndpointPacers.admit ignores the endpoint's cap: every delivery starts at once",
        _CAP_TEST,
        (_endpoint_pacing.EndpointPacers, "admit", _ignores_the_cap),
    ),
    Mutant(
        "endpoint-cap-deferral-spends-attempt",
        "an endpoint's rate cap (a delivery it holds back is not attempted: attempt refunded)",
        "Outcome.deferred reports a transient failure: the held-back delivery spends an attempt",
        _CAP_TEST,
        (Outcome, "deferred", staticmethod(_deferral_spends_the_attempt)),
    ),
)

# --- Standard Webhooks v1a: Ed25519 signatures (ADR 0017) ----------------------------------------

WEBHOOK_V1A = "tests/integration/test_webhook_v1a.py"
SIGNING_V1A = "tests/unit/test_signing_v1a.py"


def _signs_the_body_only(self: Ed25519Signer, content: bytes) -> bytes:
    """The mutant of Ed25519Signer.signature: the id and the timestamp are left out of what is
    signed, so a captured request replays under any id and timestamp."""
    return self.ed25519.sign(self.key.private, content.split(b".", 2)[2])


MUTANTS += (
    Mutant(
        "webhook-v1a-signs-body-only",
        "v1a signs {msg_id}.{timestamp}.{body} (Ed25519Signer.signature)",
        "sign the body alone: the id and the attempt's timestamp are not covered",
        f"{WEBHOOK_V1A}::test_a_v1a_endpoint_delivers_verifiable_with_its_public_key_through_a_rotation",
        (Ed25519Signer, "signature", _signs_the_body_only),
    ),
    Mutant(
        "webhook-v1a-malformed-entry-skipped",
        "verify refuses a malformed v1a entry (signing._FORMS)",
        "drop the v1a form: a malformed v1a entry is skipped beside a valid signature",
        f"{SIGNING_V1A}::test_a_malformed_v1a_entry_refuses_the_header_even_beside_a_valid_one[v1a,AAAA]",
        (_signing, "_FORMS", {V1: _signing._FORMS[V1]}),
    ),
)

# --- webhook deliveries' per-(endpoint, key) order (ADR 0018) -------------------------------------
# The keyed guard is added at render time to the one CLAIM template (delivery_order); this mutant
# drops it, so the deliveries table is claimed as every other queue table.

WEBHOOK_ORDERING = "tests/contract/test_webhook_ordering_contract.py"

MUTANTS += (
    Mutant(
        "webhook-delivery-claim-no-key-order",
        "per-(endpoint, key) order in the webhook deliveries' claim",
        "drop the keyed guard (a later delivery of a key is claimed while an earlier one is pending)",
        f"{WEBHOOK_ORDERING}::test_a_later_delivery_of_a_key_waits_until_the_earlier_one_is_delivered_or_terminal[postgres]",
        (_delivery_order, "EARLIER_DELIVERY_PENDING", ""),
    ),
    Mutant(
        "webhook-born-keyed-delivery-does-not-wait",
        "a keyed delivery behind a pending one of its (endpoint, key) is born waiting",
        "born leased to a first attempt whatever is pending before it (BORN_DELIVERIES)",
        f"{WEBHOOK_ORDERING}::test_a_delivery_is_born_waiting_behind_a_pending_one_of_an_earlier_fan_out[postgres]",
        _webhook_replace(
            "BORN_DELIVERIES",
            "CASE WHEN v.ordering_key IS NULL THEN false",
            "CASE WHEN true THEN false",
        ),
    ),
)


# --- webhook tenants and subscriptions (ADR 0017) --------------------------------------------------

WEBHOOK_TENANCY = "tests/contract/test_webhook_tenancy_contract.py"

MUTANTS += (
    Mutant(
        "webhook-fan-out-no-tenant",
        "an event fans out to its own tenant's endpoints only (BORN_DELIVERIES)",
        "drop the tenant predicate: every tenant's endpoints subscribed to the type get the event",
        f"{WEBHOOK_TENANCY}::test_an_event_fans_out_to_its_own_tenants_endpoints_only[postgres]",
        _webhook_replace("BORN_DELIVERIES", "ON e.tenant = v.tenant", "ON true"),
    ),
    Mutant(
        "webhook-wildcard-exact-only",
        "a wildcard subscription (invoice.*) takes the types under its prefix (subscribed)",
        "drop the wildcard branch: invoice.* matches only the literal text 'invoice.*'",
        f"{WEBHOOK_TENANCY}::test_a_wildcard_subscription_takes_the_types_under_its_prefix[postgres-invoice.paid-True]",
        _webhook_replace("BORN_DELIVERIES", "OR (right(sub.t, 2) = '.*'", "OR (false"),
    ),
    Mutant(
        "webhook-api-endpoint-not-tenant-scoped",
        "the host API locks an endpoint only if it is the tenant's (LOCK_TENANT_ENDPOINT)",
        "drop the tenant from the lookup: one tenant's object changes another tenant's endpoint",
        "tests/integration/test_webhook_tenant_api.py::test_another_tenants_ids_are_refused_as_missing_and_its_rows_stay_as_they_were",
        _replace_in(
            _tenant_statements,
            "LOCK_TENANT_ENDPOINT",
            "WHERE id = %(id)s AND tenant = %(tenant)s",
            "WHERE id = %(id)s AND %(tenant)s::text IS NOT NULL",
        ),
    ),
)


def _floor_never_dropped(self: ScanFloor, asked: int, due_times: Any) -> None:
    """The mutant of ScanFloor.claimed: the floor only ever rises; no claim scans from the start."""
    del asked
    if due_times:
        self._floor = min(due_times)


CLAIM_FLOOR = "tests/integration/test_claim_floor.py"

MUTANTS += (
    Mutant(
        "claim-floor-never-full-scan",
        "a row below the claim's scan floor is taken by a full scan within FULL_SCAN_EVERY claims",
        "ScanFloor never drops the floor: a row written below it waits for ever",
        f"{CLAIM_FLOOR}::test_a_row_below_the_floor_is_claimed_within_a_full_scan_while_a_backlog_lasts",
        (ScanFloor, "claimed", _floor_never_dropped),
    ),
    Mutant(
        "claim-floor-ignored",
        "the claim starts its scan at the floor (FLOOR_TEST in CLAIM)",
        "drop the floor's line: every claim walks the dead index entries of a burst",
        f"{CLAIM_FLOOR}::test_a_row_below_the_floor_is_claimed_within_a_full_scan_while_a_backlog_lasts",
        _replace("CLAIM", claim_forms.FLOOR_TEST, ""),
    ),
)


BY_NAME: dict[str, Mutant] = {mutant.name: mutant for mutant in MUTANTS}


def apply(name: str, setattr_: Callable[[object, str, object], None] = setattr) -> Mutant:
    mutant = BY_NAME[name]
    target, attribute, value = mutant.patch
    if not hasattr(target, attribute):  # a renamed target would make the mutant a no-op
        msg = f"mutant {name} is stale: {target!r} has no attribute {attribute!r}"
        raise LookupError(msg)
    setattr_(target, attribute, value)
    return mutant
