"""``memory.RecordingWebhookSender`` on its own (scripting, the default, the budget, what it records)
and the two examples of docs/guides/testing-your-code.md, run exactly as the page prints them.

What a scripted answer means is the contract suite's (tests/contract/test_webhook_sender_contract.py):
there the same cases run against the HTTP sender and a real receiver.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from outbox_adapters.clock import FakeClock
from outbox_adapters.memory import RecordingWebhookSender, WebhookReply
from outbox_core.classify import HttpFailure
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.ports import WebhookSender

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "testing-your-code.md"
BUDGET = timedelta(seconds=5)
URL = "https://hooks.example.org/in"
OTHER = "https://hooks.example.org/other"


# --- the page's examples --------------------------------------------------------------------------


@pytest.mark.parametrize("example", ["testing-webhooks-example", "testing-email-example"])
def test_the_testing_guide_s_example_runs_as_printed(example: str) -> None:
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(
        rf"<!-- {example} -->\n```python\n(.*?)```\n<!-- /{example} -->", text, re.DOTALL
    )
    assert found is not None, f"docs/guides/testing-your-code.md lost its {example}"
    exec(compile(found.group(1), str(PAGE), "exec"), {"__name__": "guide"})  # noqa: S102


# --- the sender -----------------------------------------------------------------------------------


async def post(sender: WebhookSender, url: str = URL, budget: timedelta = BUDGET) -> Outcome:
    return await sender.send(url, headers={"webhook-id": "msg_1"}, body=b"{}", budget=budget)


async def test_by_default_every_request_is_answered_200_and_recorded_as_given() -> None:
    sender = RecordingWebhookSender()
    headers = {"webhook-id": "msg_1", "X-Tenant": "acme"}
    outcome = await sender.send(URL, headers=headers, body=b'{"a":1}', budget=BUDGET)
    assert outcome.kind is OutcomeKind.SENT
    assert outcome.progress == {"last_status": 200, "response": None}
    [request] = sender.requests
    assert (request.url, dict(request.headers), request.body) == (URL, headers, b'{"a":1}')
    assert (request.budget, request.outcome, request.error) == (BUDGET, outcome, None)
    headers["X-Tenant"] = "changed afterwards"
    assert request.headers["X-Tenant"] == "acme"  # a copy, read-only
    with pytest.raises(TypeError):
        request.headers["X-Tenant"] = "x"  # type: ignore[index]


async def test_a_bare_status_is_a_reply_with_that_status() -> None:
    sender = RecordingWebhookSender()
    sender.script(410, 202)
    gone, accepted = await post(sender), await post(sender)
    assert (gone.kind, gone.disable_endpoint) == (OutcomeKind.PERMANENT, True)
    assert gone.progress == {"last_status": 410, "response": None}
    assert accepted.progress == {"last_status": 202, "response": None}


async def test_a_url_s_script_wins_over_the_sequence_which_wins_over_the_default() -> None:
    sender = RecordingWebhookSender(default=WebhookReply(204))
    sender.script(500)
    sender.script_url(OTHER, 404)
    assert (await post(sender, OTHER)).reason == "receiver rejected the request: 404"
    assert (await post(sender, OTHER)).reason == "receiver error: 500"  # each result once
    assert (await post(sender)).progress == {"last_status": 204, "response": None}
    assert [r.url for r in sender.requests] == [OTHER, OTHER, URL]
    assert (sender.count(), sender.count(OTHER), len(sender.sent)) == (3, 2, 1)


async def test_a_reply_s_retry_after_date_is_read_against_the_sender_s_clock() -> None:
    clock = FakeClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))
    sender = RecordingWebhookSender(clock=clock)
    sender.script(WebhookReply(503, retry_after="Tue, 01 Jan 2030 12:10:00 GMT", body=b"later"))
    outcome = await post(sender)
    assert outcome.kind is OutcomeKind.TRANSIENT
    assert outcome.retry_after == timedelta(minutes=10)
    assert outcome.progress == {"last_status": 503, "response": "later"}


async def test_the_response_snippet_is_the_body_s_start() -> None:
    sender = RecordingWebhookSender(default=WebhookReply(200, body="é".encode() * 600 + b"\xff"))
    outcome = await post(sender)
    assert outcome.progress is not None
    assert outcome.progress["response"] == "é" * 512


@pytest.mark.parametrize(
    ("failure", "maybe_delivered"),
    [
        (HttpFailure.DNS, False),
        (HttpFailure.CONNECT_REFUSED, False),
        (HttpFailure.CONNECT_TIMEOUT, False),
        (HttpFailure.TLS, False),
        (HttpFailure.READ_TIMEOUT, True),
        (HttpFailure.RESET, True),
        (HttpFailure.BODY_TOO_LARGE, True),
    ],
)
async def test_a_scripted_failure_is_classified_by_whether_the_request_had_left(
    failure: HttpFailure, maybe_delivered: bool
) -> None:
    sender = RecordingWebhookSender(default=failure)
    outcome = await post(sender)
    assert (outcome.kind, outcome.maybe_delivered) == (OutcomeKind.TRANSIENT, maybe_delivered)
    assert outcome.progress == {"last_status": None, "response": None}


async def test_a_blocked_destination_is_permanent() -> None:
    outcome = await post(RecordingWebhookSender(default=HttpFailure.BLOCKED_DESTINATION))
    assert (outcome.kind, outcome.reason) == (
        OutcomeKind.PERMANENT,
        "destination address not allowed",
    )


async def test_an_outcome_is_returned_as_it_is_and_an_exception_raised_and_recorded() -> None:
    sender = RecordingWebhookSender()
    skipped = Outcome.skipped("the host's own answer")
    boom = RuntimeError("a bug in the sender")
    sender.script(skipped, boom)
    assert await post(sender) is skipped
    with pytest.raises(RuntimeError, match="a bug"):
        await post(sender)
    assert [(r.outcome, r.error) for r in sender.requests] == [(skipped, None), (None, boom)]


async def test_a_coroutine_function_is_awaited_when_the_request_is_sent() -> None:
    gate = asyncio.Event()

    async def when_open() -> Outcome:
        await gate.wait()
        return Outcome.sent()

    sender = RecordingWebhookSender(default=when_open)
    sending = asyncio.create_task(post(sender))
    await asyncio.sleep(0.01)
    assert not sending.done()
    gate.set()
    assert (await sending).kind is OutcomeKind.SENT


# --- the budget -----------------------------------------------------------------------------------


async def test_a_reply_within_the_budget_arrives_after_its_delay() -> None:
    sender = RecordingWebhookSender(default=WebhookReply(200, delay=timedelta(seconds=0.05)))
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await post(sender)
    assert outcome.kind is OutcomeKind.SENT
    assert loop.time() - started >= 0.05


@pytest.mark.parametrize(
    "slow",
    [WebhookReply.hang(), WebhookReply(200, delay=timedelta(seconds=1))],
    ids=["hang", "slower-than-the-budget"],
)
async def test_a_reply_slower_than_the_budget_is_cut_when_the_budget_runs_out(slow) -> None:
    sender = RecordingWebhookSender(default=slow)
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await post(sender, budget=timedelta(seconds=0.05))
    took = loop.time() - started
    assert (outcome.kind, outcome.reason) == (OutcomeKind.TRANSIENT, "attempt deadline reached")
    assert outcome.maybe_delivered  # the receiver had the request
    assert 0.05 <= took < 0.9


@pytest.mark.parametrize("budget", [timedelta(0), timedelta(seconds=-1)])
async def test_a_spent_budget_sends_nothing(budget: timedelta) -> None:
    outcome = await post(RecordingWebhookSender(), budget=budget)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.TRANSIENT, "attempt deadline reached")
    assert not outcome.maybe_delivered


# --- construction ---------------------------------------------------------------------------------


async def test_it_is_an_async_context_manager_that_still_works_once_closed() -> None:
    sender = RecordingWebhookSender()
    async with sender as entered:
        assert entered is sender
        closed_inside = sender.closed
    assert (closed_inside, sender.closed) == (False, True)
    assert (await post(sender)).kind is OutcomeKind.SENT


@pytest.mark.parametrize("status", [True, 99, 1000, "200"])
def test_a_reply_s_status_is_a_three_digit_int(status: object) -> None:
    with pytest.raises(ValueError, match="three-digit"):
        WebhookReply(status)  # type: ignore[arg-type]


def test_a_reply_s_delay_is_not_negative() -> None:
    with pytest.raises(ValueError, match="delay"):
        WebhookReply(delay=timedelta(seconds=-1))


@pytest.mark.parametrize("result", [None, "200", 2.5, True])
def test_what_cannot_be_a_reply_is_refused_when_scripted(result: object) -> None:
    sender = RecordingWebhookSender()
    with pytest.raises((TypeError, ValueError)):
        sender.script(result)  # type: ignore[arg-type]
