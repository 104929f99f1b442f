"""The Hypothesis strategies the suite shares: one definition of each kind of input.

Profiles (how many examples) are registered in ``tests/conftest.py``; these are the inputs. Each
strategy says what it is for, so a test picks the one that matches its promise:

- time: :data:`instants` (aware UTC datetimes), :data:`durations` and :func:`durations_between`,
  :data:`jitters`;
- JSON: :func:`json_values_of` and :func:`json_objects_of` (what a payload may hold), over
  :data:`storable_text` where the value must fit PostgreSQL's jsonb;
- mail: :data:`address_like` (strings shaped like addresses, with every troublesome character),
  :data:`hostile_addresses` (plausible addresses, then spliced with injection fragments), and
  :data:`header_values` (text a header value may be given: CR/LF, separators, encoded words,
  fragments repeated past the fold).

Import them as ``from tests.strategies import ...``.
"""

from __future__ import annotations

import base64
import binascii
import string
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

# --- time -------------------------------------------------------------------------------------------

#: Aware UTC instants between 2000 and 2100.
instants = st.datetimes(
    # Hypothesis takes naive bounds; `timezones=` makes every drawn value aware.
    min_value=datetime(2000, 1, 1),  # noqa: DTZ001 -- see above
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001 -- see above
    timezones=st.just(UTC),
)


def durations_between(min_value: timedelta, max_value: timedelta) -> st.SearchStrategy[timedelta]:
    """Durations in ``[min_value, max_value]``."""
    return st.timedeltas(min_value=min_value, max_value=max_value)


#: Positive durations up to two days (a lease, a budget, a backoff slot).
durations = durations_between(timedelta(microseconds=1), timedelta(days=2))


#: A jitter draw, as the core's backoff takes it: a float in [0, 1].
jitters = st.floats(min_value=0.0, max_value=1.0)

# --- JSON -------------------------------------------------------------------------------------------

#: Text PostgreSQL's jsonb can store (no U+0000) and UTF-8 can encode (no lone surrogates).
storable_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"))


def json_values_of(
    *,
    text: st.SearchStrategy[str] | None = None,
    keys: st.SearchStrategy[str] | None = None,
    max_size: int = 3,
    max_leaves: int = 8,
) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars (finite floats only), then lists and objects of up to ``max_size``
    items nested up to ``max_leaves`` leaves. ``text`` draws the strings, ``keys`` the object keys
    (both arbitrary text unless given)."""
    text = st.text() if text is None else text
    keys = text if keys is None else keys
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | text
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=max_size) | st.dictionaries(keys, inner, max_size=max_size)
        ),
        max_leaves=max_leaves,
    )


def json_objects_of(
    keys: st.SearchStrategy[str], values: st.SearchStrategy[Any], *, max_size: int = 8
) -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object (a payload): up to ``max_size`` ``keys`` with JSON ``values``."""
    return st.dictionaries(keys, values, max_size=max_size)


# --- mail: addresses --------------------------------------------------------------------------------

#: RFC 5322 atext: what a dot-atom local part may hold besides dots.
ATEXT = string.ascii_letters + string.digits + "!#$%&'*+-/=?^_`{|}~"

#: A local part, 0 to 2 '@', a domain, each drawn from the characters that matter to an address
#: parser (quotes, brackets, separators, NUL, CR/LF, non-ASCII, the soft hyphen, an ideographic dot).
address_like = st.builds(
    lambda local, ats, domain: local + "@" * ats + domain,
    st.text(ATEXT + '."\\ (),:;<>[]\x00\r\nü\u2028', max_size=70),
    st.integers(0, 2),
    st.text(string.ascii_letters + string.digits + "-._[]:ü。\x00\n \u00ad", max_size=80),
)

