"""``python -m examples.invoice [--database-url URL]``: run the invoice example, exit 1 if it failed.

PostgreSQL: ``--database-url``, else ``OUTBOX_DEMO_DATABASE_URL``, else a container when a Docker
engine answers, else an embedded server from the ``pgserver`` wheel (``find_postgres``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import warnings
from collections.abc import Sequence
from typing import Final

from examples.invoice.run import run_invoice_example
from outbox_adapters.postgres.embedded import find_postgres

#: The environment variable ``outbox demo`` reads too.
DATABASE_ENV: Final = "OUTBOX_DEMO_DATABASE_URL"
_SOURCES: Final = {
    "env": "the given URL",
    "container": "a container",
    "embedded": "embedded pgserver",
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.invoice",
        description="An invoice e-mail with a secret link and a PDF, scrubbed once sent, and a"
        " signed webhook to a local receiver.",
    )
    parser.add_argument(
        "--database-url",
        help=f"PostgreSQL to use (a scratch database: the webhook workers drain its whole webhook"
        f" outbox); default ${DATABASE_ENV}, else a container or an embedded server",
    )
    args = parser.parse_args(argv)
    out = sys.stdout
    with warnings.catch_warnings():
        # pgserver asks platformdirs for a runtime dir, which most containers don't have.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        with find_postgres(args.database_url, env=DATABASE_ENV) as server:
            out.write(f"PostgreSQL: {_SOURCES.get(server.source, server.source)}\n")
            if server.source == "env":
                out.write(
                    "  (the webhook workers work this database's whole webhook outbox, as"
                    " `outbox worker --lane webhooks` would: use a scratch database)\n"
                )
            report = asyncio.run(run_invoice_example(server.dsn, out=out))
    broken = report.broken()
    if broken:
        out.write("\nFAILED:\n" + "".join(f"  - {reason}\n" for reason in broken))
        return 1
    out.write(
        "\nall checks hold: the sent row is dispatched with pay_url and attachments scrubbed, the"
        " sink got the mail with the link and the PDF, the receiver verified the webhook\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
