"""``outbox demo``: the command only; what it runs lives in :mod:`outbox_adapters.demo`."""

from __future__ import annotations

import sys

import click

from outbox_adapters.cli.options import Failure, database_errors, database_url, option

__all__ = ["demo_command"]


@click.command("demo")
@option(
    "--rows",
    env="OUTBOX_DEMO_ROWS",
    type=click.IntRange(1, 100_000),
    default=300,
    show_default=True,
    help="E-mails to enqueue.",
)
@database_url(
    "OUTBOX_DEMO_DATABASE_URL",
    required=False,
    help_text="PostgreSQL to use instead of an embedded one (the demo writes to a lane of its own).",
)
def demo_command(rows: int, database_url: str | None) -> None:
    """Run every lane on embedded servers, then check the invariants.

    E-mails through a local STARTTLS SMTP server (some bounce, some are retried); webhook events
    to two local receivers (one verifies every signature, one answers 410 Gone); domain events
    through a nats-server from the wheel to the e-mail and in-app channels, with a broker outage.

    Without --database-url it starts an embedded PostgreSQL (pgserver) and throws it away after;
    with one, only the e-mail part runs, on a lane of its own (the webhook and event parts would
    drain that database's whole outboxes). It ignores OUTBOX_DATABASE_URL: a demo must not write
    to your real outbox.
    """
    try:
        from outbox_adapters.demo.run import run_demo  # noqa: PLC0415 - the embedded extra
    except ImportError as exc:
        raise Failure(
            f"the demo needs the demo extra ({exc.name} is missing):"
            " pip install 'leased-outbox[demo]'"
        ) from None
    with database_errors():
        report = run_demo(rows=rows, database_url=database_url, out=sys.stdout, err=sys.stderr)
    if report.broken():
        raise Failure("the demo's invariants do not hold (see above)")
