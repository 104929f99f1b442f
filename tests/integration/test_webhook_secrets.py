"""Webhook signing secrets sealed at rest (ADR 0030) on real PostgreSQL, real local HTTP receivers
and the real CLI: sealed on registration and rotation, opened only by the worker that signs, the
receiver verifying with the secret it was given; a worker without the key refuses to start; an
attempt whose secret can't be opened posts nothing and is retried; plaintext secrets keep signing
with a loud warning until ``outbox schema apply`` (or ``outbox keys seal-secrets``) seals them;
``outbox keys rotate`` re-seals them; a sealing pass never writes over a secret changed meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from tests.support.cli import one_line_error, outbox
from tests.support.postgres import empty_outbox
from tests.support.receivers import HttpReceiver
from tests.support.webhooks import GUARD, QUICK, TIMING, Webhooks, new_secret

from outbox_adapters.crypto import AesGcmEncryptor
from outbox_adapters.http import HttpxWebhookSender
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.postgres.webhooks import WebhookRepository, seal_stored_secrets
from outbox_adapters.postgres.webhooks.secrets import (
    plan_sealing,
    read_stored_secrets,
    write_sealing,
)
from outbox_core.errors import ConfigurationError
from outbox_core.messages import Mark
from outbox_core.ports import Encryptor
from outbox_core.signing import WebhookSecret, verify
from outbox_core.webhook_secrets import SECRET_UNAVAILABLE

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("secrets_table_emptied")]

KEY1, KEY2 = b"\x11" * 32, b"\x22" * 32
ENTRY1 = f"k1:{base64.b64encode(KEY1).decode()}"
ENTRY2 = f"k2:{base64.b64encode(KEY2).decode()}"
K1 = AesGcmEncryptor({"k1": KEY1}, active="k1")
K2 = AesGcmEncryptor({"k2": KEY2}, active="k2")
K2_K1 = AesGcmEncryptor({"k2": KEY2, "k1": KEY1}, active="k2")
LOCAL = {"OUTBOX_ALLOW_DESTINATION": "127.0.0.0/8", "OUTBOX_ALLOW_HTTP": "1"}


@pytest.fixture
def secrets_table_emptied(dsn: str) -> Iterator[None]:
    """Empty before AND after: a sealed secret left behind would stop a later test's keyless
    webhook worker from starting (it refuses without the key), which is the point of it."""
    empty_outbox(dsn)
    yield
    empty_outbox(dsn)


def workers(wh: Webhooks, sender: HttpxWebhookSender, keys: Encryptor | None) -> WebhookWorkers:
    return WebhookWorkers(
        wh.pool,
        sender,
        drain_config=drain_lane(poll_interval=0.05),
        delivery_config=delivery_lane(timing=TIMING, backoff=QUICK, poll_interval=0.05),
        encryptor=keys,
    )


async def deliver(wh: Webhooks, keys: Encryptor | None) -> None:
    async with HttpxWebhookSender(GUARD) as sender:
        await workers(wh, sender, keys).run(drain=True)


def verifies(request: Any, *secrets: str) -> None:
    """The receiver's check: every request verifies with each secret it was given."""
    for secret in secrets:
        verify(request.headers, request.body, [WebhookSecret.parse(secret)], now=int(time.time()))


async def stored(wh: Webhooks) -> list[tuple[int, str]]:
    return [
        (e, s)
        for e, s in await wh.rows(
            "SELECT endpoint_id, secret FROM outbox_webhook_secret ORDER BY id"
        )
    ]


async def cli(*args: str, env: dict[str, str]) -> Any:
    """``outbox ...`` from an async test: the command runs its own event loop, so in a thread."""
    return await asyncio.to_thread(outbox, *args, env=env)


def kid_of(text: str) -> str:
    envelope = json.loads(text)
    assert set(envelope) == {"$sealed", "kid", "n", "ct"}
    return str(envelope["kid"])


def no_copy_of(secret: str, texts: list[str]) -> None:
    key = WebhookSecret.parse(secret).key
    for form in (secret, base64.b64encode(key).decode(), key.hex()):
        assert not any(form in text for text in texts)


async def test_sealed_secrets_sign_every_delivery_and_the_table_holds_only_ciphertext(
    wh: Webhooks,
) -> None:
    first, second = new_secret(), new_secret()
    repo = WebhookRepository(wh.pool, encryptor=K1)
    with HttpReceiver() as hook:
        made = await repo.add_endpoint(hook.url(), ["invoice.paid"], secret=first, tenant="acme")
        await repo.rotate_secret(made.id, new_secret=second, overlap=timedelta(hours=1))
        rows = await stored(wh)
        assert [(e, kid_of(s)) for e, s in rows] == [(made.id, "k1"), (made.id, "k1")]
        no_copy_of(first, [s for _, s in rows])
        no_copy_of(second, [s for _, s in rows])
        await wh.enqueue("invoice.paid", invoice=1)
        await deliver(wh, K1)
        [request] = hook.requests
        verifies(request, first, second)  # both sign during the overlap
        assert len(request.headers["webhook-signature"].split()) == 2


