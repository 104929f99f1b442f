"""The core's rules for Ed25519 keys and the stored form of an endpoint's key: bad values are
refused naming what is wrong, a plaintext key of the wrong form never signs, and no repr shows a
private key."""

from __future__ import annotations

import pytest

from outbox_core.errors import ConfigurationError, SecretUnavailable
from outbox_core.signing_keys import PublicKey, SigningKey
from outbox_core.webhook_secrets import check_scheme, read_secret

PRIVATE = bytes(range(32))


@pytest.mark.parametrize(
    ("value", "said"),
    [(b"short", "got 5 bytes"), ("not bytes", "got str"), (b"x" * 33, "33 bytes")],
)
def test_an_ed25519_key_of_the_wrong_size_or_type_is_refused_naming_it(value: object, said: str):
    with pytest.raises(ConfigurationError, match=f"Ed25519 private key is 32 bytes.*{said}"):
        SigningKey(value)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=f"Ed25519 public key is 32 bytes.*{said}"):
        PublicKey(value)  # type: ignore[arg-type]


def test_a_public_key_shows_itself_as_the_whpk_text_it_is_handed_out_as() -> None:
    public = PublicKey(bytes(32))
    assert repr(public) == f"PublicKey({public.to_text()})"
    assert public.to_text().startswith("whpk_")


@pytest.mark.parametrize("scheme", ["v2", "", None, "V1"])
def test_an_unknown_signature_scheme_is_refused_naming_the_two(scheme: object) -> None:
    with pytest.raises(ConfigurationError, match="'v1' \\(HMAC-SHA256\\) or 'v1a' \\(Ed25519\\)"):
        check_scheme(scheme)
    assert check_scheme("v1a") == "v1a"


@pytest.mark.parametrize(
    ("stored", "scheme"),
    [("whsec_not-base64!", "v1"), ("whsk_" + "A" * 10, "v1a"), ("whsec_" + "A" * 43 + "=", "v1a")],
)
def test_a_stored_plaintext_key_that_does_not_read_is_unavailable_naming_the_endpoint(
    stored: str, scheme: str
) -> None:
    with pytest.raises(SecretUnavailable, match=f"endpoint 7 \\(scheme {scheme}\\) does not read"):
        read_secret(stored, endpoint_id=7, encryptor=None, scheme=scheme)
