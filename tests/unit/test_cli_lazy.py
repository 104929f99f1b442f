"""The CLI loads a command's technology only when that command runs; a missing extra is one line
and exit 2 (cli/__init__.py, outbox_adapters.extras)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import click
import pytest
from click.testing import CliRunner

from outbox_adapters import __version__
from outbox_adapters.cli import COMMANDS, SUBCOMMANDS, main
from outbox_adapters.extras import EXTRAS, MissingExtra, missing_extra, require

TECHNOLOGIES = ("psycopg", "sqlalchemy", "aiosmtplib", "httpx", "nats", "aiokafka", "starlette")


def _run_blocked(blocked: tuple[str, ...], code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where importing any of ``blocked`` fails, as when
    the extra that brings it is not installed."""
    prelude = textwrap.dedent(
        f"""
        import sys
        for name in {blocked!r}:
            sys.modules[name] = None  # import raises ModuleNotFoundError, as if not installed
        """
    )
    return subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_listed_help_of_every_command_is_its_own():
    ctx = click.Context(main)
    for name, (_module, _attribute, help_text) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None
        assert command.get_short_help_str(limit=500) == help_text, name
    for group, subs in SUBCOMMANDS.items():
        parent = main.get_command(ctx, group)
        assert isinstance(parent, click.Group)
        for sub, (_module, _attribute, help_text) in subs.items():
            assert parent.commands[sub].get_short_help_str(limit=500) == help_text


def test_version_is_the_package_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_help_and_version_import_no_technology():
    code = f"""
        import sys
        from click.testing import CliRunner
        from outbox_adapters.cli import main
        for args in (["--help"], ["--version"]):
            assert CliRunner().invoke(main, args).exit_code == 0
        loaded = sorted(m for m in {TECHNOLOGIES!r} if m in sys.modules)
        print(loaded)
    """
    done = _run_blocked((), code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "blocked", "extra"),
    [
        (["endpoints", "--help"], ("httpx", "httpcore"), "webhooks"),
        (["enqueue", "webhook", "--tenant", "acme", "--help"], ("httpx", "httpcore"), "webhooks"),
        (["worker", "--help"], ("psycopg", "psycopg_pool"), "postgres"),
        (
            ["dlq", "list", "--broker", "kafka://127.0.0.1:1"],
            ("aiokafka",),
            "kafka",
        ),
        (
            ["dlq", "list", "--broker", "nats://127.0.0.1:1"],
            ("nats",),
            "nats",
        ),
        # The broker's extra is checked as the option is read, before the database is opened.
        (
            [
                "relay",
                "--broker",
                "nats://127.0.0.1:1",
                "--database-url",
                "postgresql://127.0.0.1:1/x",
            ],
            ("nats",),
            "nats",
        ),
        (
            [
                "consume",
                "--channel",
                "inapp",
                "--database-url",
                "postgresql://127.0.0.1:1/x",
                "--broker",
                "kafka://127.0.0.1:1",
            ],
            ("aiokafka",),
            "kafka",
        ),
    ],
)
def test_a_command_whose_extra_is_missing_exits_2_naming_the_extra(args, blocked, extra):
    code = f"""
        import sys
        from outbox_adapters.cli import main
        main({args!r}, prog_name="outbox")
    """
    done = _run_blocked(blocked, code)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"pip install 'leased-outbox[{extra}]'" in lines[0]


def test_the_outbox_script_without_click_names_the_cli_extra():
    done = _run_blocked(("click",), "from outbox_adapters.__main__ import main\nmain()\n")
    assert done.returncode == 2, (done.stdout, done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    assert "pip install 'leased-outbox[cli]'" in line


def test_the_webhook_lane_without_its_extra_is_refused_naming_it():
    code = """
        from outbox_adapters.cli import main
        main(["worker", "--lane", "webhooks", "--database-url", "postgresql://127.0.0.1:1/x"],
             prog_name="outbox")
    """
    done = _run_blocked(("httpx", "httpcore"), code)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "pip install 'leased-outbox[webhooks]'" in done.stderr.strip().splitlines()[-1]


def test_the_nats_adapter_stands_without_aiokafka_and_kafka_without_nats():
    code = """
        from outbox_adapters.brokers import broker_from_url
        from outbox_adapters.brokers.errors import is_broker_error, publish_outcome
        broker = broker_from_url("{url}")
        print(type(broker).__name__, publish_outcome(OSError("refused"), "t").kind.value)
    """
    nats = _run_blocked(("aiokafka",), code.format(url="nats://127.0.0.1:1"))
    assert nats.returncode == 0, nats.stderr
    assert nats.stdout.split()[0] == "NatsBroker"
    kafka = _run_blocked(("nats",), code.format(url="kafka://127.0.0.1:1"))
    assert kafka.returncode == 0, kafka.stderr
    assert kafka.stdout.split()[0] == "KafkaBroker"


def test_missing_extra_names_the_extra_and_the_module():
    error = missing_extra(ModuleNotFoundError("no", name="aiokafka.errors"), "a kafka:// broker")
    assert isinstance(error, MissingExtra)
    assert error.extra == "kafka"
    assert "pip install 'leased-outbox[kafka]'" in str(error)
    other = ModuleNotFoundError("no", name="not_an_extra")
    assert missing_extra(other, "x") is other


def test_require_refuses_an_extra_with_a_module_missing(monkeypatch):
    monkeypatch.setitem(EXTRAS, "embedded", ("nonexistent_module_of_outbox_tests",))
    with pytest.raises(MissingExtra, match=r"pip install 'leased-outbox\[embedded\]'"):
        require("embedded", "the embedded servers")