async def test_a_worker_without_the_key_id_refuses_to_start_naming_it(wh: Webhooks) -> None:
    with HttpReceiver() as hook:
        made = await WebhookRepository(wh.pool, encryptor=K2_K1).add_endpoint(
            hook.url(), ["invoice.paid"], secret=new_secret(), tenant="acme"
        )
        await wh.enqueue("invoice.paid", invoice=1)
        for keys, configured in (
            (K1, "the configured key ids are ['k1']"),
            (None, "no encryption"),
        ):
            with pytest.raises(ConfigurationError) as refused:
                await deliver(wh, keys)
            assert (
                f"webhook endpoint(s) {made.id} are sealed under key id 'k2', and {configured}"
                in str(refused.value)
            )
        assert hook.requests == []
    assert await wh.rows("SELECT status, attempts FROM outbox_webhook") == [("pending", 0)]


async def test_an_attempt_whose_secret_cannot_be_opened_posts_nothing_and_is_retried(
    wh: Webhooks,
) -> None:
    """A worker started before a secret was sealed under a key it lacks (``endpoints add`` with a
    newer key list): the attempt posts nothing, never unsigned, and waits for the key."""
    secret = new_secret()
    with HttpReceiver() as hook:
        async with HttpxWebhookSender(GUARD) as sender:
            running = workers(wh, sender, K1)
            await running.check_secrets()  # it started: no secret needed a key yet
            await WebhookRepository(wh.pool, encryptor=K2).add_endpoint(
                hook.url(), ["invoice.paid"], secret=secret, tenant="acme"
            )
            await wh.enqueue("invoice.paid", invoice=1)
            await running.drainer.run(drain=True)
            await running.first_attempts.wait()
            assert hook.requests == []
            [(status, attempts, error)] = await wh.rows(
                "SELECT status, attempts, last_error FROM outbox_webhook_delivery"
            )
            assert (status, attempts) == ("pending", 1)
            assert error.startswith(f"{SECRET_UNAVAILABLE}: ")  # the class health leaves out
            assert error.startswith(
                "signing secret unavailable, nothing sent: the signing secret of webhook"
                " endpoint 1 is sealed under key id 'k2', which is not among the configured key"
                " ids ['k1']"
            )
            with pytest.raises(ConfigurationError, match="key id 'k2'"):
                await running.run(drain=True)  # restarted as it is, it refuses
            await asyncio.sleep(0.3)  # the retry is due (QUICK: 0.2 s)
            await workers(wh, sender, K2_K1).run(drain=True)  # the key is back
        [request] = hook.requests
        verifies(request, secret)
    assert await wh.rows("SELECT status, attempts FROM outbox_webhook_delivery") == [
        ("dispatched", 2)
    ]


