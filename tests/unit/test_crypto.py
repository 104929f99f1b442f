"""``AesGcmEncryptor``: AES-256-GCM behind the Encryptor port, keys by id, nothing secret shown.

What it promises: it is real AES-256-GCM (a published known-answer vector opens); every seal has a
fresh 96-bit nonce; a tampered value, another field's or lane's associated data, or a value under
an unknown key id fails with the key id named; keys that aren't 256 bits, malformed key ids and key
lists are refused at construction naming the key id or the entry, never the key; ``repr`` shows
key ids only.
"""

from __future__ import annotations

import base64
import pickle

import pytest

from outbox_adapters.crypto import KEY_BYTES, AesGcmEncryptor, format_key_entry, generate_key
from outbox_core.errors import ConfigurationError, InvalidPayload
from outbox_core.ports import Encryptor
from outbox_core.sealing import SealedValue, SealingRules, field_aad, open_sealed

K1 = bytes(range(32))
K2 = bytes(range(32, 64))
AAD = field_aad("email", "password_reset_url")


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_it_is_aes_256_gcm_by_a_known_answer() -> None:
    # "The Galois/Counter Mode of Operation (GCM)", McGrew & Viega, test case 16: AES-256,
    # 96-bit IV, with associated data. The tag is appended to the ciphertext, as v1 stores it.
    key = bytes.fromhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
    sealed = SealedValue(
        kid="nist",
        nonce=bytes.fromhex("cafebabefacedbaddecaf888"),
        ciphertext=bytes.fromhex(
            "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
            "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662"
            "76fc6ece0f4e1768cddf8853bb2d551b"
        ),
    )
    aad = bytes.fromhex("feedfacedeadbeeffeedfacedeadbeefabaddad2")
    plaintext = AesGcmEncryptor({"nist": key}, active="nist").open(sealed, aad=aad)
    assert plaintext == bytes.fromhex(
        "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
        "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39"
    )


def test_seal_and_open_round_trip_under_the_active_key() -> None:
    encryptor: Encryptor = AesGcmEncryptor({"k1": K1}, active="k1")
    sealed = encryptor.seal(b"https://shop.example/reset?t=1", aad=AAD)
    assert sealed.kid == "k1"
    assert b"shop.example" not in sealed.ciphertext
    assert len(sealed.ciphertext) == len(b"https://shop.example/reset?t=1") + 16
    assert encryptor.open(sealed, aad=AAD) == b"https://shop.example/reset?t=1"


def test_every_seal_draws_a_fresh_nonce() -> None:
    encryptor = AesGcmEncryptor({"k1": K1}, active="k1")
    sealed = [encryptor.seal(b"same", aad=AAD) for _ in range(200)]
    assert len({s.nonce for s in sealed}) == 200
    assert len({s.ciphertext for s in sealed}) == 200  # same plaintext, never the same ciphertext


def test_a_tampered_value_fails_naming_the_key_id() -> None:
    encryptor = AesGcmEncryptor({"k1": K1}, active="k1")
    sealed = encryptor.seal(b"secret", aad=AAD)
    for flipped in range(len(sealed.ciphertext)):
        raw = bytearray(sealed.ciphertext)
        raw[flipped] ^= 0x80
        with pytest.raises(InvalidPayload, match="does not authenticate under key id 'k1'"):
            encryptor.open(SealedValue("k1", sealed.nonce, bytes(raw)), aad=AAD)
    other_nonce = bytes(12)
    with pytest.raises(InvalidPayload, match="does not authenticate"):
        encryptor.open(SealedValue("k1", other_nonce, sealed.ciphertext), aad=AAD)


def test_the_wrong_associated_data_fails() -> None:
    encryptor = AesGcmEncryptor({"k1": K1}, active="k1")
    sealed = encryptor.seal(b"secret", aad=field_aad("email", "password_reset_url"))
    for aad in (field_aad("email", "invite_url"), field_aad("billing", "password_reset_url")):
        with pytest.raises(InvalidPayload, match="moved from another field or lane"):
            encryptor.open(sealed, aad=aad)


def test_another_key_under_the_same_id_fails() -> None:
    sealed = AesGcmEncryptor({"k1": K1}, active="k1").seal(b"secret", aad=AAD)
    with pytest.raises(InvalidPayload, match="does not authenticate under key id 'k1'"):
        AesGcmEncryptor({"k1": K2}, active="k1").open(sealed, aad=AAD)


def test_an_unknown_key_id_is_named() -> None:
    sealed = AesGcmEncryptor({"k1": K1}, active="k1").seal(b"secret", aad=AAD)
    with pytest.raises(InvalidPayload, match=r"^key id 'k1' is not configured$"):
        AesGcmEncryptor({"k2": K2}, active="k2").open(sealed, aad=AAD)


