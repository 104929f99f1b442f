"""outbox top's pure parts: error classes and sparklines."""

from __future__ import annotations

from outbox_core.top import SPARKS, LaneRow, error_class, sparkline


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


def test_a_sparkline_scales_to_its_largest_value() -> None:
    assert sparkline([]) == ""
    assert sparkline([0, 0]) == SPARKS[0] * 2
    assert sparkline([0, 3.5, 7]) == SPARKS[0] + SPARKS[4] + SPARKS[7]
    assert sparkline([-1, 5]) == SPARKS[0] + SPARKS[7]


def test_a_lane_row_is_plain_json() -> None:
    row = LaneRow(queue="outbox_message", lane="email", pending=2, leader="h:1", term=3)
    assert row.as_json()["pending"] == 2
    assert row.as_json()["leader"] == "h:1"
