"""Standard Webhooks' asymmetric scheme ``v1a`` (ADR 0017): Ed25519 over ``{msg_id}.{timestamp}.
{body}``, keys written ``whsk_``/``whpk_``, rotation signing with both keys, strict verification.

Two Ed25519 implementations: the sender's (``cryptography``, OpenSSL) and RFC 8032's own
equations (tests/support/ed25519_reference.py, pure Python). Each is checked against RFC 8032's
test vector 1, and each verifies what the other signs, so the sender's signatures are checked by
an implementation that shares no code with it.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import pytest
from tests.support import ed25519_reference as rfc8032
from tests.support.ed25519_reference import ReferenceEd25519

from outbox_adapters import webhook_keys
from outbox_adapters.clock import FakeClock
from outbox_adapters.extras import MissingExtra
from outbox_adapters.lanes.webhooks import redact_snippet
from outbox_adapters.memory import MemoryStore, MemoryWebhookRepository
from outbox_adapters.webhook_keys import (
    CryptographyEd25519,
    new_signing_secret,
    parse_signing_secret,
    public_key_of,
    signer_of,
)
from outbox_adapters.webhook_model import WebhookRefused
from outbox_core.errors import ConfigurationError, WebhookVerificationError
from outbox_core.signing import sign, signed_content, verify, webhook_headers
from outbox_core.signing_keys import (
    Ed25519Signer,
    Ed25519Verifier,
    PublicKey,
    SigningKey,
    WebhookSecret,
)

# RFC 8032, section 7.1, TEST 1 (the empty message).
VECTOR_PRIVATE = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
VECTOR_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
VECTOR_SIGNATURE = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)

REFERENCE = ReferenceEd25519()
OLD_KEY, NEW_KEY = SigningKey(b"\x01" * 32), SigningKey(b"\x02" * 32)
TS = 1_700_000_000
BODY = b'{"type":"invoice.paid","data":{"id":1}}'


def headers_of(*keys: SigningKey, body: bytes = BODY) -> dict[str, str]:
    signers = [Ed25519Signer(key, CryptographyEd25519()) for key in keys]
    return webhook_headers(signers, msg_id="msg_1", timestamp=TS, body=body)


def entries(headers: dict[str, str]) -> list[bytes]:
    found = []
    for entry in headers["webhook-signature"].split(" "):
        version, _, payload = entry.partition(",")
        assert version == "v1a"
        found.append(base64.b64decode(payload, validate=True))
    return found


@pytest.mark.parametrize("ed25519", [REFERENCE, CryptographyEd25519()], ids=["rfc8032", "openssl"])
def test_both_implementations_meet_rfc_8032_test_vector_1(ed25519) -> None:
    assert ed25519.public_key(VECTOR_PRIVATE) == VECTOR_PUBLIC
    assert ed25519.sign(VECTOR_PRIVATE, b"") == VECTOR_SIGNATURE
    assert ed25519.verify(VECTOR_PUBLIC, VECTOR_SIGNATURE, b"")
    assert not ed25519.verify(VECTOR_PUBLIC, VECTOR_SIGNATURE, b"x")


def test_the_sender_signs_v1a_over_id_timestamp_and_body_checked_by_rfc_8032() -> None:
    [signature] = entries(headers_of(OLD_KEY))
    public = rfc8032.public_key(OLD_KEY.private)
    assert rfc8032.verify(public, signature, b"msg_1.1700000000." + BODY)
    for other in (b"msg_1.1700000001." + BODY, b"msg_2.1700000000." + BODY, b"msg_1.1700000000."):
        assert not rfc8032.verify(public, signature, other)


def test_the_sender_s_signer_from_a_stored_key_is_checked_by_rfc_8032() -> None:
    """What an attempt signs with (signer_of, as both repositories build it)."""
    key = SigningKey.parse(new_signing_secret("v1a"))
    signer = signer_of(key, endpoint_id=1)
    entry = sign(signer, msg_id="msg_9", timestamp=TS, body=BODY)
    version, _, payload = entry.partition(",")
    assert version == "v1a"
    public = public_key_of(key)
    assert public.key == rfc8032.public_key(key.private)
    assert rfc8032.verify(public.key, base64.b64decode(payload), b"msg_9.1700000000." + BODY)


def test_during_rotation_both_keys_sign_and_each_public_key_verifies() -> None:
    headers = headers_of(NEW_KEY, OLD_KEY)
    new_sig, old_sig = entries(headers)
    content = signed_content("msg_1", str(TS), BODY)
    assert rfc8032.verify(rfc8032.public_key(NEW_KEY.private), new_sig, content)
    assert rfc8032.verify(rfc8032.public_key(OLD_KEY.private), old_sig, content)
    for key in (OLD_KEY, NEW_KEY):
        public = PublicKey(rfc8032.public_key(key.private))
        verify(headers, BODY, [public], now=TS, ed25519=REFERENCE)


def test_verify_takes_whpk_public_keys_and_checks_v1a_entries() -> None:
    headers = headers_of(OLD_KEY)
    public = PublicKey.parse(public_key_of(OLD_KEY).to_text())
    verify(headers, BODY, [public], now=TS, ed25519=REFERENCE)
    verify(headers, BODY, [Ed25519Verifier(public, CryptographyEd25519())], now=TS)
    # Beside a v1 secret the receiver also holds: the v1a entry is the one that matches.
    verify(headers, BODY, [WebhookSecret(b"s" * 32), public], now=TS, ed25519=REFERENCE)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"body": BODY + b" "}, "no v1a signature in the webhook matches any of the 1"),
        ({"key": NEW_KEY}, "no v1a signature in the webhook matches any of the 1"),
    ],
)
def test_verify_refuses_a_changed_body_or_another_key(change: dict[str, Any], message: str) -> None:
    headers = headers_of(OLD_KEY)
    public = PublicKey(rfc8032.public_key(change.get("key", OLD_KEY).private))
    with pytest.raises(WebhookVerificationError, match=message):
        verify(headers, change.get("body", BODY), [public], now=TS, ed25519=REFERENCE)


@pytest.mark.parametrize(
    "entry",
    [
        "v1a,AAAA",
        "v1a,",
        "v1a," + base64.b64encode(b"e" * 63).decode(),
        "v1a," + base64.b64encode(b"e" * 65).decode(),
        "v1a," + base64.b64encode(b"e" * 64).decode().rstrip("="),
        "v1a,not base64!",
    ],
)
def test_a_malformed_v1a_entry_refuses_the_header_even_beside_a_valid_one(entry: str) -> None:
    headers = headers_of(OLD_KEY)
    headers["webhook-signature"] += f" {entry}"
    public = PublicKey(rfc8032.public_key(OLD_KEY.private))
    with pytest.raises(WebhookVerificationError, match="not the base64 of a 64-byte Ed25519"):
        verify(headers, BODY, [public], now=TS, ed25519=REFERENCE)


def test_a_v1_only_header_has_no_v1a_signature_for_a_public_key() -> None:
    v1 = webhook_headers([WebhookSecret(b"s" * 32)], msg_id="msg_1", timestamp=TS, body=BODY)
    public = PublicKey(rfc8032.public_key(OLD_KEY.private))
    with pytest.raises(WebhookVerificationError, match=r"no v1a signature \(1 of other"):
        verify(v1, BODY, [public], now=TS, ed25519=REFERENCE)


def test_a_public_key_without_an_ed25519_implementation_is_a_configuration_error() -> None:
    public = PublicKey(rfc8032.public_key(OLD_KEY.private))
    with pytest.raises(ConfigurationError, match="pass ed25519="):
        verify(headers_of(OLD_KEY), BODY, [public], now=TS)
    with pytest.raises(ConfigurationError, match=r"WebhookSecret \(whsec_\) or PublicKey"):
        verify(headers_of(OLD_KEY), BODY, ["whpk_..."], now=TS)


# --- key texts ----------------------------------------------------------------------------------


def test_keys_round_trip_through_their_text_forms() -> None:
    text = OLD_KEY.to_text()
    assert text.startswith("whsk_")
    assert SigningKey.parse(text) == OLD_KEY
    assert SigningKey.parse(text.rstrip("=")) == OLD_KEY  # padding optional
    public = public_key_of(OLD_KEY)
    assert public.to_text().startswith("whpk_")
    assert PublicKey.parse(public.to_text()) == public
    assert public.key == rfc8032.public_key(OLD_KEY.private)


def test_the_64_byte_whsk_form_is_read_and_its_halves_must_agree() -> None:
    public = rfc8032.public_key(OLD_KEY.private)
    both = "whsk_" + base64.b64encode(OLD_KEY.private + public).decode()
    assert parse_signing_secret(both) == SigningKey(OLD_KEY.private, public)
    assert public_key_of(SigningKey.parse(both)).key == public
    wrong = "whsk_" + base64.b64encode(OLD_KEY.private + b"\x07" * 32).decode()
    with pytest.raises(ConfigurationError, match="second half is not its private key's public"):
        parse_signing_secret(wrong)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (SigningKey.parse, base64.b64encode(b"k" * 32).decode(), "'whsk_' is missing"),
        (SigningKey.parse, "whsk_", "is empty"),
        (SigningKey.parse, "whsk_not base64!", "not standard base64"),
        (SigningKey.parse, "whsk_A", "cannot decode"),
        (SigningKey.parse, "whsk_" + base64.b64encode(b"k" * 31).decode(), "31 bytes"),
        (SigningKey.parse, "whsec_" + base64.b64encode(b"k" * 32).decode(), "'whsk_' is missing"),
        (PublicKey.parse, "whsk_" + base64.b64encode(b"k" * 32).decode(), "'whpk_' is missing"),
        (PublicKey.parse, "whpk_" + base64.b64encode(b"k" * 64).decode(), "64 bytes: an Ed25519"),
        (PublicKey.parse, "whpk_%%%", "not standard base64"),
        (PublicKey.parse, 42, "must be text"),
    ],
)
def test_a_malformed_key_text_is_refused_naming_the_problem(parse, text, message) -> None:
    with pytest.raises(ConfigurationError, match=message) as refused:
        parse(text)
    if isinstance(text, str) and len(text) > 8:
        assert text.removeprefix("whsk_").removeprefix("whpk_") not in str(refused.value)


def test_a_signing_key_never_shows_itself() -> None:
    text = OLD_KEY.to_text()
    signer = Ed25519Signer(OLD_KEY, REFERENCE)
    for shown in (repr(OLD_KEY), str(OLD_KEY), repr(signer), str(signer)):
        assert text.removeprefix("whsk_") not in shown
    assert "whpk_" in repr(signer)  # the public key may be shown


def test_a_receiver_echoing_a_key_or_a_v1a_signature_is_redacted() -> None:
    headers = headers_of(OLD_KEY)
    bare_signature = headers["webhook-signature"].removeprefix("v1a,")
    bare_key = OLD_KEY.to_text().removeprefix("whsk_")
    words = [*headers.values(), OLD_KEY.to_text()]
    clean = redact_snippet(f"got {bare_signature} and {bare_key}", words)
    assert bare_signature not in clean
    assert bare_key not in clean


# --- registration (the memory repository; PostgreSQL: tests/integration/test_webhook_v1a.py) -----


def memory_repository() -> MemoryWebhookRepository:
    clock = FakeClock()
    return MemoryWebhookRepository(MemoryStore(clock), MemoryStore(clock))


async def test_the_key_s_prefix_chooses_the_endpoint_s_scheme_and_rotation_keeps_it() -> None:
    repo = memory_repository()
    v1 = await repo.add_endpoint(
        "https://a.example/in", ["*"], secret=new_signing_secret("v1"), tenant="acme"
    )
    first = new_signing_secret("v1a")
    v1a = await repo.add_endpoint("https://b.example/in", ["*"], secret=first, tenant="acme")
    assert (v1.scheme, v1a.scheme) == ("v1", "v1a")
    assert await repo.public_keys(v1a.id) == (public_key_of(SigningKey.parse(first)),)
    with pytest.raises(WebhookRefused, match="signs with scheme v1a: rotate it with a whsk_"):
        await repo.rotate_secret(v1a.id, new_secret=new_signing_secret("v1"))
    with pytest.raises(WebhookRefused, match="signs with scheme v1: rotate it with a whsec_"):
        await repo.rotate_secret(v1.id, new_secret=new_signing_secret("v1a"))
    with pytest.raises(WebhookRefused, match="no public key"):
        await repo.public_keys(v1.id)
    second = new_signing_secret("v1a")
    await repo.rotate_secret(v1a.id, new_secret=second)
    assert await repo.public_keys(v1a.id) == tuple(
        public_key_of(SigningKey.parse(k)) for k in (second, first)
    )


@pytest.fixture
def without_cryptography(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a host without the ``crypto`` extra: ``cryptography`` does not import."""
    for name in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    monkeypatch.setattr(webhook_keys, "_shared", [])


@pytest.mark.usefixtures("without_cryptography")
async def test_without_the_crypto_extra_a_v1a_registration_names_the_install() -> None:
    with pytest.raises(MissingExtra, match=r"pip install 'leased-outbox\[crypto\]'"):
        parse_signing_secret(new_signing_secret("v1a"))
    repo = memory_repository()
    with pytest.raises(MissingExtra, match=r"v1a \(Ed25519\).*'crypto' extra"):
        await repo.add_endpoint(
            "https://b.example/in", ["*"], secret=new_signing_secret("v1a"), tenant="acme"
        )
    assert await repo.list_endpoints() == []
    # v1 needs no extra.
    await repo.add_endpoint(
        "https://a.example/in", ["*"], secret=new_signing_secret("v1"), tenant="acme"
    )
