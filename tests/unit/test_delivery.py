# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""The delivery state machine (catalogue C2): the table, guarded requeue, random walks over it."""

from __future__ import annotations

import itertools

import attrs
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from outbox_core.delivery import (
    SCRUBBED_ON_MARK,
    TERMINAL,
    TRANSITIONS,
    Event,
    RowState,
    Status,
    check_requeue,
    step,
    transition,
)
from outbox_core.errors import IllegalTransition, RequeueRefused

# The specification, written out independently of the module's table: every legal move.
LEGAL = {
    (Status.PENDING, Event.CLAIM): Status.PENDING,
    (Status.PENDING, Event.SUCCEED): Status.DISPATCHED,
    (Status.PENDING, Event.SKIP): Status.SKIPPED,
    (Status.PENDING, Event.FAIL): Status.FAILED,
    (Status.PENDING, Event.RETRY): Status.PENDING,
    (Status.FAILED, Event.REQUEUE): Status.PENDING,
}
ALL_PAIRS = list(itertools.product(Status, Event))
ILLEGAL = [pair for pair in ALL_PAIRS if pair not in LEGAL]
SCRUBBED_STATUSES = {Status.DISPATCHED, Status.SKIPPED}


def test_the_table_is_exactly_the_specification() -> None:
    assert dict(TRANSITIONS) == LEGAL
    assert len(ILLEGAL) == len(Status) * len(Event) - 6


def test_terminal_states() -> None:
    assert frozenset({Status.DISPATCHED, Status.SKIPPED, Status.FAILED}) == TERMINAL
    assert all(state is Status.FAILED for state, _ in LEGAL if state in TERMINAL)


def test_the_statuses_whose_mark_scrubs() -> None:
    assert frozenset(SCRUBBED_STATUSES) == SCRUBBED_ON_MARK
    assert SCRUBBED_ON_MARK < TERMINAL


@pytest.mark.parametrize(("state", "event"), list(LEGAL), ids=str)
def test_legal_transition(state: Status, event: Event) -> None:
    assert transition(state, event) is LEGAL[state, event]


@pytest.mark.parametrize(("state", "event"), ILLEGAL, ids=str)
def test_illegal_transition_names_state_and_event(state: Status, event: Event) -> None:
    with pytest.raises(IllegalTransition) as caught:
        transition(state, event)
    assert caught.value.state is state
    assert caught.value.event is event
    assert str(caught.value) == f"a row in state {state.value} cannot take event {event.value}"


@pytest.mark.parametrize("status", sorted(SCRUBBED_STATUSES))
@pytest.mark.parametrize("scrubbed", [True, False])
def test_requeue_of_a_sent_row_is_refused_because_its_secrets_are_gone(
    status: Status, scrubbed: bool
) -> None:
    with pytest.raises(
        RequeueRefused, match=f"the row is {status.value} and its secret fields"
    ) as e:
        check_requeue(status, scrubbed=scrubbed)
    assert "cannot be sent again; send a new message instead" in str(e.value)


def test_requeue_of_a_scrubbed_failed_row_is_refused() -> None:
    with pytest.raises(
        RequeueRefused, match=r"the row is failed and its secret fields .* scrubbed"
    ):
        check_requeue(Status.FAILED, scrubbed=True)


def test_requeue_of_a_pending_row_is_refused_it_will_be_sent_anyway() -> None:
    with pytest.raises(
        RequeueRefused, match="only failed rows can be requeued; this row is pending and will be"
    ):
        check_requeue(Status.PENDING, scrubbed=False)


def test_requeue_of_a_whole_failed_row_is_allowed() -> None:
    check_requeue(Status.FAILED, scrubbed=False)
    assert step(RowState(Status.FAILED, attempts=16), Event.REQUEUE) == RowState(attempts=0)


@pytest.mark.parametrize(
    ("before", "event", "after"),
    [
        (RowState(), Event.CLAIM, RowState(attempts=1)),
        (RowState(attempts=3), Event.RETRY, RowState(attempts=3)),
        (RowState(attempts=1), Event.SUCCEED, RowState(Status.DISPATCHED, 1, scrubbed=True)),
        (RowState(attempts=2), Event.SKIP, RowState(Status.SKIPPED, 2, scrubbed=True)),
        (RowState(attempts=2), Event.FAIL, RowState(Status.FAILED, 2, scrubbed=False)),
        (RowState(Status.FAILED, 5), Event.REQUEUE, RowState(Status.PENDING, 0)),
    ],
    ids=str,
)
def test_step_moves_attempts_and_scrub_with_the_status(
    before: RowState, event: Event, after: RowState
) -> None:
    assert step(before, event) == after