async def test_plaintext_secrets_sign_with_a_loud_warning_until_schema_apply_seals_them(
    wh: Webhooks, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = new_secret()
    with HttpReceiver() as hook:
        made = await wh.repo.add_endpoint(
            hook.url(), ["invoice.paid"], secret=secret, tenant="acme"
        )  # no keys
        assert await stored(wh) == [(made.id, secret)]  # as before ADR 0030
        await wh.enqueue("invoice.paid", invoice=1)
        with caplog.at_level(logging.WARNING, logger="outbox_adapters.lanes.webhooks"):
            await deliver(wh, K1)
        warned = [r.getMessage() for r in caplog.records if "PLAINTEXT" in r.getMessage()]
        assert len(warned) == 1
        assert (
            f"1 webhook signing secret(s) (endpoint(s) {made.id}) are stored in PLAINTEXT"
            in (warned[0])
        )
        assert "run `outbox keys seal-secrets`" in warned[0]
        assert secret not in warned[0]
        verifies(hook.requests[0], secret)  # it still signed: no outage

        applied = await cli(
            "schema", "apply", "--database-url", dsn, env={"OUTBOX_ENCRYPTION_KEYS": ENTRY1}
        )
        assert applied.exit_code == 0, applied.output
        assert "webhook secrets: re-sealed 0, sealed 1 from plaintext, under key 'k1'" in (
            applied.stdout
        )
        [(_, text)] = await stored(wh)
        assert kid_of(text) == "k1"
        no_copy_of(secret, [text])
        again = await cli(
            "keys", "seal-secrets", "--database-url", dsn, env={"OUTBOX_ENCRYPTION_KEYS": ENTRY1}
        )
        assert again.exit_code == 0, again.output
        assert "re-sealed 0, sealed 0 from plaintext" in again.stdout  # nothing left to seal

        caplog.clear()
        await wh.enqueue("invoice.paid", invoice=2)
        with caplog.at_level(logging.WARNING, logger="outbox_adapters.lanes.webhooks"):
            await deliver(wh, K1)
        assert not [r for r in caplog.records if "PLAINTEXT" in r.getMessage()]
        assert len(hook.requests) == 2
        verifies(hook.requests[1], secret)


async def test_keys_rotate_reseals_every_webhook_secret_and_then_the_old_key_can_go(
    wh: Webhooks, dsn: str
) -> None:
    first, second, plain = new_secret(), new_secret(), new_secret()
    repo = WebhookRepository(wh.pool, encryptor=K1)
    with HttpReceiver() as hook:
        made = await repo.add_endpoint(hook.url(), ["invoice.paid"], secret=first, tenant="acme")
        await repo.rotate_secret(made.id, new_secret=second, overlap=timedelta(hours=1))
        await wh.repo.add_endpoint(hook.url("/plain"), ["other.type"], secret=plain, tenant="acme")
        rotated = await cli(
            "keys", "rotate", "--database-url", dsn,
            env={"OUTBOX_ENCRYPTION_KEYS": f"{ENTRY2},{ENTRY1}"},
        )  # fmt: skip
        assert rotated.exit_code == 0, rotated.output
        assert "webhook secrets: re-sealed 2, sealed 1 from plaintext, under key 'k2'" in (
            rotated.stdout
        )
        rows = await stored(wh)
        assert [kid_of(s) for _, s in rows] == ["k2", "k2", "k2"]
        for secret in (first, second, plain):
            no_copy_of(secret, [s for _, s in rows])
        await wh.enqueue("invoice.paid", invoice=1)
        await deliver(wh, K2)  # k1 dropped: nothing needs it
        [request] = hook.requests
        verifies(request, first, second)


async def test_keys_rotate_lists_a_secret_it_cannot_open_and_exits_1(
    wh: Webhooks, dsn: str
) -> None:
    made = await WebhookRepository(wh.pool, encryptor=K1).add_endpoint(
        "https://hooks.example/in", ["invoice.paid"], secret=new_secret(), tenant="acme"
    )
    rotated = await cli(
        "keys", "rotate", "--database-url", dsn, env={"OUTBOX_ENCRYPTION_KEYS": ENTRY2}
    )
    assert rotated.exit_code == 1
    assert (
        f"cannot re-seal webhook secret 1: the signing secret of webhook endpoint {made.id} is"
        " sealed under key id 'k1', which is not among the configured key ids ['k2']"
    ) in rotated.stdout
    assert "1 webhook secret(s) could not be re-sealed" in one_line_error(rotated)
    [(_, text)] = await stored(wh)
    assert kid_of(text) == "k1"  # left as it was


async def test_a_sealing_pass_never_writes_over_a_secret_changed_meanwhile(wh: Webhooks) -> None:
    """Mechanism: the compare-and-set of RESEAL_SECRET. A pass with an older key list (k2, k1)
    read the secret; another pass re-sealed it under k3 (and the operator will drop k2); the
    older pass's write must not put it back under k2."""
    await WebhookRepository(wh.pool, encryptor=K1).add_endpoint(
        "https://hooks.example/in", ["invoice.paid"], secret=new_secret(), tenant="acme"
    )
    k3 = AesGcmEncryptor({"k3": b"\x33" * 32, "k1": KEY1}, active="k3")
    async with wh.pool.connection() as conn:
        rewrites, unreadable = plan_sealing(await read_stored_secrets(conn), K2_K1, rotate=True)
    newer = await seal_stored_secrets(wh.pool, k3, rotate=True)
    assert newer.resealed == (1,)
    async with wh.pool.connection() as conn, conn.transaction():
        late = await write_sealing(conn, rewrites, unreadable)
    assert late.changed == (1,)
    assert late.resealed == ()
    [(_, text)] = await stored(wh)
    assert kid_of(text) == "k3"


async def test_endpoint_health_does_not_count_attempts_our_keys_could_not_sign(
    wh: Webhooks,
) -> None:
    """Mechanism: ``not_theirs`` in UNHEALTHY_ENDPOINTS. Six days of attempts that failed because
    our keys could not open the secret do not disable the endpoint (nor tell its owner); the same
    days of receiver errors do."""
    ours = await wh.endpoint("invoice.paid", owner_email="a@example.org")
    theirs = await wh.endpoint("invoice.paid", owner_email="b@example.org")
    reasons = {
        ours: f"{SECRET_UNAVAILABLE}: the signing secret of webhook endpoint {ours} is sealed"
        " under key id 'k9', which is not among the configured key ids ['k1']",
        theirs: "receiver error",
    }

    async def fail_both() -> None:
        fan = await wh.drained()
        for delivery in fan.deliveries:
            payload = delivery.payload
            assert isinstance(payload, dict)
            reason = reasons[int(payload["endpoint_id"])]
            await wh.deliveries.mark_if_pending(Mark.failed(delivery, reason))

    await fail_both()
    await wh.rows(
        "UPDATE outbox_webhook_delivery SET created_at = created_at - interval '6 days' RETURNING id"
    )
    await fail_both()
    disabled = await wh.repo.disable_unhealthy(window=timedelta(days=5), notice=lambda _e: None)
    assert [e.id for e in disabled] == [theirs]


def test_the_cli_seals_on_add_and_a_webhook_worker_without_the_key_refuses_to_start(
    dsn: str,
) -> None:
    keys = {"OUTBOX_ENCRYPTION_KEYS": ENTRY1}
    with HttpReceiver() as hook:
        made = outbox(
            "endpoints", "add", "--tenant", "acme", "--database-url", dsn, "--url", hook.url(),
            "--event-type", "invoice.paid", env={**LOCAL, **keys},
        )  # fmt: skip
        assert made.exit_code == 0, made.output
        assert "webhook secrets: sealed under key id 'k1' (AES-256-GCM)" in made.stdout
        secret = next(
            line.removeprefix("secret: ")
            for line in made.stdout.splitlines()
            if line.startswith("secret: ")
        )
        queued = outbox(
            "enqueue", "webhook", "--tenant", "acme", "--database-url", dsn, "--event-type", "invoice.paid",
            "--data", '{"invoice": 1}',
        )  # fmt: skip
        assert queued.exit_code == 0, queued.output
        command = ("worker", "--lane", "webhooks", "--database-url", dsn, "--drain", "--no-listen",
                   "--no-leader", "--poll-interval", "0.05")  # fmt: skip
        refused = outbox(*command, env=LOCAL)
        assert refused.exit_code == 2
        error = one_line_error(refused)
        assert "--encryption-keys (OUTBOX_ENCRYPTION_KEYS)" in error
        assert "sealed under key id 'k1', and no encryption keys are configured" in error
        assert hook.requests == []
        ran = outbox(*command, env={**LOCAL, **keys})
        assert ran.exit_code == 0, ran.output
        assert "webhook secrets: sealed under key id 'k1'" in ran.stdout
        [request] = hook.requests
        verifies(request, secret)
        rotated = outbox(
            "endpoints", "rotate-secret", "1", "--database-url", dsn, "--json", env=keys
        )
        assert rotated.exit_code == 0, rotated.output
        newer = json.loads(rotated.stdout)["secret"]
    with psycopg.connect(dsn) as conn:
        texts = [t for (t,) in conn.execute("SELECT secret FROM outbox_webhook_secret ORDER BY id")]
    assert [kid_of(t) for t in texts] == ["k1", "k1"]
    no_copy_of(secret, texts)
    no_copy_of(newer, texts)


@pytest.mark.parametrize(
    ("env", "shown"),
    [
        ({}, "stored in plaintext (no encryption keys)"),
        (
            {"OUTBOX_ENCRYPTION_KEYS": f"{ENTRY2},{ENTRY1}"},
            "sealed under key id 'k2' (AES-256-GCM)",
        ),
        ({"OUTBOX_ENCRYPTION_KEYS": "k1:AAAA"}, "REFUSED: --encryption-keys"),
    ],
    ids=["no-keys", "keys", "bad-keys"],
)
def test_config_show_says_how_webhook_secrets_are_stored(env: dict[str, str], shown: str) -> None:
    text = outbox("config", "show", env=env)
    assert text.exit_code == 0, text.output
    [line] = [x for x in text.stdout.splitlines() if x.startswith("webhook secrets at rest")]
    assert line.startswith(f"webhook secrets at rest (outbox worker's keys): {shown}")
    document = json.loads(outbox("config", "show", "--json", env=env).stdout)
    assert document["webhook_secrets"].startswith(shown)
    assert KEY1.hex() not in text.stdout
    assert base64.b64encode(KEY2).decode() not in text.stdout
