"""``outbox --config FILE``: a TOML file as every command's defaults, checked when read; flags and
``OUTBOX_*`` variables win over it; ``outbox config show`` says where each value came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.cli import one_line_error, outbox

pytestmark = pytest.mark.integration


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "outbox.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_command_takes_its_settings_from_the_file(dsn: str, tmp_path: Path) -> None:
    config = write(
        tmp_path,
        f'database-url = "{dsn}"\n\n[prune]\nolder-than = "3650d"\nonly = ["events"]\n',
    )
    result = outbox("--config", config, "prune", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"older_than": "3650d", "removed": {"events": 0}}
    # A variable wins over the file, a flag over both.
    env = {"OUTBOX_PRUNE_OLDER_THAN": "3000d"}
    assert (
        json.loads(outbox("--config", config, "prune", "--json", env=env).stdout)["older_than"]
        == "3000d"
    )
    flagged = outbox("--config", config, "prune", "--json", "--older-than", "2000d", env=env)
    assert json.loads(flagged.stdout)["older_than"] == "2000d"


def test_config_show_says_where_each_value_came_from_and_masks_secrets(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        'database-url = "postgresql://outbox:hunter2@db:5432/app"\n'
        'log-level = "info"\n\n'
        "[worker]\n"
        'smtp-url = "smtp://mailer:pa55@relay:587"\n'
        "batch-size = 7\n\n"
        "[feed.prune]\n"
        'older-than = "90d"\n',
    )
    result = outbox(
        "--config", config, "config", "show", "--json", env={"OUTBOX_POLL_INTERVAL": "3"}
    )
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.stdout
    assert "pa55" not in result.stdout
    shown = json.loads(result.stdout)
    worker = shown["commands"]["worker"]
    assert worker["database-url"] == {
        "value": "postgresql://outbox:***@db:5432/app",
        "from": "config file",
    }
    assert worker["smtp-url"]["value"] == "smtp://mailer:***@relay:587"
    assert worker["batch-size"] == {"value": 7, "from": "config file"}
    assert worker["poll-interval"] == {"value": 3.0, "from": "environment"}
    assert worker["rows-in-flight"] == {"value": 1, "from": "default"}
    assert shown["commands"]["feed prune"]["older-than"] == {"value": "90d", "from": "config file"}
    assert shown["commands"]["relay"]["database-url"]["from"] == "config file"
    assert "batch 7, batch timeout 420s" in shown["lanes"]["email (outbox worker, effective)"]
    assert "batch 500 in windows of 500" in shown["lanes"]["relay (outbox relay)"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[wroker]\nlane = 'x'\n", "[wroker] is not a command"),
        ("[worker]\nsmtp-ur = 'x'\n", "[worker] has no setting 'smtp-ur'"),
        ("[feed.prun]\nolder-than = '1d'\n", "[feed.prun] is not a command"),
        ("colour = 'blue'\n", "top-level setting 'colour' is no command's setting"),
        ("[worker\n", "not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_naming_the_table_and_key(
    tmp_path: Path, text: str, words: str
) -> None:
    result = outbox("--config", write(tmp_path, text), "config", "show")
    assert result.exit_code == 2
    assert words in one_line_error(result)


def test_a_bad_value_in_the_file_is_refused_naming_the_option(dsn: str, tmp_path: Path) -> None:
    config = write(
        tmp_path, f'[prune]\ndatabase-url = "{dsn}"\nbatch-size = 0\nolder-than = "1d"\n'
    )
    result = outbox("--config", config, "prune")
    assert result.exit_code == 2
    # click's own range check, as for the flag: the error line names the option.
    assert "Error: Invalid value for '--batch-size'" in result.stderr
    missing = outbox("--config", str(tmp_path / "nope.toml"), "config", "show")
    assert missing.exit_code == 2
    assert "cannot read it" in one_line_error(missing)
