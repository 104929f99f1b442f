"""Webhook signing secrets at rest (ADR 0030): the stored forms, the binding to the endpoint, the
errors that name the key id, what a sealing pass rewrites, and the start check's refusal.

AES-256-GCM is the real cipher (``AesGcmEncryptor``, no I/O); the rules under test are the core's.
"""

from __future__ import annotations

import json
import secrets

import pytest

from outbox_adapters.crypto import AesGcmEncryptor
from outbox_core.errors import ConfigurationError, SecretUnavailable
from outbox_core.sealing import field_aad, webhook_secret_aad
from outbox_core.signing import WebhookSecret
from outbox_core.webhook_secrets import (
    check_secret_keys,
    is_sealed_secret,
    read_secret,
    reseal_secret,
    store_secret,
    stored_key_id,
)

K1 = AesGcmEncryptor({"k1": b"\x01" * 32}, active="k1")
K2_K1 = AesGcmEncryptor({"k2": b"\x02" * 32, "k1": b"\x01" * 32}, active="k2")
K2 = AesGcmEncryptor({"k2": b"\x02" * 32}, active="k2")
OTHER_K1 = AesGcmEncryptor({"k1": b"\x09" * 32}, active="k1")


def secret() -> WebhookSecret:
    return WebhookSecret.generate_from(secrets.token_bytes(32))


def test_without_keys_a_secret_is_stored_as_whsec_text_as_before() -> None:
    made = secret()
    stored = store_secret(made, endpoint_id=7, encryptor=None)
    assert stored == made.to_text()
    assert not is_sealed_secret(stored)
    assert stored_key_id(stored, endpoint_id=7) is None
    assert read_secret(stored, endpoint_id=7, encryptor=None) == made
    assert read_secret(stored, endpoint_id=7, encryptor=K1) == made  # keys read plaintext too


def test_with_keys_a_secret_is_stored_sealed_under_the_active_key_and_opens_for_its_endpoint() -> (
    None
):
    made = secret()
    stored = store_secret(made, endpoint_id=7, encryptor=K2_K1)
    envelope = json.loads(stored)
    assert set(envelope) == {"$sealed", "kid", "n", "ct"}
    assert envelope["kid"] == "k2"
    assert made.to_text() not in stored
    assert made.to_text().removeprefix("whsec_") not in stored
    assert made.key.hex() not in stored
    assert is_sealed_secret(stored)
    assert stored_key_id(stored, endpoint_id=7) == "k2"
    assert read_secret(stored, endpoint_id=7, encryptor=K2_K1) == made
    # Two seals of one secret differ (a fresh nonce each time).
    assert store_secret(made, endpoint_id=7, encryptor=K2_K1) != stored


def test_the_associated_data_binds_the_endpoint_and_the_purpose() -> None:
    assert webhook_secret_aad(7) != webhook_secret_aad(8)
    assert webhook_secret_aad(7) != field_aad("webhooks", "7")
    # Pinned: stored secrets were sealed with exactly these bytes; a change would strand them.
    assert webhook_secret_aad(7) == b'["leased-outbox/webhook-secret/v1","signing",7]'


def test_a_sealed_secret_copied_to_another_endpoint_does_not_open() -> None:
    stored = store_secret(secret(), endpoint_id=7, encryptor=K1)
    with pytest.raises(SecretUnavailable) as refused:
        read_secret(stored, endpoint_id=8, encryptor=K1)
    assert str(refused.value) == (
        "the signing secret of webhook endpoint 8 does not open under key id 'k1': it was"
        " altered, copied from another endpoint or scheme, or sealed under another key of that id"
    )


@pytest.mark.parametrize(
    ("encryptor", "reason"),
    [
        (
            None,
            (
                "the signing secret of webhook endpoint 7 is sealed under key id 'k1' and no"
                " encryption keys are configured"
            ),
        ),
        (
            K2,
            (
                "the signing secret of webhook endpoint 7 is sealed under key id 'k1', which is not"
                " among the configured key ids ['k2']"
            ),
        ),
        (
            OTHER_K1,
            (
                "the signing secret of webhook endpoint 7 does not open under key id 'k1': it was"
                " altered, copied from another endpoint or scheme, or sealed under another key of that id"
            ),
        ),
    ],
    ids=["no-keys", "key-id-missing", "wrong-key-same-id"],
)
def test_a_secret_that_cannot_be_opened_names_the_endpoint_and_the_key_id(
    encryptor: AesGcmEncryptor | None, reason: str
) -> None:
    made = secret()
    stored = store_secret(made, endpoint_id=7, encryptor=K1)
    with pytest.raises(SecretUnavailable) as refused:
        read_secret(stored, endpoint_id=7, encryptor=encryptor)
    assert str(refused.value) == reason
    assert made.to_text().removeprefix("whsec_") not in str(refused.value)


@pytest.mark.parametrize(
    "stored", ["{not json", '{"$sealed": "v9", "kid": "k1", "n": "", "ct": ""}', "{}"]
)
def test_a_stored_text_that_is_not_an_envelope_is_refused(stored: str) -> None:
    with pytest.raises(SecretUnavailable, match="endpoint 7 is not a sealed value"):
        read_secret(stored, endpoint_id=7, encryptor=K1)


def test_a_sealing_pass_seals_plaintext_and_only_rotation_reseals_other_keys() -> None:
    made = secret()
    plain = made.to_text()
    under_k1 = store_secret(made, endpoint_id=3, encryptor=K1)
    under_k2 = store_secret(made, endpoint_id=3, encryptor=K2_K1)

    sealed = reseal_secret(plain, endpoint_id=3, encryptor=K2_K1, rotate=False)
    assert sealed is not None
    assert stored_key_id(sealed, endpoint_id=3) == "k2"
    assert read_secret(sealed, endpoint_id=3, encryptor=K2) == made
    assert reseal_secret(under_k1, endpoint_id=3, encryptor=K2_K1, rotate=False) is None
    assert reseal_secret(under_k2, endpoint_id=3, encryptor=K2_K1, rotate=True) is None

    rotated = reseal_secret(under_k1, endpoint_id=3, encryptor=K2_K1, rotate=True)
    assert rotated is not None
    assert stored_key_id(rotated, endpoint_id=3) == "k2"
    assert read_secret(rotated, endpoint_id=3, encryptor=K2) == made  # k1 can go now
    with pytest.raises(SecretUnavailable, match="key id 'k1'"):
        reseal_secret(under_k1, endpoint_id=3, encryptor=K2, rotate=True)


def test_the_start_check_names_the_missing_key_id_and_its_endpoints() -> None:
    check_secret_keys({}, None)
    check_secret_keys({"k1": (1, 2)}, K2_K1)
    with pytest.raises(ConfigurationError) as missing:
        check_secret_keys({"k2": (1,), "k1": (4, 2, 4)}, K2)
    assert str(missing.value).startswith(
        "the signing secrets of webhook endpoint(s) 2, 4 are sealed under key id 'k1', and the"
        " configured key ids are ['k2']: add key 'k1' to the encryption keys"
    )
    with pytest.raises(ConfigurationError, match="'k2', and no encryption keys are configured"):
        check_secret_keys({"k2": (1,)}, None)
