"""Derived timing constants (C1): the record's figures, the chain, and every refusal."""

from __future__ import annotations

import functools
import re
from datetime import timedelta

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_core.errors import ConfigurationError
from outbox_core.timing import (
    DEFAULT_EMAIL_TIMING,
    DEFAULT_WEBHOOK_TIMING,
    MAX_BATCH_SIZE,
    MAX_STEP_BUDGET,
    EmailStepBudgets,
    EmailTiming,
    WebhookTiming,
)
from outbox_core.timing_rules import TIMES

S = timedelta(seconds=1)
X = "\N{MULTIPLICATION SIGN}"  # the messages print products as the record does
STEPS = ("suppression", "branding", "dial", "smtp_exchange", "bounce_report", "mark")


# -- the record's figures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "actual", "expected"),
    [
        ("suppression", DEFAULT_EMAIL_TIMING.budgets.suppression, 5 * S),
        ("branding", DEFAULT_EMAIL_TIMING.budgets.branding, 5 * S),
        ("dial", DEFAULT_EMAIL_TIMING.budgets.dial, 10 * S),
        ("smtp_exchange", DEFAULT_EMAIL_TIMING.budgets.smtp_exchange, 30 * S),
        ("bounce_report", DEFAULT_EMAIL_TIMING.budgets.bounce_report, 5 * S),
        ("mark", DEFAULT_EMAIL_TIMING.budgets.mark, 5 * S),
        ("email per-row", DEFAULT_EMAIL_TIMING.per_row, 60 * S),
        ("email budgets per-row", EmailStepBudgets().per_row, 60 * S),
        ("email batch size", DEFAULT_EMAIL_TIMING.batch_size, 5),
        ("email batch timeout", DEFAULT_EMAIL_TIMING.batch_timeout, 300 * S),
        ("email claim lease", DEFAULT_EMAIL_TIMING.claim_lease(), 360 * S),
        ("email claim lease of 2 rows", DEFAULT_EMAIL_TIMING.claim_lease(2), 180 * S),
        ("email lease grace", DEFAULT_EMAIL_TIMING.lease_grace, 60 * S),
        ("webhook http attempt", DEFAULT_WEBHOOK_TIMING.http_attempt, 8 * S),
        ("webhook per-attempt", DEFAULT_WEBHOOK_TIMING.per_attempt, 13 * S),
        ("webhook retry batch", DEFAULT_WEBHOOK_TIMING.retry_claim_batch, 10),
        ("webhook retry batch timeout", DEFAULT_WEBHOOK_TIMING.retry_batch_timeout, 130 * S),
        ("webhook retry claim lease", DEFAULT_WEBHOOK_TIMING.retry_claim_lease(), 190 * S),
        ("webhook retry claim lease of 1", DEFAULT_WEBHOOK_TIMING.retry_claim_lease(1), 73 * S),
        ("webhook birth lease", DEFAULT_WEBHOOK_TIMING.birth_lease, 120 * S),
    ],
)
def test_defaults_reproduce_the_record(name, actual, expected):
    assert actual == expected, name


def test_one_webhook_lease_could_not_serve_both_purposes():
    timing = DEFAULT_WEBHOOK_TIMING
    # A birth-sized retry lease would end before a full retry batch's work (120 s < 130 s).
    assert timing.birth_lease < timing.retry_claim_batch * timing.per_attempt
    # A batch-sized birth lease would hold a fresh delivery 70 s longer than the birth lease does.
    assert timing.retry_claim_lease() - timing.birth_lease == 70 * S


def test_a_budget_change_moves_every_derived_figure():
    timing = EmailTiming(EmailStepBudgets(dial=20 * S), batch_size=3)
    assert timing.per_row == 70 * S
    assert timing.batch_timeout == 210 * S
    assert timing.claim_lease() == 270 * S


def test_describe_prints_the_derived_figures():
    assert DEFAULT_EMAIL_TIMING.describe() == (
        "per-row budget 60s (suppression 5s + branding 5s + dial 10s + smtp_exchange 30s"
        " + bounce_report 5s + mark 5s), batch 5, batch timeout 300s, claim lease 360s"
    )
    assert DEFAULT_WEBHOOK_TIMING.describe() == (
        "per-attempt budget 13s (http_attempt 8s + mark 5s), birth lease 120s, retry batch 10,"
        " retry batch timeout 130s, retry claim lease 190s"
    )


def test_describe_prints_fractions_of_a_second():
    timing = EmailTiming(EmailStepBudgets(dial=timedelta(seconds=10.5)), batch_size=1)
    assert "dial 10.5s" in timing.describe()
    assert "per-row budget 60.5s" in timing.describe()


