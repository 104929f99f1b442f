# Copyright 2026 leased-outbox developers. SPDX-License-Identifier: Apache-2.0
"""A webhook delivery's attempt log (outbox_core.attempt_log): bounded, oldest dropped first,
tolerant of whatever was stored before, and pure (its inputs are never changed)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox_core.attempt_log import (
    ATTEMPT_LOG_SIZE,
    ERROR_CHARS,
    RESPONSE_CHARS,
    appended,
    attempt_entry,
    logged,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def entry(n: int, status: int | None = 500) -> dict[str, Any]:
    return attempt_entry(
        at=T0 + timedelta(minutes=n), status=status, error=f"attempt {n}", response=None
    )


def test_an_entry_holds_the_time_status_error_and_response() -> None:
    assert attempt_entry(at=T0, status=200, error=None, response="ok") == {
        "at": "2026-03-01T12:00:00+00:00",
        "status": 200,
        "error": None,
        "response": "ok",
    }
    shifted = timezone(timedelta(hours=2))
    assert attempt_entry(at=T0.astimezone(shifted), status=None, error="refused", response=None)[
        "at"
    ] == ("2026-03-01T14:00:00+02:00")


def test_an_entry_bounds_its_error_and_response() -> None:
    made = attempt_entry(at=T0, status=500, error="e" * 1000, response="r" * 1000)
    assert made["error"] == "e" * ERROR_CHARS
    assert made["response"] == "r" * RESPONSE_CHARS
    exact = attempt_entry(at=T0, status=500, error="e" * ERROR_CHARS, response=None)
    assert exact["error"] == "e" * ERROR_CHARS


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"at": datetime(2026, 3, 1)}, ValueError, "timezone-aware"),  # noqa: DTZ001 - the point
        ({"at": "2026-03-01T12:00:00+00:00"}, ValueError, "timezone-aware"),
        ({"status": True}, TypeError, "HTTP status code"),
        ({"status": "500"}, TypeError, "HTTP status code"),
        ({"error": 5}, TypeError, "text or None"),
        ({"response": b"bytes"}, TypeError, "text or None"),
    ],
)
def test_an_entry_refuses_what_is_not_an_attempt(
    kwargs: dict[str, Any], error: type[Exception], words: str
) -> None:
    given_: dict[str, Any] = {"at": T0, "status": 500, "error": None, "response": None, **kwargs}
    with pytest.raises(error, match=words):
        attempt_entry(**given_)


def test_the_log_keeps_the_latest_attempts_oldest_first() -> None:
    log: object = None
    for n in range(ATTEMPT_LOG_SIZE):
        log = appended(log, entry(n))
    assert isinstance(log, list)
    assert [e["error"] for e in log] == [f"attempt {n}" for n in range(ATTEMPT_LOG_SIZE)]
    # One more: the oldest is dropped, the newest is last; the size stays the bound.
    log = appended(log, entry(ATTEMPT_LOG_SIZE, status=200))
    assert len(log) == ATTEMPT_LOG_SIZE
    assert log[0]["error"] == "attempt 1"
    assert log[-1] == entry(ATTEMPT_LOG_SIZE, status=200)


def test_a_log_stored_longer_than_the_bound_is_cut_to_it() -> None:
    long = [entry(n) for n in range(ATTEMPT_LOG_SIZE * 3)]
    log = appended(long, entry(99))
    assert len(log) == ATTEMPT_LOG_SIZE
    assert log[-1] == entry(99)
    assert log[:-1] == long[-(ATTEMPT_LOG_SIZE - 1) :]


@pytest.mark.parametrize(
    "stored",
    [None, {}, {"0": {}}, "[]", 7, [1, 2], [{"at": "x"}, "not an object"], [None], ["a"]],
)
def test_a_malformed_stored_log_counts_as_empty(stored: object) -> None:
    assert logged(stored) == []
    assert appended(stored, entry(1)) == [entry(1)]


def test_a_well_formed_log_is_read_as_it_is() -> None:
    stored = [entry(1), {"at": "anything", "extra": True}]
    assert logged(stored) == stored
    assert logged([]) == []


def test_neither_function_changes_what_it_is_given() -> None:
    previous = [entry(n) for n in range(ATTEMPT_LOG_SIZE)]
    kept = copy.deepcopy(previous)
    new = entry(42)
    new_kept = copy.deepcopy(new)
    log = appended(previous, new)
    assert previous == kept
    assert new == new_kept
    # The answer shares no entry with the inputs: changing it changes neither.
    log[-1]["status"] = 1
    log[0]["status"] = 1
    assert new == new_kept
    assert previous == kept
    read = logged(previous)
    read[0]["error"] = "changed"
    assert previous == kept


@given(st.integers(min_value=0, max_value=40), st.integers(min_value=0, max_value=40))
def test_any_history_keeps_the_last_entries_in_order(stored: int, more: int) -> None:
    log: list[dict[str, Any]] = [entry(n) for n in range(stored)]
    for n in range(stored, stored + more):
        log = appended(log, entry(n))
    expected = [entry(n) for n in range(stored + more)][-ATTEMPT_LOG_SIZE:] if more else log
    assert log == expected
    assert len(log) <= max(ATTEMPT_LOG_SIZE, stored)