@pytest.mark.parametrize("status", [Status.PENDING, Status.FAILED])
def test_only_a_sent_row_can_be_scrubbed(status: Status) -> None:
    # A scrubbed row that is pending or failed would be sent without its links.
    with pytest.raises(ValueError, match="only a dispatched or skipped row is scrubbed"):
        RowState(status, 1, scrubbed=True)


@pytest.mark.parametrize(
    ("before", "event", "error"),
    [
        (RowState(), Event.REQUEUE, RequeueRefused),
        (RowState(Status.DISPATCHED, 1, scrubbed=True), Event.REQUEUE, RequeueRefused),
        (RowState(Status.SKIPPED, 1, scrubbed=True), Event.CLAIM, IllegalTransition),
        (RowState(Status.FAILED, 1), Event.CLAIM, IllegalTransition),
        (RowState(Status.FAILED, 1), Event.RETRY, IllegalTransition),
    ],
    ids=str,
)
def test_step_refuses_what_the_table_or_the_guard_refuses(
    before: RowState, event: Event, error: type[Exception]
) -> None:
    with pytest.raises(error):
        step(before, event)


def test_row_state_refuses_negative_attempts() -> None:
    with pytest.raises(ValueError, match="attempts"):
        RowState(attempts=-1)


class DeliveryMachine(RuleBasedStateMachine):
    """Random event sequences through :func:`step`, checked against the specification above."""

    def __init__(self) -> None:
        super().__init__()
        self.state = RowState()
        self.previous = self.state
        self.last_event: Event | None = None
        self.last_applied = False
        self.ever_scrubbed = False

    def _apply(self, event: Event) -> None:
        before = self.state
        legal = (before.status, event) in LEGAL and not (event is Event.REQUEUE and before.scrubbed)
        if legal:
            after = step(before, event)
            assert after.status is LEGAL[before.status, event]
        else:
            # Requeue refusals speak to the operator; everything else is a table miss.
            expected = RequeueRefused if event is Event.REQUEUE else IllegalTransition
            snapshot = attrs.evolve(before)
            with pytest.raises(expected):
                step(before, event)
            assert before == snapshot
            after = before
        self.previous, self.state = before, after
        self.last_event, self.last_applied = event, legal
        self.ever_scrubbed = self.ever_scrubbed or after.scrubbed

    @rule()
    def claim(self) -> None:
        self._apply(Event.CLAIM)

    @rule()
    def succeed(self) -> None:
        self._apply(Event.SUCCEED)

    @rule()
    def skip(self) -> None:
        self._apply(Event.SKIP)

    @rule()
    def fail(self) -> None:
        self._apply(Event.FAIL)

    @rule()
    def retry(self) -> None:
        self._apply(Event.RETRY)

    @rule()
    def requeue(self) -> None:
        self._apply(Event.REQUEUE)

    @invariant()
    def dispatched_and_skipped_absorb_every_event(self) -> None:
        if self.previous.status in SCRUBBED_STATUSES:
            assert not self.last_applied
            assert self.state == self.previous

    @invariant()
    def attempts_never_decrease_except_to_zero_on_requeue(self) -> None:
        if self.last_applied and self.last_event is Event.REQUEUE:
            assert self.state.attempts == 0
        elif self.last_applied and self.last_event is Event.CLAIM:
            assert self.state.attempts == self.previous.attempts + 1
        else:
            assert self.state.attempts == self.previous.attempts

    @invariant()
    def only_requeue_leaves_failed(self) -> None:
        if self.previous.status is Status.FAILED and self.state.status is not Status.FAILED:
            assert self.last_event is Event.REQUEUE

    @invariant()
    def a_scrubbed_row_is_never_pending_again(self) -> None:
        assert self.state.scrubbed == (self.state.status in SCRUBBED_STATUSES)
        if self.ever_scrubbed:
            assert self.state.scrubbed
            assert self.state.status is not Status.PENDING


DeliveryMachine.TestCase.settings = settings(stateful_step_count=30)
TestDeliveryMachine = DeliveryMachine.TestCase