# -- each broken link is refused, by name ------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: EmailTiming(batch_timeout=250 * S),
            (
                f"batch_timeout 250s is shorter than batch_size 5 {X} per_row 60s = 300s: the last"
                " row of a batch could be cancelled mid-send"
            ),
        ),
        (
            lambda: EmailTiming(batch_timeout=360 * S),
            (
                f"batch_timeout 360s is not shorter than claim_lease 360s (batch_size 5 {X} per_row"
                " 60s + lease_grace 60s): the lease could expire while the batch still runs"
            ),
        ),
        (
            lambda: EmailTiming(batch_timeout=timedelta(seconds=299.5)),
            f"batch_timeout 299.5s is shorter than batch_size 5 {X} per_row 60s = 300s",
        ),
        (lambda: EmailTiming(batch_timeout=300), "batch_timeout must be a timedelta, got 300"),  # type: ignore[arg-type]
        (
            lambda: WebhookTiming(retry_batch_timeout=129 * S),
            (
                f"retry_batch_timeout 129s is shorter than retry_claim_batch 10 {X} per_attempt 13s"
                " = 130s"
            ),
        ),
        (
            lambda: WebhookTiming(retry_batch_timeout=190 * S),
            (
                "retry_batch_timeout 190s is not shorter than retry_claim_lease 190s"
                f" (retry_claim_batch 10 {X} per_attempt 13s + lease_grace 60s)"
            ),
        ),
        (
            lambda: WebhookTiming(birth_lease=12 * S),
            (
                "birth_lease 12s is shorter than per_attempt 13s (http_attempt 8s + mark 5s): the"
                " retry worker could claim a fresh delivery while its first attempt is still"
                " running"
            ),
        ),
    ],
)
def test_a_broken_link_is_refused_naming_it(build, message):
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        build()


@pytest.mark.parametrize(
    "timeout", [300 * S, 330 * S, 360 * S - timedelta(microseconds=1)], ids=str
)
def test_a_batch_timeout_inside_the_chain_is_kept(timeout):
    assert EmailTiming(batch_timeout=timeout).batch_timeout == timeout
    assert EmailTiming(batch_timeout=timeout).claim_lease() == 360 * S


def test_the_first_attempt_may_use_its_whole_birth_lease():
    assert WebhookTiming(birth_lease=13 * S).birth_lease == DEFAULT_WEBHOOK_TIMING.per_attempt


@pytest.mark.parametrize("value", [0, -1, MAX_BATCH_SIZE + 1, True, 2.0, "5"])
def test_a_batch_size_out_of_range_is_refused(value):
    with pytest.raises(
        ConfigurationError, match=rf"batch_size must be .* 1 to 10000, got {value!r}"
    ):
        EmailTiming(batch_size=value)
    with pytest.raises(ConfigurationError, match="retry_claim_batch must be"):
        WebhookTiming(retry_claim_batch=value)


def test_the_largest_batch_is_accepted():
    assert EmailTiming(batch_size=MAX_BATCH_SIZE).batch_timeout == MAX_BATCH_SIZE * 60 * S


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize(
    "value", [timedelta(0), -S, MAX_STEP_BUDGET + timedelta(microseconds=1), 5, None]
)
def test_a_step_budget_out_of_range_is_refused(step, value):
    with pytest.raises(ConfigurationError, match=rf"^{step} must be a duration above 0s"):
        EmailStepBudgets(**{step: value})


@pytest.mark.parametrize(
    ("cls", "field"),
    [
        (EmailTiming, "lease_grace"),
        (WebhookTiming, "lease_grace"),
        (WebhookTiming, "http_attempt"),
        (WebhookTiming, "mark"),
        (WebhookTiming, "birth_lease"),
    ],
)
@pytest.mark.parametrize("value", [timedelta(0), -S, MAX_STEP_BUDGET + S, None, 8])
def test_other_budgets_out_of_range_are_refused(cls, field, value):
    with pytest.raises(ConfigurationError, match=rf"^{field} must be a duration above 0s"):
        cls(**{field: value})


def test_a_step_budget_may_be_a_whole_day():
    assert EmailStepBudgets(dial=MAX_STEP_BUDGET).dial == MAX_STEP_BUDGET


