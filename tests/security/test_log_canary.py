"""Security promise 2: nothing secret is logged (RELIABILITY.md).

"Nothing secret is logged: no payload bodies, token URLs, signatures, webhook secrets, SMTP
credentials. A canary test over the whole suite's captured logs finds none."

The suite-wide check is the ``log_canary`` plugin (``tests/log_canary.py``, loaded by
``tests/conftest.py``): every record of every test goes through a handler on the root logger, and
the session fails if any registered canary appears in one. This module

* pushes canaries through the whole pipeline at DEBUG (library and client libraries): a secret
  link in the payload, the SMTP password (right and wrong), deliveries, a bounce, a deferral, an
  undecodable row; and through ``outbox worker --log-level debug``;
* proves, in a subprocess, that the plugin really fails a session that logs a canary (in a message,
  in an ``extra=`` field, in an exception's text, during a fixture's teardown), and passes a clean one.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from outbox_adapters.cli import main
from outbox_adapters.demo.sink import SmtpSink

pytestmark = pytest.mark.integration

#: Client-side loggers set to DEBUG as well: a dependency that logs a secret leaks it just the same.
#: (The test SMTP server's own logger, "mail.log", is not the library's and is left alone.)
DEBUG_LOGGERS = (
    "outbox_adapters",
    "outbox_core",
    "aiosmtplib",
    "psycopg",
    "psycopg.pool",
    "asyncio",
)


@pytest.fixture
def debug_logs(caplog):
    for name in DEBUG_LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


@pytest.fixture
def auth_sink(log_canary):
    password = log_canary.new("smtp-password")
    with SmtpSink(tls="starttls", username="mailer", password=password) as sink:
        yield sink, password


async def test_a_canary_through_the_whole_pipeline_is_never_logged(
    pipeline, auth_sink, log_canary, debug_logs, wire_check
):
    sink, password = auth_sink
    pipeline.sink = sink
    reset = f"https://shop.example/reset?token={log_canary.new('reset')}"
    fields = {"password_reset_url": reset, "setup_url": reset + "&setup=1", "customer": "c-1"}
    start = log_canary.mark()

    ids = await pipeline.enqueue(
        *(
            pipeline.email(to=to, text="Reset: $password_reset_url", fields=fields)
            for to in ("ann@example.org", "bounce@example.org", "transient@example.org")
        )
    )
    raw = pipeline.insert_raw(
        {"to": "ann@example.org\r\nBcc: x@y", "subject": "Hi", "text": "x", **fields}
    )
    await pipeline.drain(pipeline.mailer(username="mailer", password=password))
    # Then the deferred row again, with a wrong password (itself a canary): 535, and the reason
    # must not echo it.
    wrong = log_canary.new("wrong-password")
    with pipeline_due(pipeline):
        await pipeline.drain(pipeline.mailer(username="mailer", password=wrong))
    assert sink.handler.commands["AUTH"] >= 2  # one per session: right, then wrong

    rows = pipeline.rows()
    assert [rows[i]["status"] for i in (*ids, raw)] == ["dispatched", "failed", "failed", "failed"]
    assert "535" in rows[ids[2]]["last_error"]
    [delivered] = sink.received  # the canary really went through, into the mail
    assert reset in wire_check.reparse(delivered.data).get_body(("plain",)).get_content()
    # Captured at DEBUG/INFO (so the check below is not vacuous) ...
    texts = log_canary.texts(since=start)
    assert any(
        logger == "outbox_adapters.runtime" and level == "INFO" for logger, level, _ in texts
    )
    # ... and not one record holds the link, the password or the wrong password.
    assert log_canary.leaks_since(start) == []
    for row in rows.values():
        for secret in (reset, password, wrong):
            assert secret not in (row["last_error"] or "")


class pipeline_due:  # noqa: N801 - reads as a phrase: `with pipeline_due(pipeline):`
    """Make the lane's deferred rows due again (a retry a minute away, now)."""

    def __init__(self, pipeline):
        self.pipeline = pipeline

    def __enter__(self):
        import psycopg  # noqa: PLC0415

        with psycopg.connect(self.pipeline.dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE outbox_message SET next_attempt_at = now() WHERE lane = %s AND status ="
                " 'pending'",
                (self.pipeline.lane,),
            )

    def __exit__(self, *exc):
        return False


