"""How the CLI tests run ``outbox``: in-process through click's runner, and the one-line error."""

from __future__ import annotations

from click.testing import CliRunner, Result

from outbox_adapters.cli import main


def outbox(*args: str, env: dict[str, str] | None = None) -> Result:
    # catch_exceptions=False: an unexpected exception fails the test with its traceback.
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def one_line_error(result: Result) -> str:
    """The error a user sees: exactly one line on stderr, no traceback."""
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]
