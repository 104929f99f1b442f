from __future__ import annotations

from datetime import timedelta

import pytest

from outbox_core.outcomes import Outcome, OutcomeKind, Refusal


def test_named_constructors_build_each_kind() -> None:
    assert Outcome.sent().kind is OutcomeKind.SENT
    assert Outcome.skipped("opted out").reason == "opted out"
    gone = Outcome.permanent("410 Gone", disable_endpoint=True)
    assert gone.kind is OutcomeKind.PERMANENT
    assert gone.disable_endpoint
    later = Outcome.transient("503", retry_after=timedelta(seconds=30), maybe_delivered=True)
    assert later.retry_after == timedelta(seconds=30)
    assert later.maybe_delivered


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": OutcomeKind.PERMANENT}, "needs a reason"),
        ({"kind": OutcomeKind.SENT, "retry_after": timedelta(1)}, "only makes sense"),
        (
            {"kind": OutcomeKind.TRANSIENT, "reason": "x", "retry_after": timedelta(-1)},
            "must not be negative",
        ),
        ({"kind": OutcomeKind.TRANSIENT, "reason": "x", "disable_endpoint": True}, "disable"),
        ({"kind": OutcomeKind.PERMANENT, "reason": "x", "maybe_delivered": True}, "transient"),
    ],
)
def test_impossible_combinations_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Outcome(**kwargs)  # type: ignore[arg-type]


# --- found by mutation testing (docs/testing.md) -----------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"kind": OutcomeKind.TRANSIENT, "reason": "503", "disable_endpoint": True},
            "only a permanent outcome can disable an endpoint",
        ),
        (
            {"kind": OutcomeKind.PERMANENT, "reason": "550", "maybe_delivered": True},
            "maybe_delivered describes a transient failure only",
        ),
    ],
)
def test_impossible_flag_combinations_are_refused_in_whole_sentences(kwargs, message) -> None:
    with pytest.raises(ValueError) as refused:
        Outcome(**kwargs)
    assert str(refused.value) == message


# --- not attempted: a cap of ours deferred the send (ADR 0018) --------------------------------------


def test_a_deferred_outcome_is_its_own_kind_with_a_reason_and_a_wait() -> None:
    later = Outcome.deferred("endpoint rate cap", retry_after=timedelta(seconds=2))
    assert later.kind is OutcomeKind.DEFERRED
    assert later.retry_after == timedelta(seconds=2)
    assert Outcome.deferred("cap").retry_after == timedelta(0)
    with pytest.raises(ValueError, match="a deferred outcome needs a reason"):
        Outcome.deferred("")
    with pytest.raises(ValueError, match="must not be negative"):
        Outcome.deferred("cap", retry_after=timedelta(seconds=-1))


def test_a_deferred_outcome_sent_nothing_so_nobody_refused_it_and_nothing_maybe_arrived() -> None:
    refusal = Refusal("a@example.org", Outcome.permanent("550"))
    with pytest.raises(ValueError, match="a deferred outcome sent nothing"):
        Outcome(OutcomeKind.DEFERRED, "cap", refused=(refusal,))
    with pytest.raises(ValueError, match="maybe_delivered describes a transient failure only"):
        Outcome(OutcomeKind.DEFERRED, "cap", maybe_delivered=True)
    with pytest.raises(ValueError, match="only a permanent outcome can disable"):
        Outcome(OutcomeKind.DEFERRED, "cap", disable_endpoint=True)
