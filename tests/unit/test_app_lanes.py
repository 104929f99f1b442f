"""The application object's lane descriptions: what each refuses at construction and before any
connection, the options each takes (what `outbox worker --lane NAME` refuses), and what the CLI's
options change. Nothing here connects: the refusals come before the database is opened."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import types
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from outbox_adapters.app import (
    EmailChannelLane,
    EmailLane,
    InAppChannelLane,
    Lane,
    Outbox,
    RelayLane,
    WebhookLane,
    check_lane,
)
from outbox_adapters.cli import main
from outbox_adapters.http import HttpxWebhookSender
from outbox_core.errors import ConfigurationError

DSN = "postgresql://127.0.0.1:1/nowhere"
NATS = "nats://127.0.0.1:9"


def test_every_built_in_description_is_a_lane():
    for lane in (EmailLane(), WebhookLane(), RelayLane(), EmailChannelLane(), InAppChannelLane()):
        assert isinstance(lane, Lane)
        assert {"database_url", "drain", "lane"} <= lane.options


def test_the_app_refuses_what_is_not_a_lane_and_a_lane_described_twice():
    with pytest.raises(ConfigurationError, match="is not a lane"):
        Outbox(lanes=[object()])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="lane 'webhooks' is described twice"):
        Outbox(lanes=[WebhookLane(), WebhookLane(allow_http=True)])
    # The e-mail channel's name is its mail lane's: the same name as an e-mail lane is refused.
    with pytest.raises(ConfigurationError, match="'notification-email' is described twice"):
        Outbox(lanes=[EmailLane("notification-email"), EmailChannelLane()])


@pytest.mark.parametrize(
    ("lane", "app", "words"),
    [
        (RelayLane(), Outbox(database_url=DSN), "the lane 'events' needs a broker (--broker)"),
        (InAppChannelLane(), Outbox(database_url=DSN), "needs a broker"),
        (
            EmailChannelLane(),
            Outbox(database_url=DSN, broker=NATS, sender="a@example.org"),
            "needs recipes or a public URL (--public-url)",
        ),
        (
            EmailChannelLane(public_url="https://app.example.org"),
            Outbox(database_url=DSN, broker=NATS, sender="a@example.org"),
            "needs SMTP settings (--smtp-url) or a mailer",
        ),
        (EmailLane(), Outbox(), "names no database_url"),
        (
            WebhookLane(allow_http=True),
            Outbox(database_url=DSN, environment="production"),
            "https:// URLs only in production",
        ),
        (
            WebhookLane(allow=("not a network",)),
            Outbox(database_url=DSN),
            "allow (--allow-destination)",
        ),
    ],
)
def test_a_lane_says_what_the_app_lacks_before_anything_connects(lane, app, words):
    with pytest.raises(ConfigurationError) as caught:
        check_lane(app, lane)
    assert words in str(caught.value)


def test_running_checks_every_lane_before_starting_any():
    app = Outbox(database_url=DSN, lanes=[InAppChannelLane(), RelayLane()])

    async def go() -> None:
        async with app.running():
            pytest.fail("the block ran although the lanes lack a broker")

    with pytest.raises(ConfigurationError, match="needs a broker"):
        asyncio.run(go())


def test_the_webhook_lane_gives_its_caps_to_the_sender():
    lane = WebhookLane(max_per_origin=3, max_connections=7, allow_http=True)
    sender = lane._sender(Outbox(database_url=DSN))
    assert isinstance(sender, HttpxWebhookSender)
    assert sender.max_per_origin == 3
    with pytest.raises(ConfigurationError, match="max_per_origin: a positive count"):
        WebhookLane(max_per_origin=0)


def test_a_sender_of_the_host_s_own_replaces_httpx():
    @contextlib.asynccontextmanager
    async def recording():
        yield object()

    lane = WebhookLane(sender=recording)
    assert lane.describe(Outbox(database_url=DSN))[-1] == "webhook sender: the application's own"


@pytest.mark.parametrize(
    ("lane", "extra", "flag"),
    [
        ("events", ["--batch-size", "3"], "--batch-size"),
        ("events", ["--smtp-url", "smtp://relay.example.org:587"], "--smtp-url"),
        ("notification-inapp", ["--sender", "a@example.org"], "--sender"),
        ("notification-inapp", ["--no-leader"], "--leader"),
        ("notification-email", ["--rows-in-flight", "2"], "--rows-in-flight"),
        ("email", ["--broker", NATS], "--broker"),
        ("email", ["--public-url", "https://app.example.org"], "--public-url"),
        ("webhooks", ["--topic", "t"], "--topic"),
    ],
)
def test_outbox_worker_refuses_an_option_the_lane_does_not_take(lane, extra, flag):
    result = CliRunner().invoke(
        main, ["worker", "--lane", lane, "--database-url", DSN, "--drain", *extra]
    )
    assert result.exit_code == 2, result.output
    assert f"{flag}: the lane {lane!r} does not take this option" in result.output


def test_outbox_worker_runs_the_relay_and_channels_only_with_a_broker():
    for lane in ("events", "notification-inapp"):
        result = CliRunner().invoke(main, ["worker", "--lane", lane, "--database-url", DSN])
        assert result.exit_code == 2, result.output
        assert f"the lane {lane!r} needs a broker (--broker)" in result.output
        assert result.stdout == ""


def test_a_channel_consumes_one_topic():
    result = CliRunner().invoke(
        main,
        ["worker", "--lane", "notification-inapp", "--database-url", DSN, "--broker", NATS,
         "--topic", "a", "--topic", "b"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--topic (OUTBOX_TOPIC): the lane 'notification-inapp' consumes one topic" in (
        result.output
    )


@pytest.fixture
def host_module(monkeypatch):
    module = types.ModuleType("host_outbox_for_tests")
    module.outbox = Outbox(  # type: ignore[attr-defined]
        database_url=DSN,
        broker=NATS,
        lanes=[RelayLane(topics=("orders",), max_age=timedelta(days=2)), InAppChannelLane()],
    )
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_with_app_a_lane_it_does_not_describe_is_refused_naming_its_lanes(host_module):
    result = CliRunner().invoke(
        main, ["--app", f"{host_module.__name__}:outbox", "worker", "--lane", "webhooks"]
    )
    assert result.exit_code == 2, result.output
    assert "no lane 'webhooks' (its lanes: 'events', 'notification-inapp')" in result.output


def test_with_app_the_options_given_replace_the_app_s_values_and_defaults_do_not(
    host_module, monkeypatch
):
    seen: dict[str, Any] = {}

    def start(app, lane, *, drain):
        seen.update(app=app, lane=lane, drain=drain)

    monkeypatch.setattr("outbox_adapters.cli.worker.start_lane", start)
    app_flag = ["--app", f"{host_module.__name__}:outbox"]
    result = CliRunner().invoke(main, [*app_flag, "worker", "--lane", "events"])
    assert result.exit_code == 0, result.output
    assert seen["lane"] == host_module.outbox.lanes[0]  # the app's topics and retention
    assert seen["app"].broker == NATS
    assert seen["app"].poll_interval == 1.0

    result = CliRunner().invoke(
        main,
        [*app_flag, "worker", "--lane", "events", "--topic", "other", "--max-age-days", "1",
         "--poll-interval", "0.5", "--no-leader"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert seen["lane"] == RelayLane(topics=("other",), max_age=timedelta(days=1))
    assert (seen["app"].poll_interval, seen["app"].leader) == (0.5, False)
    assert seen["app"].database_url == DSN  # not given: the app's


def test_the_app_s_own_streams_are_what_every_lane_of_their_topics_declares():
    from outbox_core.brokers import StreamSpec  # noqa: PLC0415

    own = StreamSpec(
        name="DOMAIN", subjects=("signup.events", "billing.events"), max_age=timedelta(days=2)
    )
    app = Outbox(database_url=DSN, broker=NATS, streams=[own])
    relay = RelayLane(topics=["signup.events", "billing.events", "audit.events"])
    declared = list(relay.streams(app))
    # Both topics the app's stream holds are declared once, as the app says; a topic it does not
    # hold gets its own stream.
    assert declared[0] == own
    assert len(declared) == 2
    assert declared[1].subjects == ("audit.events",)
    assert list(InAppChannelLane(topic="billing.events").streams(app)) == [own]
    assert list(InAppChannelLane(topic="billing.events").streams(Outbox(database_url=DSN))) != [own]
