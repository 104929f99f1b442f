"""Per-recipient rules (ADR 0015): suppression per recipient, partial acceptance, the progress key."""

from __future__ import annotations

from datetime import UTC, datetime
from types import MappingProxyType

import pytest

from outbox_core.backoff import EMAIL_BACKOFF
from outbox_core.classify import classify_smtp_reply
from outbox_core.decide import decide
from outbox_core.delivery import Status
from outbox_core.messages import ClaimedRow, ClaimToken, Mark
from outbox_core.outcomes import Outcome, OutcomeKind, Refusal
from outbox_core.recipients import (
    DELIVERED_KEY,
    MAX_REASON,
    delivered_before,
    settle,
    still_to_send,
    suppression_outcome,
)
from outbox_core.scrub import ScrubRules

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
GREYLISTED = Refusal("tom@example.org", classify_smtp_reply(451, "4.7.1 Greylisted"))
UNKNOWN = Refusal("bob@example.org", classify_smtp_reply(550, "5.1.1 No such user"))


def row(attempts: int = 1) -> ClaimedRow:
    token = ClaimToken("token-123456")
    return ClaimedRow(1, "email", {"to": "x@example.org"}, attempts, token, NOW, NOW)


# --- suppression ----------------------------------------------------------------------------------


def test_one_suppressed_recipient_among_several_fails_the_row_naming_it():
    outcome = suppression_outcome(("ann@example.org", "bob@example.org"), {"bob@example.org"})
    assert outcome == Outcome.permanent("recipient bob@example.org is suppressed")


def test_every_suppressed_recipient_is_named_in_order():
    outcome = suppression_outcome(("a@x.org", "b@x.org", "c@x.org"), ["c@x.org", "A@X.ORG"])
    assert outcome == Outcome.permanent("recipients a@x.org, c@x.org are suppressed")


@pytest.mark.parametrize("suppressed", [(), ["someone-else@example.org"]])
def test_nobody_suppressed_is_no_outcome(suppressed):
    assert suppression_outcome(("ann@example.org",), suppressed) is None


def test_a_long_suppression_reason_is_capped():
    many = tuple(f"recipient-{n:03}@example.org" for n in range(60))
    outcome = suppression_outcome(many, many)
    assert outcome is not None
    assert len(outcome.reason) == MAX_REASON
    assert outcome.reason.endswith("…")


# --- the progress key -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "done"),
    [
        ({}, frozenset()),
        ({DELIVERED_KEY: "ann@example.org"}, frozenset()),  # not a list: ignored
        ({DELIVERED_KEY: ["ann@example.org", 7, None]}, frozenset({"ann@example.org"})),
    ],
)
def test_delivered_before_reads_only_a_list_of_addresses(payload, done):
    assert delivered_before(payload) == done


def test_still_to_send_leaves_out_who_already_has_it_in_order():
    payload = {DELIVERED_KEY: ["bob@example.org"]}
    to = ("ann@example.org", "bob@example.org", "cy@example.org")
    assert still_to_send(to, payload) == ("ann@example.org", "cy@example.org")


# --- settle ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attempt",
    [
        Outcome.sent(),
        Outcome.transient("SMTP failure at connect: timed out"),
        Outcome.permanent("x"),
    ],
)
def test_an_attempt_without_refusals_is_the_row_s_outcome(attempt):
    assert settle(attempt, delivered_before={"z@example.org"}) is attempt


def test_partial_acceptance_with_a_4xx_retries_and_records_who_has_it():
    attempt = Outcome.sent(delivered_to=("ann@example.org",), refused=(GREYLISTED,))
    outcome = settle(attempt, delivered_before={"zed@example.org"})
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert outcome.progress == {DELIVERED_KEY: ["ann@example.org", "zed@example.org"]}
    assert outcome.reason == (
        "recipient tom@example.org refused: SMTP 451 4.7.1: Greylisted"
        " (delivered to 1 of 2; the rest are retried)"
    )


def test_partial_acceptance_with_only_5xx_fails_naming_the_address():
    attempt = Outcome.sent(delivered_to=("ann@example.org",), refused=(UNKNOWN,))
    outcome = settle(attempt, delivered_before=())
    assert outcome.kind is OutcomeKind.PERMANENT
    assert outcome.progress == {DELIVERED_KEY: ["ann@example.org"]}
    assert outcome.reason == (
        "recipient bob@example.org refused: SMTP 550 5.1.1: No such user (delivered to 1 of 2)"
    )