@pytest.mark.parametrize("n", [0, -3, MAX_BATCH_SIZE + 1, True])
def test_a_claim_of_no_rows_or_too_many_has_no_lease(n):
    with pytest.raises(ConfigurationError, match=r"a claim takes 1 to 10000 rows"):
        DEFAULT_EMAIL_TIMING.claim_lease(n)
    with pytest.raises(ConfigurationError, match=r"a claim takes 1 to 10000 rows"):
        DEFAULT_WEBHOOK_TIMING.retry_claim_lease(n)


def test_timing_objects_are_frozen():
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        DEFAULT_EMAIL_TIMING.batch_size = 50  # type: ignore[misc]


# -- building from CLI seconds -----------------------------------------------------------------


@pytest.mark.parametrize("step", STEPS)
def test_each_step_can_be_overridden_by_name(step):
    timing = EmailTiming.with_overrides({step: 7.5})
    assert getattr(timing.budgets, step) == timedelta(seconds=7.5)
    default = getattr(DEFAULT_EMAIL_TIMING.budgets, step)
    assert timing.per_row == 60 * S - default + timedelta(seconds=7.5)
    assert timing.batch_timeout == 5 * timing.per_row


def test_lease_grace_and_batch_figures_can_be_overridden():
    timing = EmailTiming.with_overrides(
        {"lease_grace": 90, "dial": 20}, batch_size=2, batch_timeout=150
    )
    assert timing == EmailTiming(
        EmailStepBudgets(dial=20 * S), batch_size=2, batch_timeout=150 * S, lease_grace=90 * S
    )
    assert timing.claim_lease() == 2 * 70 * S + 90 * S


def test_no_overrides_gives_the_defaults():
    assert EmailTiming.with_overrides() == DEFAULT_EMAIL_TIMING
    assert EmailTiming.with_overrides({}) == EmailTiming(batch_timeout=300 * S)
    assert WebhookTiming.with_overrides() == DEFAULT_WEBHOOK_TIMING


def test_webhook_figures_can_be_overridden():
    timing = WebhookTiming.with_overrides(
        {"http_attempt": 15, "mark": 5, "lease_grace": 30, "birth_lease": 60},
        retry_claim_batch=4,
        retry_batch_timeout=90,
    )
    assert timing.per_attempt == 20 * S
    assert timing.retry_batch_timeout == 90 * S
    assert timing.retry_claim_lease() == 4 * 20 * S + 30 * S
    assert timing.birth_lease == 60 * S


def test_an_unknown_step_name_lists_the_known_names():
    message = (
        "unknown budget name(s) dail, smtp; the known names are suppression, branding, dial,"
        " smtp_exchange, bounce_report, mark, lease_grace"
    )
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        EmailTiming.with_overrides({"smtp": 1, "dail": 1, "dial": 1})
    with pytest.raises(ConfigurationError, match="known names are http_attempt, mark, lease"):
        WebhookTiming.with_overrides({"dial": 1})


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), -float("inf"), 1e13])
def test_seconds_that_are_no_duration_are_refused(seconds):
    with pytest.raises(ConfigurationError, match="dial must be a finite number of seconds"):
        EmailTiming.with_overrides({"dial": seconds})
    with pytest.raises(ConfigurationError, match="batch_timeout must be a finite number"):
        EmailTiming.with_overrides(batch_timeout=seconds)
    with pytest.raises(ConfigurationError, match="retry_batch_timeout must be a finite number"):
        WebhookTiming.with_overrides(retry_batch_timeout=seconds)


@pytest.mark.parametrize("seconds", [0, -5, 86_401, 1e-7])
def test_seconds_out_of_a_budgets_range_are_refused_by_its_rule(seconds):
    with pytest.raises(ConfigurationError, match=r"^dial must be a duration above 0s"):
        EmailTiming.with_overrides({"dial": seconds})


def test_an_overridden_batch_timeout_is_still_chain_checked():
    with pytest.raises(ConfigurationError, match="batch_timeout 100s is shorter than"):
        EmailTiming.with_overrides(batch_timeout=100)


# -- properties over the whole input range -----------------------------------------------------

budget_seconds = st.integers(min_value=1, max_value=600)
batch_sizes = st.integers(min_value=1, max_value=1000)


@st.composite
def step_budgets(draw: st.DrawFn) -> EmailStepBudgets:
    return EmailStepBudgets(**{step: draw(budget_seconds) * S for step in STEPS})


@given(budgets=step_budgets(), batch_size=batch_sizes, grace=budget_seconds)
def test_derived_email_constants_satisfy_the_chain(budgets, batch_size, grace):
    timing = EmailTiming(budgets, batch_size, lease_grace=grace * S)
    per_row = sum((getattr(budgets, step) for step in STEPS), timedelta(0))
    assert timing.per_row == per_row
    assert timing.claim_lease() == batch_size * per_row + grace * S
    assert batch_size * timing.per_row <= timing.batch_timeout < timing.claim_lease(batch_size)


