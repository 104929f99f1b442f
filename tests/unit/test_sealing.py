"""The sealed-field envelope and which values are sealed or opened (catalogue B1), without a cipher.

The core owns the format and the choice of fields; the cipher is a port. These tests drive the
core with a toy authenticated cipher (SHA-256 keystream + HMAC tag, standard library only) so that
they exercise exactly the core's part: the envelope round trip, the field/lane binding passed as
associated data, and the error messages that name the field and the key id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from tests.strategies import json_values_of

from outbox_core.errors import ConfigurationError, InvalidPayload
from outbox_core.ports import Encryptor
from outbox_core.scrub import DEFAULT_SECRET_KEYS, ScrubRules
from outbox_core.sealing import (
    ENVELOPE_VERSION,
    NONCE_BYTES,
    SEALED_MARKER,
    TAG_BYTES,
    SealedValue,
    SealingRules,
    field_aad,
    is_key_id,
    is_sealed,
    open_sealed,
    reseal,
)

LINK = "https://shop.example/reset?token=s3cret-token"


class ToyEncryptor:
    """A stand-in cipher: keystream XOR + HMAC tag over nonce, associated data and ciphertext."""

    def __init__(self, keys: dict[str, bytes], active: str) -> None:
        self.keys = keys
        self.active_key_id = active
        self.counter = itertools.count()
        self.seen_aad: list[bytes] = []

    @property
    def key_ids(self) -> frozenset[str]:
        return frozenset(self.keys)

    def _stream(self, key: bytes, nonce: bytes, size: int) -> bytes:
        blocks = (hashlib.sha256(key + nonce + i.to_bytes(4, "big")).digest() for i in range(size))
        return b"".join(blocks)[:size]

    def _tag(self, key: bytes, nonce: bytes, aad: bytes, body: bytes) -> bytes:
        return hmac.digest(key, nonce + len(aad).to_bytes(4, "big") + aad + body, "sha256")[:16]

    def seal(self, plaintext: bytes, *, aad: bytes) -> SealedValue:
        self.seen_aad.append(aad)
        key = self.keys[self.active_key_id]
        nonce = next(self.counter).to_bytes(NONCE_BYTES, "big")
        body = bytes(
            a ^ b for a, b in zip(plaintext, self._stream(key, nonce, len(plaintext)), strict=True)
        )
        tag = self._tag(key, nonce, aad, body)
        return SealedValue(kid=self.active_key_id, nonce=nonce, ciphertext=body + tag)

    def open(self, sealed: SealedValue, *, aad: bytes) -> bytes:
        key = self.keys[sealed.kid]
        body, tag = sealed.ciphertext[:-TAG_BYTES], sealed.ciphertext[-TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(key, sealed.nonce, aad, body)):
            raise InvalidPayload(f"the value does not authenticate under key id {sealed.kid!r}")
        return bytes(
            a ^ b for a, b in zip(body, self._stream(key, sealed.nonce, len(body)), strict=True)
        )


K1, K2 = b"1" * 32, b"2" * 32


def toy(active: str = "k1", **keys: bytes) -> ToyEncryptor:
    return ToyEncryptor(keys or {"k1": K1}, active)


def payload() -> dict[str, Any]:
    return {
        "to": "ann@example.org",
        "text": "Reset: $password_reset_url",
        "password_reset_url": LINK,
        "pdf": {"name": "invoice.pdf", "pages": [1, 2]},
        "customer": "c-1",
    }


def test_the_toy_satisfies_the_port() -> None:
    encryptor: Encryptor = toy()  # mypy checks the structural match
    assert encryptor.active_key_id == "k1"


# --- the envelope ---------------------------------------------------------------------------------


def test_seal_writes_the_v1_envelope_and_leaves_other_fields_alone() -> None:
    sealed = SealingRules().seal(payload(), lane="email", encryptor=toy())
    envelope = sealed["password_reset_url"]
    assert set(envelope) == {"$sealed", "kid", "n", "ct"}
    assert envelope[SEALED_MARKER] == ENVELOPE_VERSION == "v1"
    assert envelope["kid"] == "k1"
    assert len(base64.b64decode(envelope["n"])) == NONCE_BYTES == 12
    assert len(base64.b64decode(envelope["ct"])) == len(json.dumps(LINK)) + TAG_BYTES
    assert is_sealed(sealed["pdf"])
    assert sealed["customer"] == "c-1"  # not a secret field: stays plaintext
    assert sealed["text"] == payload()["text"]
    assert LINK not in json.dumps(sealed)
    assert list(sealed) == list(payload())  # same keys, same order


def test_open_gives_back_exactly_what_was_sealed() -> None:
    encryptor = toy()
    sealed = SealingRules().seal(payload(), lane="email", encryptor=encryptor)
    assert open_sealed(sealed, lane="email", encryptor=encryptor) == payload()


@given(json_values_of(max_leaves=8))
def test_any_json_value_round_trips(value: object) -> None:
    encryptor = toy()
    sealed = SealingRules(fields=frozenset({"secret"})).seal(
        {"secret": value}, lane="email", encryptor=encryptor
    )
    assert is_sealed(sealed["secret"])
    assert open_sealed(sealed, lane="email", encryptor=encryptor) == {"secret": value}


def test_the_envelope_round_trips_through_json() -> None:
    value = SealedValue(kid="k-1.a_b", nonce=b"\x00" * 12, ciphertext=b"\xff" * 20)
    assert SealedValue.from_json(json.loads(json.dumps(value.to_json()))) == value
    assert "ciphertext" not in repr(value)  # long bytes are left out of reprs (and logs)


def test_sealing_is_skipped_for_absent_and_already_sealed_fields() -> None:
    encryptor = toy()
    once = SealingRules().seal(payload(), lane="email", encryptor=encryptor)
    assert SealingRules().seal(once, lane="email", encryptor=encryptor) == once  # never twice
    assert SealingRules().seal({"to": "a@b.example"}, lane="email", encryptor=encryptor) == {
        "to": "a@b.example"
    }


def test_the_default_sealed_fields_are_the_scrubbed_ones() -> None:
    # What is sealed while unsent is also removed once sent: the scrub works by key name.
    assert SealingRules().fields == DEFAULT_SECRET_KEYS == ScrubRules().keys
    sealed = SealingRules().seal(payload(), lane="email", encryptor=toy())
    scrubbed = ScrubRules().scrub(sealed)
    assert "password_reset_url" not in scrubbed
    assert "pdf" not in scrubbed
    assert not any(is_sealed(value) for value in scrubbed.values())


def test_the_associated_data_names_the_lane_and_the_field_unambiguously() -> None:
    encryptor = toy()
    SealingRules().seal(payload(), lane="email", encryptor=encryptor)
    assert field_aad("email", "password_reset_url") in encryptor.seen_aad
    assert field_aad("a", "b:c") != field_aad("a:b", "c")
    # JSON-quoted, not joined: a field name can't smuggle in a third element.
    assert json.loads(field_aad("a", 'b","c')) == ["leased-outbox/sealed-field/v1", "a", 'b","c']


# --- what fails, and how it says so ---------------------------------------------------------------


def sealed_payload(encryptor: ToyEncryptor | None = None, lane: str = "email") -> dict[str, Any]:
    return SealingRules().seal(payload(), lane=lane, encryptor=encryptor or toy())


def test_a_value_moved_to_another_field_does_not_open() -> None:
    encryptor = toy()
    moved = sealed_payload(encryptor)
    moved["invite_url"] = moved.pop("password_reset_url")
    with pytest.raises(InvalidPayload, match=r"cannot decrypt field 'invite_url': .*authenticate"):
        open_sealed(moved, lane="email", encryptor=encryptor)


def test_a_value_moved_to_another_lane_does_not_open() -> None:
    encryptor = toy()
    with pytest.raises(InvalidPayload, match=r"cannot decrypt field 'p.*authenticate"):
        open_sealed(sealed_payload(encryptor, lane="email"), lane="billing", encryptor=encryptor)


def test_a_tampered_value_does_not_open() -> None:
    encryptor = toy()
    tampered = sealed_payload(encryptor)
    raw = bytearray(base64.b64decode(tampered["password_reset_url"]["ct"]))
    raw[0] ^= 1
    tampered["password_reset_url"]["ct"] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(InvalidPayload, match="cannot decrypt field 'password_reset_url'"):
        open_sealed(tampered, lane="email", encryptor=encryptor)


def test_an_unknown_key_id_is_named() -> None:
    stored = sealed_payload(toy("k1", k1=K1))
    with pytest.raises(
        InvalidPayload,
        match=r"^cannot decrypt field '(password_reset_url|pdf)': key id 'k1' is not configured$",
    ):
        open_sealed(stored, lane="email", encryptor=toy("k2", k2=K2))


def test_a_sealed_field_without_any_encryptor_names_the_key_id() -> None:
    with pytest.raises(InvalidPayload, match="sealed under key id 'k1' and no encryption keys"):
        open_sealed(sealed_payload(), lane="email", encryptor=None)
    assert open_sealed({"to": "a@b.example"}, lane="email", encryptor=None) == {"to": "a@b.example"}


def test_an_opened_value_that_is_not_json_is_refused() -> None:
    encryptor = toy()
    for garbage in (b"\xff\xfe", b"NaN", b"{"):
        stored = {"pdf": encryptor.seal(garbage, aad=field_aad("email", "pdf")).to_json()}
        with pytest.raises(InvalidPayload, match="'pdf': the opened value is not UTF-8 JSON"):
            open_sealed(stored, lane="email", encryptor=encryptor)


GOOD = {"$sealed": "v1", "kid": "k1", "n": base64.b64encode(b"n" * 12).decode(), "ct": "A" * 24}


@pytest.mark.parametrize(
    ("envelope", "reason"),
    [
        ("text", "is a JSON object, not str"),
        ({**GOOD, "$sealed": "v2"}, "of version 'v2'; this version reads 'v1'"),
        ({**GOOD, "extra": 1}, "has exactly the keys"),
        ({k: v for k, v in GOOD.items() if k != "ct"}, "has exactly the keys"),
        ({**GOOD, "kid": "k:1"}, "key id is 1 to 64 characters"),
        ({**GOOD, "kid": 7}, "key id is 1 to 64 characters"),
        ({**GOOD, "kid": ""}, "key id is 1 to 64 characters"),
        ({**GOOD, "n": 12}, "'n' is not a base64 string"),
        ({**GOOD, "n": "not base64!"}, "'n' is not valid base64"),
        ({**GOOD, "n": base64.b64encode(b"n" * 16).decode()}, "nonce is 12 bytes, got 16"),
        ({**GOOD, "ct": base64.b64encode(b"c" * 15).decode()}, "16-byte tag, got 15 bytes"),
    ],
)
def test_a_malformed_envelope_is_refused_naming_what_is_wrong(envelope, reason) -> None:
    with pytest.raises(InvalidPayload, match=reason):
        SealedValue.from_json(envelope)
    if isinstance(envelope, dict):
        with pytest.raises(InvalidPayload, match=f"^cannot decrypt field 'pdf': .*{reason}"):
            open_sealed({"pdf": envelope}, lane="email", encryptor=toy())


def test_is_sealed_and_key_ids() -> None:
    assert is_sealed({"$sealed": "anything"})
    assert not is_sealed({"sealed": "v1"})
    assert not is_sealed("$sealed")
    assert all(map(is_key_id, ["k1", "2026-05.primary_a", "x" * 64]))
    assert not any(map(is_key_id, ["", "x" * 65, "k 1", "k,1", "k:1", "ключ", None, 1]))


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"pdf"}, "must be a frozenset"),
        ("pdf", "must be a frozenset"),
        (frozenset({""}), "non-empty strings"),
        (frozenset({1}), "non-empty strings"),
    ],
)
def test_sealing_rules_refuse_mutable_or_odd_field_sets(fields, reason) -> None:
    with pytest.raises(ConfigurationError, match=reason):
        SealingRules(fields=fields)


# --- rotation -------------------------------------------------------------------------------------


def test_reseal_moves_every_old_key_value_to_the_active_key() -> None:
    old = sealed_payload(toy("k1", k1=K1))
    both = toy("k2", k2=K2, k1=K1)
    rotated = reseal(old, lane="email", encryptor=both)
    assert rotated is not None
    assert {rotated[key]["kid"] for key in ("password_reset_url", "pdf")} == {"k2"}
    assert open_sealed(rotated, lane="email", encryptor=toy("k2", k2=K2)) == payload()
    assert reseal(rotated, lane="email", encryptor=both) is None  # nothing left to do
    assert reseal({"to": "a@b.example"}, lane="email", encryptor=both) is None


def test_reseal_of_a_value_it_cannot_open_names_the_field_and_key() -> None:
    old = sealed_payload(toy("k0", k0=K1))
    with pytest.raises(InvalidPayload, match="key id 'k0' is not configured"):
        reseal(old, lane="email", encryptor=toy("k2", k2=K2))


# --- found by mutation testing (docs/testing.md) -----------------------------------------------
# The associated data and the sealed plaintext are a stored format: rows sealed today must open
# after an upgrade, so their exact bytes are pinned here.


def test_the_associated_data_bytes_are_pinned() -> None:
    assert field_aad("email", "prénom") == (
        '["leased-outbox/sealed-field/v1","email","prénom"]'.encode()
    )


def test_the_sealed_plaintext_is_compact_utf8_json() -> None:
    encryptor = toy()
    sealed = SealingRules(fields=frozenset({"pdf"})).seal(
        {"pdf": {"name": "reçu.pdf", "pages": [1, 2]}}, lane="email", encryptor=encryptor
    )
    envelope = SealedValue.from_json(sealed["pdf"])
    plaintext = encryptor.open(envelope, aad=field_aad("email", "pdf"))
    assert plaintext == '{"name":"reçu.pdf","pages":[1,2]}'.encode()


def test_a_nan_is_refused_when_sealing_not_stored_as_non_json() -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        SealingRules(fields=frozenset({"pdf"})).seal(
            {"pdf": [float("nan")]}, lane="email", encryptor=toy()
        )


def test_a_one_character_key_id_is_a_key_id() -> None:
    assert is_key_id("k")
    assert SealedValue(kid="k", nonce=b"n" * NONCE_BYTES, ciphertext=b"t" * TAG_BYTES).kid == "k"


def test_a_ciphertext_of_the_tag_alone_is_well_formed() -> None:
    # An empty body with its tag is a valid envelope shape; whether it opens is the cipher's call.
    value = SealedValue(kid="k1", nonce=b"n" * NONCE_BYTES, ciphertext=b"t" * TAG_BYTES)
    assert len(value.ciphertext) == TAG_BYTES


@pytest.mark.parametrize("key", ["n", "ct"])
def test_base64_with_characters_outside_the_alphabet_is_refused(key: str) -> None:
    # A lenient decoder would drop the "*" and read the rest; the envelope must be exact.
    text = base64.b64encode(b"n" * 12).decode()
    envelope = {**GOOD, "ct": base64.b64encode(b"c" * 24).decode(), key: "*" + text}
    with pytest.raises(InvalidPayload, match=f"'{key}' is not valid base64"):
        SealedValue.from_json(envelope)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pdf"}, "SealingRules.fields must be a frozenset of key names, got set {'pdf'}"),
        (
            frozenset({"pdf", 1}),
            "SealingRules.fields must hold non-empty strings (payload key names), got 1",
        ),
    ],
)
def test_sealing_rules_refusals_are_whole_sentences(fields, message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        SealingRules(fields=fields)
    assert str(refused.value) == message
