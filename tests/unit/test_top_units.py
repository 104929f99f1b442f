"""outbox top's pure parts: error classes, sparklines, the channel rows."""

from __future__ import annotations

from datetime import UTC, datetime

from outbox_core.brokers import ConsumerLag
from outbox_core.operator import ErrorGroup
from outbox_core.top import SPARKS, ChannelRow, LaneRow, error_class, error_classes, sparkline


def test_an_error_class_is_its_head_with_addresses_masked() -> None:
    assert error_class("SMTP failure at connect: timed out (dial, budget 2s)") == (
        "SMTP failure at connect"
    )
    assert error_class("recipient bob@x.example refused: SMTP 550 5.1.1: no such user") == (
        "recipient <address> refused"
    )
    assert error_class("no colon here") == "no colon here"
    assert error_class("x" * 100) == "x" * 60
    assert error_class(None) is None
    assert error_class("") is None
    assert error_class(": starts with a colon") is None
    # A colon inside a word (a URL, a time) does not end the class; one ending the text does.
    assert error_class("connecting to NATS at nats://10.0.0.5:4222 failed: timed out") == (
        "connecting to NATS at nats://10.0.0.5:4222 failed"
    )
    assert error_class("retry at 12:30:") == "retry at 12:30"


def test_a_sparkline_scales_to_its_largest_value() -> None:
    assert sparkline([]) == ""
    assert sparkline([0, 0]) == SPARKS[0] * 2
    assert sparkline([0, 3.5, 7]) == SPARKS[0] + SPARKS[4] + SPARKS[7]
    assert sparkline([-1, 5]) == SPARKS[0] + SPARKS[7]


def test_a_lane_row_is_plain_json() -> None:
    row = LaneRow(queue="outbox_message", lane="email", pending=2, leader="h:1", term=3)
    assert row.as_json()["pending"] == 2
    assert row.as_json()["leader"] == "h:1"


def test_error_groups_fold_into_classes_largest_first() -> None:
    t1, t2, t3 = (datetime(2030, 1, d, tzinfo=UTC) for d in (1, 2, 3))
    folded = error_classes(
        [
            ErrorGroup("recipient a@x.example refused: SMTP 550", 2, t2, t2),
            ErrorGroup("SMTP failure at tls: bad cert", 1, t1, t1),
            ErrorGroup("recipient b@y.example refused: SMTP 550", 3, t1, t3),
            ErrorGroup(None, 1, None, None),
        ]
    )
    assert folded == [
        ErrorGroup("recipient <address> refused", 5, t1, t3),
        ErrorGroup("SMTP failure at tls", 1, t1, t1),
        ErrorGroup(None, 1, None, None),
    ]


def test_a_channel_row_as_json_keeps_an_unknown_lag_as_null() -> None:
    row = ChannelRow("notification-email", "platform-events", waiting=None, unacknowledged=None)
    assert row.as_json() == {
        "group": "notification-email",
        "subject": "platform-events",
        "waiting": None,
        "unacknowledged": None,
        "parked": 0,
    }


def test_a_consumer_lag_is_known_once_the_broker_counts_the_group() -> None:
    assert not ConsumerLag("g", "t", waiting=None).known
    assert ConsumerLag("g", "t", waiting=0).known