@given(
    budgets=step_budgets(),
    batch_size=batch_sizes,
    grace=budget_seconds,
    # Mostly near the window [work, work + grace), sometimes far outside it.
    offset=st.one_of(
        st.integers(min_value=-700, max_value=700),
        st.integers(min_value=-700_000, max_value=700_000),
    ),
)
def test_a_batch_timeout_is_accepted_exactly_when_it_keeps_the_chain(
    budgets, batch_size, grace, offset
):
    work = batch_size * budgets.per_row
    timeout = work + offset * S
    if work <= timeout < work + grace * S:
        timing = EmailTiming(budgets, batch_size, timeout, grace * S)
        assert timing.batch_timeout == timeout
    else:
        with pytest.raises(ConfigurationError, match=r"batch_timeout .* than"):
            EmailTiming(budgets, batch_size, timeout, grace * S)


@given(
    http_attempt=budget_seconds,
    mark=budget_seconds,
    batch=batch_sizes,
    grace=budget_seconds,
    birth=budget_seconds,
)
def test_derived_webhook_constants_satisfy_the_chain(http_attempt, mark, batch, grace, birth):
    per_attempt = (http_attempt + mark) * S
    build = functools.partial(
        WebhookTiming,
        http_attempt * S,
        mark * S,
        batch,
        lease_grace=grace * S,
        birth_lease=birth * S,
    )
    if birth * S < per_attempt:
        with pytest.raises(ConfigurationError, match=r"birth_lease .* is shorter than per_attempt"):
            build()
        return
    timing = build()
    assert timing.per_attempt == per_attempt
    assert timing.retry_claim_lease() == batch * per_attempt + grace * S
    assert batch * per_attempt <= timing.retry_batch_timeout < timing.retry_claim_lease()
    assert timing.per_attempt <= timing.birth_lease


# --- found by mutation testing (docs/testing.md) -----------------------------------------------


@pytest.mark.parametrize("seconds", [1e12, -1e12])
def test_the_largest_convertible_seconds_reach_the_budgets_rule(seconds):
    # 1e12 seconds still makes a timedelta, so the budget's own range rule is what refuses it.
    with pytest.raises(ConfigurationError, match=r"^dial must be a duration above 0s"):
        EmailTiming.with_overrides({"dial": seconds})


def test_a_short_birth_lease_is_refused_with_the_whole_reason():
    with pytest.raises(ConfigurationError) as refused:
        WebhookTiming(birth_lease=12 * S)
    assert str(refused.value) == (
        "birth_lease 12s is shorter than per_attempt 13s (http_attempt 8s + mark 5s): the retry"
        " worker could claim a fresh delivery while its first attempt is still running, and POST"
        " it twice"
    )


def test_a_claim_of_the_largest_batch_gets_a_lease():
    email, webhook = EmailTiming(), WebhookTiming()
    assert email.claim_lease(MAX_BATCH_SIZE) == MAX_BATCH_SIZE * email.per_row + email.lease_grace
    assert (
        webhook.retry_claim_lease(MAX_BATCH_SIZE)
        == MAX_BATCH_SIZE * webhook.per_attempt + webhook.lease_grace
    )


def test_the_drainer_timing_holds_its_chain_and_is_a_lane_timing() -> None:
    from outbox_core.timing import FanOutTiming, LaneTiming  # noqa: PLC0415 - the names under test

    timing = FanOutTiming()
    assert isinstance(timing, LaneTiming)
    assert timing.per_row == 10 * S  # fan-out 5 s + mark 5 s
    assert timing.batch_timeout == 200 * S
    assert timing.claim_lease() == 260 * S
    assert "fan_out 5s + mark 5s" in timing.describe()
    with pytest.raises(ConfigurationError, match="batch_timeout 199s is shorter than"):
        FanOutTiming(batch_timeout=199 * S)
    with pytest.raises(ConfigurationError, match="is not shorter than claim_lease 260s"):
        FanOutTiming(batch_timeout=260 * S)


