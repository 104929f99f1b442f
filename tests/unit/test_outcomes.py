from __future__ import annotations

from datetime import timedelta

import pytest

from outbox_core.outcomes import Outcome, OutcomeKind


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
