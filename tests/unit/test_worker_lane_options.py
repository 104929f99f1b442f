"""`outbox worker` refuses an option its lane does not take, naming the option and the lane."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from outbox_adapters.cli import main

DSN = "postgresql://127.0.0.1:1/nowhere"


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--batch-size", "3"], "--batch-size"),
        (["--budget", "dial=12"], "--budget"),
        (["--rows-in-flight", "2"], "--rows-in-flight"),
        (["--smtp-url", "smtp://relay.example.org:587"], "--smtp-url"),
        (["--sender", "a@example.org"], "--sender"),
        (["--smtp-sessions", "2"], "--smtp-sessions"),
    ],
)
def test_the_webhook_lane_refuses_the_e_mail_options(extra, flag):
    result = CliRunner().invoke(
        main, ["worker", "--lane", "webhooks", "--database-url", DSN, "--drain", *extra]
    )
    assert result.exit_code == 2, result.output
    assert f"{flag}: the lane 'webhooks' does not take this option" in result.output


def test_an_e_mail_lane_refuses_the_webhook_options():
    result = CliRunner().invoke(
        main, ["worker", "--lane", "email", "--database-url", DSN, "--drain", "--allow-http"]
    )
    assert result.exit_code == 2, result.output
    assert "--allow-http: the lane 'email' does not take this option" in result.output


def test_an_option_set_by_the_environment_is_reported_not_refused(monkeypatch):
    # A deployment may share its OUTBOX_* variables between lanes: said on stderr, not fatal.
    # The run goes on to the database (unreachable here: exit 1, after the note).
    monkeypatch.setenv("OUTBOX_BATCH_SIZE", "3")
    result = CliRunner().invoke(
        main, ["worker", "--lane", "webhooks", "--database-url", DSN, "--drain", "--no-listen"]
    )
    assert "--batch-size (set by its environment variable) is not used by the lane 'webhooks'" in (
        result.output
    )
    assert result.exit_code != 2, result.output
