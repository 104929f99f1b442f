"""The ``outbox`` command's entry point (also ``python -m outbox_adapters``).

It imports the command line only when it runs, so an install without the ``cli`` extra gets one
line naming the extra to install (exit 2) instead of a traceback."""

from __future__ import annotations

import sys

from outbox_adapters.extras import MissingExtra, missing_extra


def main() -> None:
    """Run ``outbox``; without click, say which extra brings it."""
    try:
        from outbox_adapters.cli import main as cli  # noqa: PLC0415 - click is the cli extra
    except ImportError as exc:
        error = missing_extra(exc, "the `outbox` command")
        if not isinstance(error, MissingExtra):
            raise
        print(f"Error: {error}", file=sys.stderr)  # noqa: T201 - there is no click to say it
        sys.exit(2)
    cli(prog_name="outbox")


if __name__ == "__main__":
    main()
