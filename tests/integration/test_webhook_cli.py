"""The webhook commands of ``outbox`` against a real PostgreSQL: endpoints add (registration check,
first secret printed once), list, disable, enable (what was missed), rotate-secret; enqueue webhook;
deliveries grouped by error; replay of an event and of a failed range; ``--json`` prints one JSON
document; environment twins work; bad input exits 2 in one line and writes nothing.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
from click.testing import CliRunner
from tests.support.cli import one_line_error, outbox
from tests.support.postgres import query
from tests.support.receivers import HttpReceiver
from tests.support.webhooks import Webhooks, webhooks

from outbox_adapters.cli import main
from outbox_core.messages import Mark
from outbox_core.signing import WebhookSecret, verify

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

LOCAL = ("--allow-destination", "127.0.0.0/8", "--allow-http")


def steps(dsn: str, work: Callable[[Webhooks], Awaitable[Any]]) -> Any:
    """Run async webhook steps (enqueue, drain, mark) from a synchronous CLI test."""

    async def go() -> Any:
        async with webhooks(dsn) as wh:
            return await work(wh)

    return asyncio.run(go())


def add(dsn: str, *extra: str) -> dict[str, Any]:
    result = outbox(
        "endpoints", "add", "--tenant", "acme", "--database-url", dsn, "--url", "http://127.0.0.1:9/hook",
        "--event-type", "invoice.paid", "--event-type", "invoice.void", *LOCAL, "--json", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    made: dict[str, Any] = json.loads(result.stdout)
    return made


def test_endpoints_add_prints_the_id_and_a_whsec_secret_and_list_shows_it_without(dsn):
    made = add(dsn, "--owner", "ops@example.org")
    assert made["endpoint"]["event_types"] == ["invoice.paid", "invoice.void"]
    assert WebhookSecret.parse(made["secret"]).key  # 32 random bytes, whsec_ form
    assert made["secret"].startswith("whsec_")
    assert query(dsn, "SELECT secret FROM outbox_webhook_secret") == [(made["secret"],)]
    text = outbox("endpoints", "list", "--database-url", dsn)
    assert text.exit_code == 0
    assert f"{made['endpoint']['id']}  acme  enabled  invoice.paid,invoice.void" in text.stdout
    assert made["secret"] not in text.stdout
    listed = json.loads(outbox("endpoints", "list", "--database-url", dsn, "--json").stdout)
    assert [e["id"] for e in listed["endpoints"]] == [made["endpoint"]["id"]]
    plain = outbox(
        "endpoints", "add", "--tenant", "acme", "--url", "http://127.0.0.1:9/x", "--event-type", "a.b", *LOCAL,
        env={"OUTBOX_DATABASE_URL": dsn},
    )  # fmt: skip
    assert plain.exit_code == 0
    assert re.search(r"^secret: whsec_[A-Za-z0-9+/=]+$", plain.stdout, re.MULTILINE)


@pytest.mark.parametrize(
    ("url", "extra", "why"),
    [
        ("http://169.254.169.254/latest", LOCAL, "link-local (cloud metadata)"),
        ("http://10.0.0.1/hook", LOCAL, "private address 10.0.0.1"),
        ("http://127.0.0.1:9/hook", (), "https is required"),
        ("https://user:pw@127.0.0.1/hook", LOCAL, "user information"),
        ("https://127.0.0.1/hook", ("--allow-destination", "not-a-cidr"), "--allow-destination"),
    ],
)
def test_endpoints_add_refuses_a_url_that_fails_the_registration_check(dsn, url, extra, why):
    result = outbox(
        "endpoints", "add", "--tenant", "acme", "--database-url", dsn, "--url", url, "--event-type", "t", *extra
    )  # fmt: skip
    assert result.exit_code == 2
    assert why in one_line_error(result)
    assert query(dsn, "SELECT count(*) FROM outbox_webhook_endpoint") == [(0,)]


def test_disable_enable_and_rotate_secret(dsn):
    endpoint = add(dsn)["endpoint"]["id"]
    off = outbox("endpoints", "disable", str(endpoint), "--database-url", dsn, "--reason", "moved")
    assert off.exit_code == 0
    assert "disabled: moved" in off.stdout
    missed = steps(dsn, lambda wh: wh.drained())
    back = outbox("endpoints", "enable", str(endpoint), "--database-url", dsn, "--json")
    assert back.exit_code == 0
    assert json.loads(back.stdout)["missed_event_ids"] == [missed.event_id]
    rotated = outbox("endpoints", "rotate-secret", str(endpoint), "--database-url", dsn, "--json")
    assert rotated.exit_code == 0
    assert json.loads(rotated.stdout)["secret"].startswith("whsec_")
    assert query(
        dsn,
        "SELECT count(*), count(expires_at) FROM outbox_webhook_secret WHERE endpoint_id = %s",
        endpoint,
    ) == [(2, 1)]
    unknown = outbox("endpoints", "disable", "999", "--database-url", dsn)
    assert unknown.exit_code == 1
    assert "no webhook endpoint 999" in one_line_error(unknown)


def test_enqueue_webhook_writes_one_event_and_refuses_bad_input(dsn):
    ok = outbox(
        "enqueue", "webhook", "--tenant", "acme", "--database-url", dsn, "--event-type", "invoice.paid",
        "--data", '{"invoice": 7}', "--idempotency-key", "k",
    )  # fmt: skip
    assert ok.exit_code == 0
    assert re.fullmatch(r"enqueued as \d+", ok.stdout.strip())
    again = outbox(
        "enqueue", "webhook", "--tenant", "acme", "--event-type", "invoice.paid", "--data", '{"invoice": 7}',
        env={"OUTBOX_DATABASE_URL": dsn, "OUTBOX_ENQUEUE_IDEMPOTENCY_KEY": "k"},
    )  # fmt: skip
    assert "already enqueued" in again.stdout
    for data, event_type in (
        ("[1]", "invoice.paid"),
        ("{nope", "invoice.paid"),
        ("{}", "bad type"),
    ):
        bad = outbox(
            "enqueue", "webhook", "--tenant", "acme", "--database-url", dsn, "--event-type", event_type, "--data", data
        )  # fmt: skip
        assert bad.exit_code == 2
        one_line_error(bad)
    assert query(dsn, "SELECT payload FROM outbox_webhook") == [
        ({"event_type": "invoice.paid", "data": {"invoice": 7}, "tenant": "acme"},)
    ]


def test_enqueue_webhook_takes_an_ordering_key_and_refuses_a_bad_one(dsn):
    ok = outbox(
        "enqueue", "webhook", "--tenant", "acme", "--database-url", dsn, "--event-type", "invoice.paid",
        "--data", '{"invoice": 8}', "--ordering-key", "customer-42",
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    for bad_key in ("", "x" * 201, "two\nlines"):
        bad = outbox(
            "enqueue", "webhook", "--tenant", "acme", "--database-url", dsn, "--event-type", "invoice.paid",
            "--data", "{}", "--ordering-key", bad_key,
        )  # fmt: skip
        assert bad.exit_code == 2
        assert "ordering key" in one_line_error(bad)
    assert query(dsn, "SELECT payload FROM outbox_webhook") == [
        (
            {
                "event_type": "invoice.paid",
                "data": {"invoice": 8},
                "ordering_key": "customer-42",
                "tenant": "acme",
            },
        )
    ]


def test_deliveries_are_grouped_by_error_and_replay_makes_due_deliveries(dsn):
    endpoint = add(dsn)["endpoint"]["id"]
    fan = steps(dsn, lambda wh: wh.drained())
    (born,) = fan.deliveries
    patch = {"last_status": 500, "response": "oops"}
    failed = attrs.evolve(Mark.failed(born, "HTTP 500"), payload_patch=patch)
    steps(dsn, lambda wh: wh.deliveries.mark_if_pending(failed))
    report = json.loads(outbox("deliveries", "--database-url", dsn, "--json").stdout)
    assert report["by_status"] == {"failed": 1}
    (group,) = report["groups"]
    assert (group["error"], group["deliveries"], group["last_status"], group["response"]) == (
        "HTTP 500", 1, 500, "oops",
    )  # fmt: skip
    text = outbox(
        "deliveries", "--database-url", dsn, "--status", "failed", "--endpoint", str(endpoint)
    )
    assert "HTTP 500" in text.stdout
    assert "last status 500" in text.stdout

    one = outbox(
        "replay", str(fan.event_id), "--database-url", dsn, "--endpoint", str(endpoint), "--json"
    )
    assert one.exit_code == 0, one.output
    (replay,) = json.loads(one.stdout)["replays"]
    assert replay["replay_of"] == fan.event_id
    assert len(replay["deliveries"]) == 1
    assert (
        len(steps(dsn, lambda wh: wh.claim_deliveries())) == 1
    )  # CLI replays are due at once for the retry worker

    ranged = outbox(
        "replay", "--failed", "--since", "2000-01-01T00:00", "--database-url", dsn, "--json"
    )  # fmt: skip
    assert json.loads(ranged.stdout)["replays"] == []  # already replayed by the completed replay
    steps(dsn, lambda wh: wh.repo.disable_endpoint(endpoint, "gone"))
    refused = outbox(
        "replay", str(fan.event_id), "--database-url", dsn, "--endpoint", str(endpoint)
    )
    assert refused.exit_code == 1
    assert "is disabled (gone)" in one_line_error(refused)
    both = outbox("replay", "7", "--failed", "--since", "2000-01-01", "--database-url", dsn)
    assert both.exit_code == 2


def test_deliveries_and_replay_take_a_tenant_and_keep_to_it(dsn):
    acme = add(dsn)["endpoint"]["id"]
    globex = add(dsn, "--tenant", "globex", "--description", "Globex billing")["endpoint"]
    assert globex["tenant"] == "globex"  # the last --tenant given wins
    assert globex["description"] == "Globex billing"
    bad = outbox(
        "endpoints", "add", "--tenant", "acme", "--database-url", dsn, "--url", "http://127.0.0.1:9/x",
        "--event-type", "a.b", "--description", "tab\there", *LOCAL,
    )  # fmt: skip
    assert bad.exit_code == 2
    assert "description" in one_line_error(bad)
    acme_fan = steps(dsn, lambda wh: wh.drained())
    globex_fan = steps(dsn, lambda wh: wh.drained(tenant="globex"))
    assert [d.payload["endpoint_id"] for d in acme_fan.deliveries] == [acme]
    listed = outbox("endpoints", "list", "--database-url", dsn, "--tenant", "globex", "--json")
    assert [e["id"] for e in json.loads(listed.stdout)["endpoints"]] == [globex["id"]]

    for command in ("show", "disable", "enable", "rotate-secret", "public-key"):
        other = outbox("endpoints", command, str(acme), "--database-url", dsn, "--tenant", "globex")
        assert other.exit_code == 1, (command, other.output)
        assert one_line_error(other) == f"Error: there is no webhook endpoint {acme}"
    assert query(dsn, "SELECT enabled FROM outbox_webhook_endpoint WHERE id = %s", acme) == [
        (True,)
    ]
    own = outbox("endpoints", "disable", str(acme), "--database-url", dsn, "--tenant", "acme")
    assert own.exit_code == 0, own.output
    outbox("endpoints", "enable", str(acme), "--database-url", dsn, "--tenant", "acme")
    mine = outbox("deliveries", "--database-url", dsn, "--tenant", "globex", "--json")
    (group,) = json.loads(mine.stdout)["groups"]
    assert group["endpoint_ids"] == [globex["id"]]

    refused = outbox("replay", str(acme_fan.event_id), "--database-url", dsn, "--tenant", "globex")
    assert refused.exit_code == 1
    assert one_line_error(refused) == f"Error: there is no webhook event {acme_fan.event_id}"
    replayed = outbox(
        "replay", str(globex_fan.event_id), "--database-url", dsn, "--tenant", "globex", "--json"
    )
    assert replayed.exit_code == 0, replayed.output
    (replay,) = json.loads(replayed.stdout)["replays"]
    assert replay["replay_of"] == globex_fan.event_id
    assert len(replay["deliveries"]) == 1


def test_worker_lane_webhooks_drains_the_outbox_delivers_signed_and_exits(dsn):
    """`outbox endpoints add` → `outbox enqueue webhook` → `outbox worker --lane webhooks --drain`
    → `outbox deliveries --json`: the whole path from the command line, to a real receiver."""
    with HttpReceiver() as hook:
        made = outbox(
            "endpoints", "add", "--tenant", "acme", "--database-url", dsn, "--url", hook.url(),
            "--event-type", "invoice.paid", *LOCAL, "--json",
        )  # fmt: skip
        assert made.exit_code == 0, made.output
        secret = json.loads(made.stdout)["secret"]
        for n in range(3):
            queued = outbox(
                "enqueue", "webhook", "--tenant", "acme", "--database-url", dsn, "--event-type", "invoice.paid",
                "--data", json.dumps({"invoice": n}),
            )  # fmt: skip
            assert queued.exit_code == 0, queued.output
        ran = outbox(
            "worker", "--lane", "webhooks", "--database-url", dsn, "--drain", "--no-listen",
            "--no-leader", "--poll-interval", "0.05",
            env={"OUTBOX_ALLOW_DESTINATION": "127.0.0.0/8", "OUTBOX_ALLOW_HTTP": "1"},
        )  # fmt: skip
        assert ran.exit_code == 0, ran.output
        assert "allowed anyway: 127.0.0.0/8" in ran.stdout
        assert "first_attempts: claimed 3, dispatched 3" in ran.stdout
        assert len(hook.requests) == 3
        key = WebhookSecret.parse(secret)
        for request in hook.requests:
            verify(request.headers, request.body, [key], now=int(time.time()))
    report = json.loads(outbox("deliveries", "--database-url", dsn, "--json").stdout)
    assert report["by_status"] == {"dispatched": 3}


def test_worker_lane_webhooks_refuses_http_in_production_naming_the_option(dsn):
    ran = CliRunner().invoke(
        main,
        ["worker", "--lane", "webhooks", "--database-url", dsn, "--drain", "--allow-http",
         "--environment", "production"],
    )  # fmt: skip
    assert ran.exit_code == 2
    assert "--allow-http" in ran.output
    assert "https:// URLs only in production" in ran.output


def test_endpoints_add_takes_a_rate_cap_and_list_and_show_print_it(dsn):
    made = add(dsn, "--max-per-second", "5")
    endpoint = made["endpoint"]["id"]
    assert made["endpoint"]["max_per_second"] == 5
    assert query(
        dsn, "SELECT max_per_second FROM outbox_webhook_endpoint WHERE id = %s", endpoint
    ) == [(5,)]
    assert "  v1  5/s" in outbox("endpoints", "list", "--database-url", dsn).stdout
    shown = outbox("endpoints", "show", str(endpoint), "--database-url", dsn)
    assert shown.exit_code == 0, shown.output
    assert "rate cap:       5/s" in shown.stdout
    assert "failure streak: 0" in shown.stdout
    assert "last success:   never" in shown.stdout
    refused = outbox(
        "endpoints", "add", "--tenant", "acme", "--database-url", dsn, "--url", "http://127.0.0.1:9/x",
        "--event-type", "a.b", *LOCAL, "--max-per-second", "0",
    )  # fmt: skip
    assert refused.exit_code == 2
    assert "max_per_second is None (no cap) or a whole number of at least 1" in one_line_error(
        refused
    )
    assert query(dsn, "SELECT count(*) FROM outbox_webhook_endpoint") == [(1,)]


def test_endpoints_show_prints_the_endpoints_health(dsn):
    endpoint = add(dsn)["endpoint"]["id"]

    async def fail_twice(wh: Webhooks) -> None:
        for _ in range(2):
            for delivery in (await wh.drained()).deliveries:
                await wh.deliveries.mark_if_pending(Mark.failed(delivery, "HTTP 500"))

    steps(dsn, fail_twice)
    outbox("endpoints", "disable", str(endpoint), "--database-url", dsn, "--reason", "moved")
    shown = json.loads(
        outbox("endpoints", "show", str(endpoint), "--database-url", dsn, "--json").stdout
    )
    assert shown["health"]["failure_streak"] == 2
    assert shown["health"]["last_success_at"] is None
    assert shown["health"]["last_failure_at"] is not None
    assert shown["endpoint"]["disabled_reason"] == "moved"
    text = outbox("endpoints", "show", str(endpoint), "--database-url", dsn).stdout
    assert "state:          disabled" in text
    assert "(moved)" in text
    assert "failure streak: 2" in text
    assert outbox("endpoints", "show", "999", "--database-url", dsn).exit_code == 1
