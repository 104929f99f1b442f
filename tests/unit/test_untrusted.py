"""Broker-controlled text made safe (outbox_core.untrusted): ids bounded, controls escaped."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from outbox_core.untrusted import MAX_ID, bounded_id, escaped, header_text, printable


def test_header_text_reads_none_bytes_and_text() -> None:
    assert header_text(None) == ""
    assert header_text(b"caf\xc3\xa9") == "café"
    assert header_text(b"\xff") == "\ufffd"
    assert header_text("already") == "already"


def test_escaped_writes_each_control_as_its_escape() -> None:
    assert escaped("a b") == "a b"
    assert escaped("\x1b[31mred\r\nX\x00") == "\\x1b[31mred\\x0d\\x0aX\\x00"
    assert escaped("\u2028") == "\\u2028"
    assert escaped("\U000e0001") == "\\U000e0001"


def test_printable_cuts_to_the_limit() -> None:
    assert printable("short") == "short"
    assert printable("x" * 20, limit=10) == "x" * 9 + "…"
    assert printable("\x00" * 5, limit=10) == "\\x00\\x00\\" + "…"


def test_bounded_id_keeps_a_plain_id() -> None:
    assert bounded_id("evt-123") == "evt-123"
    assert bounded_id("x" * MAX_ID) == "x" * MAX_ID


def test_bounded_id_hashes_a_long_or_unprintable_id() -> None:
    long = "y" * 6000
    got = bounded_id(long)
    assert got == "y" * 64 + "~sha256:" + hashlib.sha256(long.encode()).hexdigest()
    nul = bounded_id("a\x00b")
    assert nul.startswith("a\\x00b~sha256:")
    assert bounded_id("a\x00b") == nul
    assert bounded_id("a\x00c") != nul
    assert bounded_id("\ud800").startswith("\\ud800~sha256:")


@given(st.text())
def test_bounded_id_is_short_printable_and_stable(raw: str) -> None:
    got = bounded_id(raw)
    assert len(got) <= MAX_ID
    assert got.isprintable()
    assert got == bounded_id(raw)


@given(st.text())
def test_printable_has_no_control_character(raw: str) -> None:
    assert printable(raw).isprintable()