def test_a_4xx_and_a_5xx_keep_the_row_pending_and_name_both():
    attempt = Outcome.sent(delivered_to=("ann@example.org",), refused=(UNKNOWN, GREYLISTED))
    outcome = settle(attempt, delivered_before=())
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert outcome.reason.startswith(
        "2 recipients refused: bob@example.org: SMTP 550 5.1.1: No such user;"
        " tom@example.org: SMTP 451 4.7.1: Greylisted (delivered to 1 of 3;"
    )


def test_everyone_refused_records_no_progress():
    attempt = Outcome(OutcomeKind.PERMANENT, "x", refused=(UNKNOWN, GREYLISTED))
    outcome = settle(attempt, delivered_before={"ann@example.org"})
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert outcome.progress is None
    assert outcome.reason.endswith("(none of 2 delivered; retried)")


def test_a_single_refused_recipient_says_only_its_refusal():
    outcome = settle(Outcome(OutcomeKind.PERMANENT, "x", refused=(UNKNOWN,)), delivered_before=())
    assert outcome == Outcome.permanent(
        "recipient bob@example.org refused: SMTP 550 5.1.1: No such user"
    )
    greylisted = settle(
        Outcome(OutcomeKind.TRANSIENT, "x", refused=(GREYLISTED,)), delivered_before=()
    )
    assert (
        greylisted.reason
        == "recipient tom@example.org refused: SMTP 451 4.7.1: Greylisted (retried)"
    )


# --- the outcome and the mark carry it ------------------------------------------------------------


def test_decide_puts_the_progress_into_every_kind_of_mark():
    done = {DELIVERED_KEY: ["ann@example.org"]}
    scrub = ScrubRules()
    for outcome, status in [
        (Outcome.transient("451").with_progress(done), Status.PENDING),
        (Outcome.permanent("550").with_progress(done), Status.FAILED),
        (Outcome.sent(), Status.DISPATCHED),
    ]:
        mark = decide(row(), outcome, backoff=EMAIL_BACKOFF, scrub=scrub, jitter=0.5)
        assert mark.status is status
        assert mark.payload_patch == (done if outcome.progress else None)
    spent = decide(
        row(attempts=99),
        Outcome.transient("451").with_progress(done),
        backoff=EMAIL_BACKOFF, scrub=scrub, jitter=0.5,
    )  # fmt: skip
    assert spent.status is Status.FAILED  # retries exhausted: who has it is still recorded
    assert spent.payload_patch == done


def test_with_progress_none_is_the_same_outcome():
    outcome = Outcome.transient("x")
    assert outcome.with_progress(None) is outcome
    assert isinstance(outcome.with_progress({"k": 1}).progress, MappingProxyType)


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: Outcome(OutcomeKind.PERMANENT, "x", delivered_to=("a@x.org",)), "delivered_to"),
        (lambda: Outcome(OutcomeKind.SKIPPED, "x", refused=(UNKNOWN,)), "skipped outcome"),
        (lambda: Refusal("a@x.org", Outcome.sent()), "transient or permanent"),
    ],
)
def test_outcomes_that_can_t_be_are_refused(build, words):
    with pytest.raises(ValueError, match=words):
        build()


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: Outcome.sent(delivered_to="a@x.org"), "delivered_to"),  # type: ignore[arg-type]
        (lambda: Outcome.sent(delivered_to=(1,)), "delivered_to"),  # type: ignore[arg-type]
        (lambda: Outcome.sent(refused=[UNKNOWN, "b"]), "refused"),  # type: ignore[arg-type]
        (lambda: Outcome.sent().with_progress({1: "x"}), "progress"),  # type: ignore[dict-item]
        (lambda: Outcome.sent().with_progress(["x"]), "progress"),  # type: ignore[arg-type]
        (
            lambda: Mark.failed(row(), "x").__class__(
                1,
                row().token,
                Status.FAILED,
                "x",
                payload_patch=[1],  # type: ignore[arg-type]
            ),
            "patch",
        ),
        (lambda: Mark(1, row().token, Status.FAILED, "x", payload_patch={2: "x"}), "patch"),  # type: ignore[dict-item]
    ],
)
def test_wrong_types_are_refused(build, words):
    with pytest.raises(TypeError, match=words):
        build()


def test_lists_become_tuples_and_an_empty_patch_is_none():
    outcome = Outcome.sent(delivered_to=["a@x.org"], refused=[UNKNOWN])  # type: ignore[arg-type]
    assert outcome.delivered_to == ("a@x.org",)
    assert outcome.refused == (UNKNOWN,)
    assert Mark(1, row().token, Status.FAILED, "x", payload_patch={}).payload_patch is None
    assert Mark(1, row().token, Status.FAILED, "x").payload_patch is None
