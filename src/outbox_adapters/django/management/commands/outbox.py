"""``python manage.py outbox <command> [options]``: the ``outbox`` CLI on Django's database.

From code: ``call_command("outbox", "--", "worker", "--lane", "email", "--drain")`` (the ``--``
keeps Django's parser off the command's options).

``--database-url`` is filled in from ``DATABASES`` (``--using`` picks which; ``default`` unless
named), so ``python manage.py outbox worker --lane email --smtp-url ...`` runs the worker against
the same database the app writes to. Every other option is the command's own (``outbox <command>
--help``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from outbox_adapters.cli import main
from outbox_adapters.django import database_url


class Command(BaseCommand):
    help = (
        "Run an outbox command (worker, relay, consume, healthcheck, prune, ...) on this database."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--using", default="default", help="Which DATABASES entry to use.")
        parser.add_argument("args", nargs="*", help="The outbox command and its options.")

    def run_from_argv(self, argv: list[str]) -> None:
        # `manage.py outbox ...`: everything after `outbox` is the outbox CLI's (Django's parser
        # would refuse its options), and the CLI's exit code (0 done, 1 a problem found, 2 a bad
        # setting) is the process's, as for `outbox` itself.
        rest = argv[2:]
        using = "default"
        if rest[:1] == ["--using"] and len(rest) > 1:
            using, rest = rest[1], rest[2:]
        main.main(args=_with_database(rest, using), prog_name="manage.py outbox")

    def handle(self, *args: str, **options: Any) -> None:  # noqa: ANN401
        # call_command("outbox", "--", ...): a non-zero exit is a CommandError with its code.
        try:
            main.main(
                args=_with_database(list(args), options.get("using") or "default"),
                prog_name="manage.py outbox",
            )
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
            if code:
                raise CommandError(
                    f"outbox {' '.join(args[:1])} exited with {code}", returncode=code
                ) from None


def _with_database(command: list[str], using: str) -> list[str]:
    """``command`` with ``--database-url`` of Django's ``using`` database after its name."""
    if command and not command[0].startswith("-"):
        return [command[0], "--database-url", database_url(using), *command[1:]]
    return command
