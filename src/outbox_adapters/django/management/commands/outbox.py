"""``python manage.py outbox <command> [options]``: the ``outbox`` CLI on Django's database.

From code: ``call_command("outbox", "--", "worker", "--lane", "email", "--drain")`` (the ``--``
keeps Django's parser off the command's options).

``--database-url`` is filled in from ``DATABASES`` (``--using`` picks which; ``default`` unless
named), with every libpq parameter of the entry's ``OPTIONS`` (sslmode, sslrootcert, the
search_path in ``options``, ...: :func:`outbox_adapters.django.conninfo_from_settings`), so
``python manage.py outbox worker --lane email --smtp-url ...`` runs the worker against the same
database, as the same user over the same TLS, the app writes to. Every other option is the command's own (``outbox <command>
--help``). An entry the string can't be built from is one ``Error:`` line naming the key (never
a value: the password stays out of every message), exit status 2.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from django.core.exceptions import ImproperlyConfigured
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
        try:
            command = _with_database(rest, using)
        except ImproperlyConfigured as exc:
            sys.stderr.write(f"Error: {exc}\n")
            sys.exit(2)
        main.main(args=command, prog_name="manage.py outbox")

    def handle(self, *args: str, **options: Any) -> None:  # noqa: ANN401
        # call_command("outbox", "--", ...): a non-zero exit is a CommandError with its code.
        try:
            command = _with_database(list(args), options.get("using") or "default")
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc), returncode=2) from None
        try:
            main.main(args=command, prog_name="manage.py outbox")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
            if code:
                raise CommandError(
                    f"outbox {' '.join(args[:1])} exited with {code}", returncode=code
                ) from None


def _with_database(command: list[str], using: str) -> list[str]:
    """``command`` with ``--database-url`` of Django's ``using`` database after the name of the
    command that takes it (``worker``; ``schema apply``, a group's subcommand), unless the command
    takes none (``schema sql``) or it is given already."""
    current: click.Command = main
    depth = 0
    while isinstance(current, click.Group) and depth < len(command):
        found = current.get_command(click.Context(current), command[depth])
        if found is None:
            return command  # not a command: the CLI's own error says so
        current, depth = found, depth + 1
    takes_url = any(param.name == "database_url" for param in current.params)
    if depth == 0 or not takes_url or "--database-url" in command[depth:]:
        return command
    return [*command[:depth], "--database-url", database_url(using), *command[depth:]]