def test_old_keys_open_while_the_active_one_seals() -> None:
    old = AesGcmEncryptor({"k1": K1}, active="k1")
    rotated = AesGcmEncryptor({"k2": K2, "k1": K1}, active="k2")
    stored = SealingRules().seal({"invite_url": "https://x.example/i"}, lane="email", encryptor=old)
    assert open_sealed(stored, lane="email", encryptor=rotated) == {
        "invite_url": "https://x.example/i"
    }
    assert rotated.seal(b"new", aad=AAD).kid == "k2"
    assert rotated.key_ids == frozenset({"k1", "k2"})
    assert rotated.active_key_id == "k2"


@pytest.mark.parametrize("size", [0, 16, 24, 31, 33, 64])
def test_keys_that_are_not_256_bits_are_refused_naming_the_key_id(size: int) -> None:
    with pytest.raises(ConfigurationError, match=f"key 'k-old' is {size * 8} bits.*256-bit"):
        AesGcmEncryptor({"k-new": K1, "k-old": bytes(size)}, active="k-new")


@pytest.mark.parametrize(
    ("keys", "active", "reason"),
    [
        ({}, "k1", "at least one key"),
        ({"k:1": K1}, "k:1", "key id is 1 to 64 characters"),
        ({"": K1}, "", "key id is 1 to 64 characters"),
        ({"k1": "x" * 32}, "k1", "key 'k1' must be bytes"),
        ({"k1": K1}, "k2", "active encryption key id 'k2' is not among"),
    ],
)
def test_other_unusable_keys_are_refused(keys, active, reason) -> None:
    with pytest.raises(ConfigurationError, match=reason):
        AesGcmEncryptor(keys, active=active)


def test_a_key_list_parses_with_the_first_entry_active() -> None:
    text = f"k2:{b64(K2)}, k1:{b64(K1)}"
    encryptor = AesGcmEncryptor.from_key_list(text)
    assert encryptor.active_key_id == "k2"
    assert encryptor.key_ids == frozenset({"k1", "k2"})
    lines = f"# rotated 2026-05\nk3:{b64(K1)}\n\n  k2 : {b64(K2)}  \n"
    assert AesGcmEncryptor.from_key_list(lines).key_ids == frozenset({"k2", "k3"})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no key in it"),
        ("# only a comment\n", "no key in it"),
        (b64(K1), "entry 1 is not kid:base64key"),
        (f"k1:{b64(K1)},k1:{b64(K2)}", "key id 'k1' is given twice"),
        (f"k1:{b64(K1)},k2:not-base64!", "key of key id 'k2' \\(entry 2\\) is not valid base64"),
        (f"k1:{b64(K1[:21])}", "key 'k1' is 168 bits"),
        (f"bad id:{b64(K1)}", "key id is 1 to 64 characters"),
    ],
)
def test_a_bad_key_list_is_refused_without_showing_key_material(text: str, reason: str) -> None:
    with pytest.raises(ConfigurationError, match=reason) as caught:
        AesGcmEncryptor.from_key_list(text, source="OUTBOX_ENCRYPTION_KEYS")
    assert str(caught.value).startswith("OUTBOX_ENCRYPTION_KEYS: ")
    for key in (K1, K2, K1[:21]):
        assert b64(key)[:8] not in str(caught.value)


def test_a_key_file_is_read_and_a_missing_one_is_named(tmp_path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"k1:{b64(K1)}\n")
    assert AesGcmEncryptor.from_file(path).key_ids == frozenset({"k1"})
    with pytest.raises(ConfigurationError, match=r"cannot read the key file .*nope"):
        AesGcmEncryptor.from_file(tmp_path / "nope")
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigurationError, match="not UTF-8 text"):
        AesGcmEncryptor.from_file(path)
    path.write_text(f"k1:{b64(K1[:30])}\n")
    with pytest.raises(ConfigurationError, match=r"^the key file '.*keys': .* 'k1' is 240 bits"):
        AesGcmEncryptor.from_file(path)


def test_repr_str_and_pickle_never_show_key_material() -> None:
    encryptor = AesGcmEncryptor({"k2": K2, "k1": K1}, active="k2")
    for shown in (repr(encryptor), str(encryptor), f"{encryptor}"):
        assert shown == "AesGcmEncryptor(key_ids=['k1', 'k2'], active='k2')"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(encryptor)
    assert not hasattr(encryptor, "__dict__")  # __slots__: no stray attribute holding a key


def test_generated_keys_are_fresh_256_bit_entries() -> None:
    keys = {generate_key() for _ in range(50)}
    assert len(keys) == 50
    assert {len(key) for key in keys} == {KEY_BYTES}
    entry = format_key_entry("k9", K1)
    assert entry == f"k9:{b64(K1)}"
    assert AesGcmEncryptor.from_key_list(entry).key_ids == frozenset({"k9"})
    with pytest.raises(ConfigurationError, match="key 'k9' is 128 bits"):
        format_key_entry("k9", bytes(16))
