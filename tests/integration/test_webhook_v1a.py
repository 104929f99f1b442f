"""Standard Webhooks' asymmetric scheme ``v1a`` end to end (ADR 0017) on real PostgreSQL, a real
local HTTP receiver, the real webhook workers and the real CLI.

The receiver verifies every request with the endpoint's PUBLIC key only (``whpk_``), through the
core's ``verify`` and through RFC 8032's own equations (tests/support/ed25519_reference.py),
which share no code with the sender's OpenSSL. The private key is sealed at rest (ADR 0030) and
never printed. During a rotation both keys sign and each public key verifies; once the overlap
has passed only the new key signs. Bad keys are refused with a clear error and nothing written.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from tests.support import ed25519_reference as rfc8032
from tests.support.cli import one_line_error, outbox
from tests.support.ed25519_reference import ReferenceEd25519
from tests.support.postgres import empty_outbox
from tests.support.receivers import HttpReceiver, ReceivedRequest
from tests.support.webhooks import GUARD, QUICK, TIMING, Webhooks

from outbox_adapters.crypto import AesGcmEncryptor
from outbox_adapters.http import HttpxWebhookSender
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.postgres.webhooks import WebhookRefused, WebhookRepository
from outbox_adapters.postgres.webhooks.secrets import seal_stored_secrets
from outbox_adapters.webhook_keys import new_signing_secret, public_key_of
from outbox_core.errors import ConfigurationError, WebhookVerificationError
from outbox_core.ports import Encryptor
from outbox_core.signing import verify
from outbox_core.signing_keys import PublicKey, SigningKey

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("tables_emptied")]

KEY1 = b"\x11" * 32
K1 = AesGcmEncryptor({"k1": KEY1}, active="k1")
KEYS_ENV = {"OUTBOX_ENCRYPTION_KEYS": f"k1:{base64.b64encode(KEY1).decode()}"}
LOCAL = ("--allow-destination", "127.0.0.0/8", "--allow-http")


@pytest.fixture
def tables_emptied(dsn: str) -> Iterator[None]:
    """Before and after: a sealed key left behind stops a later keyless worker from starting."""
    empty_outbox(dsn)
    yield
    empty_outbox(dsn)


async def deliver(wh: Webhooks, keys: Encryptor | None) -> None:
    async with HttpxWebhookSender(GUARD) as sender:
        await WebhookWorkers(
            wh.pool,
            sender,
            drain_config=drain_lane(poll_interval=0.05),
            delivery_config=delivery_lane(timing=TIMING, backoff=QUICK, poll_interval=0.05),
            encryptor=keys,
        ).run(drain=True)


def v1a_entries(request: ReceivedRequest) -> list[bytes]:
    entries = request.headers["webhook-signature"].split(" ")
    assert all(entry.startswith("v1a,") for entry in entries), entries
    return [base64.b64decode(entry.removeprefix("v1a,"), validate=True) for entry in entries]


def verified_by(request: ReceivedRequest, public: PublicKey) -> bool:
    """The receiver's check with one public key: the core's verify AND RFC 8032's equations
    over the exact bytes received must agree."""
    content = (
        f"{request.headers['webhook-id']}.{request.headers['webhook-timestamp']}.".encode()
        + request.body
    )
    by_rfc = any(rfc8032.verify(public.key, sig, content) for sig in v1a_entries(request))
    try:
        verify(
            request.headers,
            request.body,
            [public],
            now=int(time.time()),
            ed25519=ReferenceEd25519(),
        )
    except WebhookVerificationError:
        assert not by_rfc
        return False
    assert by_rfc
    return True


async def test_a_v1a_endpoint_delivers_verifiable_with_its_public_key_through_a_rotation(
    wh: Webhooks,
) -> None:
    repo = WebhookRepository(wh.pool, encryptor=K1)
    first, second = new_signing_secret("v1a"), new_signing_secret("v1a")
    first_public, second_public = (public_key_of(SigningKey.parse(k)) for k in (first, second))
    with HttpReceiver() as hook:
        made = await repo.add_endpoint(hook.url(), ["invoice.paid"], secret=first, tenant="acme")
        assert made.scheme == "v1a"
        assert (await repo.endpoint(made.id)).scheme == "v1a"  # type: ignore[union-attr]
        assert await repo.public_keys(made.id) == (first_public,)
        # Sealed at rest: no form of the private key is in the table.
        [(stored,)] = await wh.rows("SELECT secret FROM outbox_webhook_secret")
        assert stored.startswith('{"$sealed"')
        private = SigningKey.parse(first).private
        assert not any(f in stored for f in (first, base64.b64encode(private).decode()))

        await wh.enqueue("invoice.paid", invoice=1)
        await deliver(wh, K1)
        [one] = hook.requests
        assert len(v1a_entries(one)) == 1
        assert verified_by(one, first_public)
        assert not verified_by(one, second_public)

        # Rotation: both keys sign for the overlap, each public key verifies on its own.
        await repo.rotate_secret(made.id, new_secret=second, overlap=timedelta(hours=1))
        assert await repo.public_keys(made.id) == (second_public, first_public)
        await wh.enqueue("invoice.paid", invoice=2)
        await deliver(wh, K1)
        two = hook.requests[1]
        assert len(v1a_entries(two)) == 2
        assert verified_by(two, first_public)
        assert verified_by(two, second_public)

        # The overlap has passed: the old key is retired, only the new one signs.
        await wh.rows(
            "UPDATE outbox_webhook_secret SET expires_at = now() - interval '1 second'"
            " WHERE expires_at IS NOT NULL RETURNING id"
        )
        assert await repo.public_keys(made.id) == (second_public,)
        await wh.enqueue("invoice.paid", invoice=3)
        await deliver(wh, K1)
        three = hook.requests[2]
        assert len(v1a_entries(three)) == 1
        assert verified_by(three, second_public)
        assert not verified_by(three, first_public)


async def test_a_plaintext_whsk_key_is_sealed_by_a_sealing_pass_and_still_signs(
    wh: Webhooks,
) -> None:
    key = new_signing_secret("v1a")
    with HttpReceiver() as hook:
        made = await wh.repo.add_endpoint(hook.url(), ["invoice.paid"], secret=key, tenant="acme")
        [(stored,)] = await wh.rows("SELECT secret FROM outbox_webhook_secret")
        assert stored == key  # no encryption keys: the whsk_ text
        sealing = await seal_stored_secrets(wh.pool, K1)
        assert len(sealing.sealed) == 1
        assert not sealing.unreadable
        await wh.enqueue("invoice.paid", invoice=1)
        await deliver(wh, K1)
        [request] = hook.requests
        assert verified_by(request, public_key_of(SigningKey.parse(key)))
        assert await WebhookRepository(wh.pool, encryptor=K1).public_keys(made.id) == (
            public_key_of(SigningKey.parse(key)),
        )


async def test_bad_keys_are_refused_with_a_clear_error_and_nothing_written(wh: Webhooks) -> None:
    short = "whsk_" + base64.b64encode(b"k" * 31).decode()
    with pytest.raises(ConfigurationError, match="31 bytes: an Ed25519 private key is 32 bytes"):
        await wh.repo.add_endpoint("http://127.0.0.1:9/x", ["a.b"], secret=short, tenant="acme")
    assert await wh.rows("SELECT id FROM outbox_webhook_endpoint") == []
    made = await wh.repo.add_endpoint(
        "http://127.0.0.1:9/x", ["a.b"], secret=new_signing_secret("v1a"), tenant="acme"
    )
    with pytest.raises(WebhookRefused, match="signs with scheme v1a: rotate it with a whsk_"):
        await wh.repo.rotate_secret(made.id, new_secret=new_signing_secret("v1"))
    with pytest.raises(ConfigurationError, match="not standard base64"):
        await wh.repo.rotate_secret(made.id, new_secret="whsk_not base64!")
    assert len(await wh.rows("SELECT id FROM outbox_webhook_secret")) == 1
    v1 = await wh.repo.add_endpoint(
        "http://127.0.0.1:9/y", ["a.b"], secret=new_signing_secret("v1"), tenant="acme"
    )
    with pytest.raises(WebhookRefused, match=r"signs v1 \(HMAC-SHA256\): it has no public key"):
        await wh.repo.public_keys(v1.id)


async def cli(*args: str, env: dict[str, str]) -> Any:
    return await asyncio.to_thread(outbox, *args, env=env)


async def test_the_cli_adds_a_v1a_endpoint_prints_its_public_key_and_never_the_private_one(
    wh: Webhooks, dsn: str
) -> None:
    with HttpReceiver() as hook:
        added = await cli(
            "endpoints", "add", "--tenant", "acme", "--url", hook.url(), "--event-type", "invoice.paid",
            "--scheme", "v1a", *LOCAL, "--database-url", dsn, "--json", env=KEYS_ENV,
        )  # fmt: skip
        assert added.exit_code == 0, added.output
        document = json.loads(added.stdout)
        assert document["endpoint"]["scheme"] == "v1a"
        assert "secret" not in document
        public = PublicKey.parse(document["public_key"])
        endpoint_id = str(document["endpoint"]["id"])
        shown = await cli(
            "endpoints", "public-key", endpoint_id, "--database-url", dsn, "--json", env=KEYS_ENV
        )
        assert json.loads(shown.stdout)["public_keys"] == [public.to_text()]
        text = await cli("endpoints", "add", "--tenant", "acme", "--url", hook.url(), "--event-type", "a.b",
                         "--scheme", "v1a", *LOCAL, "--database-url", dsn, env=KEYS_ENV)  # fmt: skip
        assert "public key: whpk_" in text.stdout
        assert "whsk_" not in text.stdout

        await wh.enqueue("invoice.paid", invoice=1)
        await deliver(wh, K1)
        [request] = hook.requests
        assert verified_by(request, public)

        rotated = await cli(
            "endpoints", "rotate-secret", endpoint_id, "--database-url", dsn, "--json",
            env=KEYS_ENV,
        )  # fmt: skip
        assert rotated.exit_code == 0, rotated.output
        newer = PublicKey.parse(json.loads(rotated.stdout)["public_key"])
        listed = await cli("endpoints", "public-key", endpoint_id, "--database-url", dsn,
                           env=KEYS_ENV)  # fmt: skip
        assert listed.stdout.split() == [newer.to_text(), public.to_text()]
        for result in (added, shown, text, rotated, listed):
            assert "whsk_" not in result.output
    with psycopg.connect(dsn) as conn:
        stored = [s for (s,) in conn.execute("SELECT secret FROM outbox_webhook_secret")]
    assert all(s.startswith('{"$sealed"') for s in stored)
    # Without the keys the private keys can't be opened: the command says which key id.
    refused = await cli("endpoints", "public-key", endpoint_id, "--database-url", dsn, env={})
    assert refused.exit_code != 0
    assert "k1" in one_line_error(refused)