def test_the_relay_timing_holds_its_chain_and_is_a_lane_timing() -> None:
    from outbox_core.timing import (  # noqa: PLC0415 - the names under test
        DEFAULT_RELAY_TIMING,
        LaneTiming,
        RelayTiming,
    )

    timing = RelayTiming()
    assert timing == DEFAULT_RELAY_TIMING
    assert isinstance(timing, LaneTiming)
    assert (timing.publish, timing.mark, timing.mark_budget) == (5 * S, 5 * S, 5 * S)
    assert timing.per_row == 10 * S  # publish 5 s + mark 5 s
    # The default: the whole batch of 500 is one window, published at once, one grouped mark.
    assert (timing.batch_size, timing.window) == (500, 500)
    assert timing.batch_timeout == 40 * S  # one window's 10 s + half the grace
    assert timing.lease_grace == 60 * S
    assert timing.claim_lease() == 70 * S  # inside JetStream's two-minute duplicate window
    assert timing.claim_lease(3) == 70 * S
    assert timing.describe() == (
        "per-row budget 10s (publish 5s + mark 5s), batch 500 in windows of 500, batch timeout"
        " 40s, claim lease 70s"
    )
    # Windows count: 500 rows in windows of 100 are 5 windows of one per-row budget each.
    windows = RelayTiming(batch_size=500, window=100)
    assert (windows.batch_timeout, windows.claim_lease(), windows.claim_lease(101)) == (
        80 * S,
        110 * S,
        80 * S,
    )
    assert RelayTiming(batch_size=10).window == 10  # the whole batch unless told
    with pytest.raises(ConfigurationError) as wide:
        RelayTiming(batch_size=10, window=11)
    assert (
        str(wide.value)
        == "window must be a whole number of rows from 1 to the batch size 10, got 11"
    )
    with pytest.raises(ConfigurationError, match="window must be a whole number"):
        RelayTiming(window=0)
    with pytest.raises(ConfigurationError) as windowed:
        RelayTiming(window=100, batch_timeout=49 * S)
    assert str(windowed.value) == (
        f"batch_timeout 49s is shorter than windows (batch_size 500 / window 100, rounded up) 5"
        f" {TIMES} per_row 10s = 50s: the last row of a batch could be cancelled mid-send"
    )
    # The strict relay (window 1): one row after the other, the lease counts rows.
    strict = RelayTiming(batch_size=50, window=1)
    assert (strict.batch_timeout, strict.claim_lease(), strict.claim_lease(3)) == (
        530 * S,
        560 * S,
        90 * S,
    )
    assert strict.describe() == (
        "per-row budget 10s (publish 5s + mark 5s), batch 50, batch timeout 530s, claim lease 560s"
    )
    short = RelayTiming(publish=1 * S, mark=1 * S, batch_size=4, window=1, lease_grace=2 * S)
    assert (short.per_row, short.batch_timeout, short.claim_lease()) == (2 * S, 9 * S, 10 * S)
    with pytest.raises(ConfigurationError) as too_short:
        RelayTiming(batch_size=50, window=1, batch_timeout=499 * S)
    assert str(too_short.value) == (
        f"batch_timeout 499s is shorter than batch_size 50 {TIMES} per_row 10s = 500s:"
        " the last row of a batch could be cancelled mid-send"
    )
    with pytest.raises(ConfigurationError) as long:
        RelayTiming(batch_size=50, window=1, batch_timeout=560 * S)
    assert str(long.value) == (
        f"batch_timeout 560s is not shorter than claim_lease 560s (batch_size 50 {TIMES} per_row"
        " 10s + lease_grace 60s): the lease could expire while the batch still runs, and a sibling"
        " that re-claims its rows would send them twice"
    )
    assert RelayTiming(batch_size=50, window=1, batch_timeout=559 * S).batch_timeout == 559 * S
    with pytest.raises(ConfigurationError, match="publish must be a duration above 0s"):
        RelayTiming(publish=0 * S)
    with pytest.raises(ConfigurationError, match="mark must be a duration above 0s"):
        RelayTiming(mark=-1 * S)
    with pytest.raises(ConfigurationError, match="batch_size must be a whole number"):
        RelayTiming(batch_size=0)
    with pytest.raises(ConfigurationError, match="lease_grace must be a duration"):
        RelayTiming(lease_grace=0 * S)
    with pytest.raises(ConfigurationError, match="a claim takes 1 to"):
        timing.claim_lease(0)


@pytest.mark.parametrize("field", ["publish", "mark", "batch_size", "window"])
def test_a_relay_timing_with_a_wrong_type_is_refused_by_name_before_deriving(field: str) -> None:
    from outbox_core.timing import RelayTiming  # noqa: PLC0415 - the name under test

    with pytest.raises(ConfigurationError, match=f"^{field} must be"):
        RelayTiming(**{field: "5"})  # type: ignore[arg-type]
