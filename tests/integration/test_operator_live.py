"""The operator's tools against live workers of every lane (issue 13): one database, a real SMTP
server, two real webhook receivers and NATS JetStream; `outbox worker` (an e-mail lane, and the
webhook drainer with its retry lane), `outbox relay` and both `outbox consume` channels running as
the processes an operator starts. Then, as the operator at 3 a.m.: `top` sees every lane with its
workers and leaders and every channel caught up, `healthcheck` passes for each lane that beats,
`failed` and `get` show the dead letters of the e-mail lane and of the webhook deliveries, a
requeue is audited, `config show` derives each lane's timing, `prune` removes what was delivered,
and every worker stops cleanly on SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.support.cli import outbox
from tests.support.postgres import query, scratch_database
from tests.support.receivers import HttpReceiver, Reply

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.email_channel import EMAIL_CHANNEL_GROUP, EMAIL_CHANNEL_LANE
from outbox_adapters.lanes.inapp import INAPP_CHANNEL_GROUP
from outbox_adapters.postgres import schema
from outbox_adapters.postgres.events import RELAY_LANE
from outbox_adapters.postgres.webhooks import DELIVERY_LANE, WEBHOOK_LANE

pytestmark = pytest.mark.integration

SENDER = "ops@example.com"
LANE = "live-mail"


#: Whether every resolved e-mail and event row is older than the prunes' one-second cut-off.
_AGED = """
SELECT coalesce(bool_and(resolved_at < now() - interval '1.5 seconds'), true)
FROM (SELECT resolved_at FROM outbox_message UNION ALL SELECT resolved_at FROM outbox_event) AS r
WHERE resolved_at IS NOT NULL
"""


def _wait(
    what: str, done: Callable[[], bool], *, timeout: float = 60.0, state: Callable[[], object] = str
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}: {state()}")
        time.sleep(0.1)


@contextlib.contextmanager
def _processes(env: dict[str, str]) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and CLI
            [sys.executable, "-m", "outbox_adapters", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    try:
        yield start
        for process in started:  # SIGTERM: each stops claiming, finishes and exits 0
            process.send_signal(signal.SIGTERM)
        for process in started:
            out, err = process.communicate(timeout=30)
            assert process.returncode == 0, f"{process.args!r}: {out}\n{err}"
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.communicate(timeout=30)


def _lanes(dsn: str, nats_url: str, topic: str) -> dict[str, dict[str, object]]:
    shown = outbox("top", "--database-url", dsn, "--broker", nats_url, "--topic", topic, "--json")
    assert shown.exit_code == 0, shown.output
    found = json.loads(shown.stdout)
    lanes = {f"{lane['queue']}/{lane['lane']}": lane for lane in found["lanes"]}
    lanes.update({f"channel/{c['group']}": c for c in found["channels"]})
    return lanes


def test_the_operators_tools_on_live_workers_of_every_lane(  # noqa: PLR0915 - one live system
    postgres_server: str, nats_url: str, tmp_path: Path
) -> None:
    topic = f"ops-{secrets.token_hex(4)}"
    with (
        scratch_database(postgres_server, "ops_live") as dsn,
        SmtpSink(tls="starttls") as sink,
        HttpReceiver(then=Reply.ok()) as good,
        HttpReceiver(then=Reply.status(400)) as bad,
    ):
        schema.apply(dsn)
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "OUTBOX_DATABASE_URL": dsn,
            "OUTBOX_SMTP_URL": f"smtp://{sink.host}:{sink.port}",
            "OUTBOX_SMTP_CA_FILE": str(sink.ca_file),
            "OUTBOX_SENDER": SENDER,
            "OUTBOX_BROKER": nats_url,
            "OUTBOX_TOPIC": topic,
            "OUTBOX_POLL_INTERVAL": "0.2",
        }
        for receiver in (good, bad):
            added = outbox(
                "endpoints", "add", "--tenant", "acme", "--database-url", dsn, "--url", receiver.url(),
                "--event-type", "invoice.paid", "--allow-http",
                "--allow-destination", "127.0.0.0/8",
            )  # fmt: skip
            assert added.exit_code == 0, added.output

        with _processes(env) as start:
            start("worker", "--lane", LANE)
            start("worker", "--lane", WEBHOOK_LANE, "--allow-destination", "127.0.0.0/8",
                  "--allow-http")  # fmt: skip
            start("relay")
            start("consume", "--channel", "email", "--public-url", "https://app.example")
            start("consume", "--channel", "inapp")

            for to in ("ann@example.org", "bounce-bob@example.org"):
                sent = outbox(
                    "enqueue", "email", "--database-url", dsn, "--lane", LANE, "--to", to,
                    "--subject", "Your receipt", "--text", "Thanks.",
                )  # fmt: skip
                assert sent.exit_code == 0, sent.output
            bounced = int(
                query(
                    dsn,
                    "SELECT id FROM outbox_message WHERE payload->'to' ? %s",
                    "bounce-bob@example.org",
                )[0][0]
            )
            hooked = outbox(
                "enqueue", "webhook", "--tenant", "acme", "--database-url", dsn, "--event-type", "invoice.paid",
                "--data", json.dumps({"invoice": "inv-1", "amount": 1200}),
            )  # fmt: skip
            assert hooked.exit_code == 0, hooked.output
            published = outbox(
                "publish", "--database-url", dsn, "--topic", topic, "--key", "tenant-1",
                "--type", "tenant.provisioned",
                "--data", json.dumps(
                    {"tenant_id": "t1", "tenant_name": "Acme", "admin_email": "admin@acme.example"}
                ),
            )  # fmt: skip
            assert published.exit_code == 0, published.output

            def state() -> dict[str, object]:
                return {
                    "mails": sorted({r for m in sink.received for r in m.recipients}),
                    "requests": (len(good.requests), len(bad.requests)),
                    "notifications": query(dsn, "SELECT count(*) FROM outbox_notification")[0][0],
                    "unsettled": query(
                        dsn,
                        "SELECT 'message', lane, status, last_error FROM outbox_message"
                        " WHERE status = 'pending' UNION ALL SELECT 'webhook', lane, status,"
                        " last_error FROM outbox_webhook WHERE status = 'pending' UNION ALL"
                        " SELECT 'delivery', lane, status, last_error FROM outbox_webhook_delivery"
                        " WHERE status = 'pending' UNION ALL SELECT 'event', lane, status,"
                        " last_error FROM outbox_event WHERE status = 'pending'",
                    ),
                }

            def settled() -> bool:
                now = state()
                return (
                    {"admin@acme.example", "ann@example.org"} <= set(now["mails"])  # type: ignore[call-overload]
                    and now["requests"] == (1, 1)
                    and now["notifications"] == 2  # the platform's row and the tenant's
                    and now["unsettled"] == []
                )

            _wait("every lane to settle", settled, state=state)

            # --- top: every lane, its workers and leaders; every channel caught up -------------
            # A channel acknowledges the event once its recipients are terminal: it looks again
            # after its retry delay (5 s), so the broker counts it unacknowledged until then.
            def caught_up() -> bool:
                lanes = _lanes(dsn, nats_url, topic)
                return all(
                    (lanes[f"channel/{g}"]["waiting"], lanes[f"channel/{g}"]["unacknowledged"])
                    == (0, 0)
                    for g in (EMAIL_CHANNEL_GROUP, INAPP_CHANNEL_GROUP)
                )

            _wait("the channels to acknowledge", caught_up, timeout=30)
            lanes = _lanes(dsn, nats_url, topic)
            expected = {
                f"outbox_message/{LANE}",
                f"outbox_message/{EMAIL_CHANNEL_LANE}",
                f"outbox_webhook/{WEBHOOK_LANE}",
                f"outbox_webhook_delivery/{DELIVERY_LANE}",
                f"outbox_event/{RELAY_LANE}",
            }
            assert expected <= set(lanes), sorted(lanes)
            for key in expected:
                assert lanes[key]["workers"] == 1, (key, lanes[key])
                assert lanes[key]["pending"] == 0, (key, lanes[key])
            assert lanes[f"outbox_message/{LANE}"]["failed"] == 1
            assert lanes[f"outbox_message/{LANE}"]["leader"]
            assert lanes[f"outbox_event/{RELAY_LANE}"]["leader"]
            assert lanes[f"outbox_webhook_delivery/{DELIVERY_LANE}"]["failed"] == 1
            for group in (EMAIL_CHANNEL_GROUP, INAPP_CHANNEL_GROUP):
                channel = lanes[f"channel/{group}"]
                assert (channel["waiting"], channel["unacknowledged"]) == (0, 0), channel

            # --- healthcheck: each lane's worker on this host --------------------------------
            for key in expected:
                lane = key.split("/", 1)[1]
                leads = "--leader" if lanes[key]["leader"] else "--no-leader"
                health = outbox("healthcheck", "--database-url", dsn, "--lane", lane, leads)
                assert health.exit_code == 0, (lane, health.output)

            # --- failed, get, requeue (audited) ------------------------------------------------
            failed = outbox("failed", "--database-url", dsn, "--lane", LANE)
            assert failed.exit_code == 0, failed.output
            assert re.search(r"^\s+1\s+recipient <address> refused\s", failed.stdout, re.MULTILINE)
            deliveries = outbox("failed", "--database-url", dsn, "--queue", "deliveries")
            assert deliveries.exit_code == 0, deliveries.output
            assert re.search(
                r"^\s+1\s+receiver rejected the request\s", deliveries.stdout, re.MULTILINE
            )
            shown = outbox("get", str(bounced), "--database-url", dsn)
            assert shown.exit_code == 0, shown.output
            assert re.search(r"^status\s*:?\s+failed", shown.stdout, re.MULTILINE), shown.stdout
            again = outbox(
                "requeue", str(bounced), "--database-url", dsn, "--reason", "OPS-7: address fixed"
            )
            assert again.exit_code == 0, again.output
            assert query(dsn, "SELECT message_id, reason FROM outbox_requeue_audit") == [
                (bounced, "OPS-7: address fixed")
            ]
            # The live worker takes the requeued row again (and the server refuses it again).
            _wait(
                "the requeued row to fail again",
                lambda: (
                    query(dsn, "SELECT status, attempts FROM outbox_message WHERE id = %s", bounced)
                    == [("failed", 1)]
                ),
            )

        # --- after SIGTERM: config show and prune -------------------------------------------
        config = outbox("config", "show", "--json", env=env)
        assert config.exit_code == 0, config.output
        effective = json.loads(config.stdout)
        smtp = effective["commands"]["worker"]["smtp-url"]
        assert smtp == {"value": env["OUTBOX_SMTP_URL"], "from": "environment"}
        assert "per-row budget 60s" in effective["lanes"]["email (outbox worker, effective)"]
        assert "claim lease" in effective["lanes"]["relay (outbox relay)"]
        # The prunes below keep what was resolved in the last second: let the last rows age past it.
        _wait("every resolved row to be over a second old", lambda: query(dsn, _AGED) == [(True,)])
        pruned = outbox("prune", "--database-url", dsn, "--older-than", "1s", "--json")
        assert pruned.exit_code == 0, pruned.output
        removed = json.loads(pruned.stdout)["removed"]
        assert set(removed) == {"webhooks", "deliveries"}  # the defaults: nothing else reads them
        assert removed["deliveries"] == 0  # the endpoint's one success: the health sweep reads it
        named = outbox(
            "prune", "--database-url", dsn, "--older-than", "1s", "--json",
            "--only", "messages", "--only", "events", "--broker-retention", "1s",
        )  # fmt: skip
        assert named.exit_code == 0, named.output
        removed = json.loads(named.stdout)["removed"]
        left = query(dsn, "SELECT lane, status, resolved_at, now() FROM outbox_message ORDER BY id")
        assert removed["messages"] == 2, left  # the two sent e-mails; the failed row stays
        assert removed["events"] == 1
        assert query(dsn, "SELECT status FROM outbox_message") == [("failed",)]