#: What an attacker splices into an address (or a header): line breaks, controls, separators,
#: SMTP commands, encoded words, IDNA look-alikes.
HOSTILE_ADDRESS_BITS = [
    "\r\n", "\r", "\n", "\x00", "\x01", "\x1b", "\x7f", "\x85", "\u2028", "\t", " ", "<", ">",
    "(", ")", ",", ";", ":", '"', "\\", "[", "]", "@", ".", "..", "RCPT TO:<eve@evil.example>",
    "\r\nRCPT TO:<eve@evil.example>", "\r\nDATA\r\n", "=?UTF-8?Q?=0A?=", "%0d%0a", "xn--", "-",
    "ü", "ß", "例え", "\u200d", "。", "\uff20", "bounce", "transient",
]  # fmt: skip
_LDH = string.ascii_letters + string.digits
_labels = st.one_of(
    st.builds(
        "{}{}{}".format,
        st.text(_LDH, min_size=1, max_size=1),
        st.text(_LDH + "-", max_size=20),
        st.text(_LDH, max_size=1),
    ),
    st.text(string.ascii_lowercase + string.digits + "-", min_size=1, max_size=66),
    st.text(st.characters(min_codepoint=0xA0, max_codepoint=0x9FFF), min_size=1, max_size=8),
)
_locals = st.one_of(
    st.lists(st.text(ATEXT, min_size=1, max_size=12), min_size=1, max_size=4).map(".".join),
    st.text(ATEXT + ".", min_size=1, max_size=70),
)
#: Addresses that look real: dot-atom local parts, 2 to 4 labels (LDH, long, or non-ASCII).
plausible_addresses = st.builds(
    "{}@{}".format, _locals, st.lists(_labels, min_size=2, max_size=4).map(".".join)
)
_spliced = st.builds(
    lambda address, bit, at: address[:at] + bit + address[at:],
    plausible_addresses,
    st.sampled_from(HOSTILE_ADDRESS_BITS),
    st.integers(0, 80),
)
_pieces = st.lists(
    st.one_of(st.sampled_from(HOSTILE_ADDRESS_BITS), st.text(max_size=8)), max_size=8
)
#: Plausible addresses, the same with a hostile bit spliced in, hostile bits strung together, text.
hostile_addresses = st.one_of(plausible_addresses, _spliced, _pieces.map("".join), st.text())

# --- mail: header values ----------------------------------------------------------------------------


def q_word(text: str) -> str:
    """``text`` as an RFC 2047 Q encoded word."""
    encoded = binascii.b2a_qp(text.encode("utf-8"), header=True).decode("ascii")
    encoded = encoded.replace("=\n", "").replace("?", "=3F")
    return f"=?utf-8?q?{encoded}?="


def b_word(text: str) -> str:
    """``text`` as an RFC 2047 B encoded word."""
    return f"=?UTF-8?B?{base64.b64encode(text.encode('utf-8')).decode('ascii')}?="


#: What header injection is made of: line breaks (folded or not), controls, separators, header
#: names, encoded words (one decoding to LF), the SMTP end-of-data line, template markers.
HEADER_FRAGMENTS = [
    "\r\n", "\n", "\r", "\r\n ", "\r\n\t", "\r\nBcc: evil@example.org", "\nCc: evil@example.org\n",
    "\r\n\r\n", "\t", " ", "\u2028", "\u2029", "\x85", "\x00", "\x0b", "\x0c", "\x1b", "\x7f",
    "Bcc: eve@evil.example", "Cc:", "Subject:", "To: <x@y.z>", "<evil@example.org>", '"', ",",
    ";", ":", "\\", "@", "(", ")", "<", ">", ".", "=?", "?=", "?Q?", "=?UTF-8?Q?=0A?=",
    "=?utf-8?b?CkJjYzogeEB5?=", "\r\n.\r\n", "\n.\n", "--", "=_outbox_", "é", "€", "☕", "😀",
    "\u200b", "\ufeff", "$", "${", "}", "x" * 90,
]  # fmt: skip
_repeated = st.tuples(st.sampled_from(HEADER_FRAGMENTS), st.integers(1, 40)).map(
    lambda t: t[0] * t[1]
)
#: Text a header value may be given: fragments, repeats past the fold, encoded words, plain
#: text, and a long run of short words (400 to 560) that must fold.
header_values = st.one_of(
    st.lists(
        st.text()
        | st.text(min_size=50, max_size=300)
        | st.sampled_from(HEADER_FRAGMENTS)
        | _repeated
        | st.text().map(q_word)
        | st.text().map(b_word),
        max_size=6,
    ).map("".join),
    st.builds(
        lambda n, tail: "w " * n + tail,
        st.integers(400, 560),
        st.sampled_from(["", "\r\nBcc: eve@evil.example", "=?UTF-8?Q?=0A?="]),
    ),
)