def test_the_cli_worker_at_debug_never_logs_or_prints_the_smtp_password(
    dsn, lane, auth_sink, log_canary, debug_logs
):
    sink, password = auth_sink
    start = log_canary.mark()
    result = CliRunner().invoke(
        main,
        [
            "--log-level", "debug", "worker", "--drain", "--database-url", dsn, "--lane", lane,
            "--smtp-url", f"smtp://mailer:{password}@127.0.0.1:{sink.port}",
            "--smtp-ca-file", str(sink.ca_file), "--sender", "noreply@shop.example",
            "--poll-interval", "0.1",
        ],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "auth: configured" in result.stdout
    assert password not in result.output
    assert log_canary.leaks_since(start) == []


@pytest.mark.parametrize(
    "subject",
    ["$password_reset_url =?UTF-8?Q?=0A?=", "${password_reset_url}" + "x" * 1000],
    ids=["encoded-word", "too-long"],
)
async def test_a_refusal_reason_never_echoes_a_secret_field(pipeline, log_canary, subject):
    # check_header_value once put the rendered value into its message: a refused subject that
    # uses $password_reset_url stored the reset link in last_error (shown by `outbox failed`,
    # logged as outbox_reason, copied into the requeue audit where no scrub reaches it).
    # Deliberately NOT registered: a regression would otherwise fail the whole session at its end.
    # The test checks this token itself, in the row and in every record it logged.
    token = "echo-" + os.urandom(8).hex()
    start = log_canary.mark()
    row_id = pipeline.insert_raw(
        {"to": "ann@example.org", "subject": subject, "text": "Hi", "password_reset_url": token}
    )
    await pipeline.drain()
    row = pipeline.rows()[row_id]
    assert row["status"] == "failed"
    assert token not in row["last_error"]
    assert not [text for _, _, text in log_canary.texts(since=start) if token in text]


# --- the plugin itself ------------------------------------------------------------------------

_TESTS = Path(__file__).resolve().parents[1]
_LEAKY = """
import logging
import pytest

CANARY = "canary-meta-{hex}"
BOOM = "boom-meta-{hex}"


@pytest.fixture(scope="session")
def leaks_at_teardown(log_canary):
    log_canary.register("teardown-meta-{hex}")
    yield
    logging.getLogger("outbox_adapters.runtime").warning("closing %s", "teardown-meta-{hex}")


def test_debug_message(log_canary):
    token = log_canary.new("fixture")
    logging.getLogger("outbox_adapters.runtime").debug("payload %r", {{"password_reset_url": token}})


def test_extra_field():
    logging.getLogger("outbox_core").info("row 1: permanent", extra={{"outbox_reason": CANARY}})


def test_exception_text():
    try:
        raise ValueError(BOOM)
    except ValueError:
        logging.getLogger("somewhere.else").exception("it failed")


def test_uses_the_fixture(leaks_at_teardown):
    pass
"""
_CLEAN = """
import logging

CANARY = "canary-meta-{hex}"


def test_logs_no_secret(log_canary):
    log_canary.new("fixture")
    logging.getLogger("outbox_adapters.runtime").debug("row %s: sent", 1)
"""


def run_inner_session(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # keep the repository's settings out
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(source))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(_TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "log_canary",
            "-p",
            "no:cacheprovider",
            "-q",
            "test_inner.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_plugin_fails_a_session_that_logs_a_canary(tmp_path):
    hex_ = os.urandom(6).hex()
    result = run_inner_session(tmp_path, _LEAKY.format(hex=hex_))
    out = result.stdout
    assert "4 passed" in out  # every test passed ...
    assert result.returncode == 1, out  # ... and the session failed all the same
    assert "LOG CANARY LEAKED" in out
    assert (
        "test_inner.py::test_debug_message (call): logger 'outbox_adapters.runtime' at DEBUG" in out
    )
    assert "test_inner.py::test_extra_field (call): logger 'outbox_core' at INFO" in out
    assert f"canary 'canary-meta-{hex_}'" in out
    assert f"canary 'boom-meta-{hex_}'" not in out  # not registered: not a canary
    assert f"canary 'teardown-meta-{hex_}'" in out  # session fixture teardown, after every test
    assert "(teardown): logger 'outbox_adapters.runtime' at WARNING" in out


def test_the_plugin_finds_a_module_constant_in_an_exception(tmp_path):
    hex_ = os.urandom(6).hex()
    source = (
        _LEAKY.format(hex=hex_)
        .replace('BOOM = "boom', 'CANARY_BOOM = "boom')
        .replace("ValueError(BOOM)", "ValueError(CANARY_BOOM)")
    )
    result = run_inner_session(tmp_path, source)
    assert result.returncode == 1
    assert (
        "test_inner.py::test_exception_text (call): logger 'somewhere.else' at ERROR"
        in result.stdout
    )
    assert f"canary 'boom-meta-{hex_}'" in result.stdout


def test_the_plugin_passes_a_clean_session(tmp_path):
    result = run_inner_session(tmp_path, _CLEAN.format(hex=os.urandom(6).hex()))
    assert result.returncode == 0, result.stdout
    assert "0 leak(s)" in result.stdout
