"""What every command shares: options with their ``OUTBOX_*`` twins, errors, the database helpers.

Two exceptions carry the exit codes the package docstring promises: :class:`SettingError` (2, one
line naming the setting) and :class:`Failure` (1). psycopg's failures become one line each in ONE
place, :func:`database_errors`; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine, Iterator
from datetime import datetime
from typing import Any, TypeVar

import click
import psycopg
from psycopg.conninfo import conninfo_to_dict

from outbox_adapters.postgres import pools
from outbox_adapters.webhook_scope import check_tenant
from outbox_core.errors import ConfigurationError, InvalidMessage, StoreUnavailable
from outbox_core.ports import Encryptor

__all__ = [
    "KEYS_OPTION",
    "Failure",
    "SettingError",
    "allow_options",
    "connection_pool",
    "database_errors",
    "database_url",
    "describe_keys",
    "describe_secrets",
    "encryption_keys",
    "encryptor_from",
    "json_option",
    "lane_option",
    "option",
    "run",
    "setting_error",
    "stop_on_signals",
    "tenant_option",
    "when",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class SettingError(click.ClickException):
    """A setting that can't work: one line naming it, exit status 2 (as click's usage errors)."""

    exit_code = 2


class Failure(click.ClickException):
    """The command ran and found a problem: exit status 1."""

    exit_code = 1


def setting_error(option: str, envvar: str, message: str) -> SettingError:
    """``--option (OUTBOX_OPTION): message``, so the user knows which of the two to fix."""
    return SettingError(f"{option} ({envvar}): {message}")


def option(*decls: str, env: str, **kwargs: Any) -> Callable[[F], F]:  # noqa: ANN401
    """A click option with its ``OUTBOX_*`` environment twin, shown in ``--help``."""
    return click.option(*decls, envvar=env, show_envvar=True, **kwargs)


# --- shared flags ---------------------------------------------------------------------------------


def json_option(command: Any) -> Any:  # noqa: ANN401 - a click decorator
    return option(
        "--json", "as_json", env="OUTBOX_JSON", is_flag=True, help="Print one JSON document."
    )(command)


def allow_options(command: Any) -> Any:  # noqa: ANN401 - a click decorator
    command = option(
        "--allow-http",
        env="OUTBOX_ALLOW_HTTP",
        is_flag=True,
        help="Accept http:// URLs (tests and internal receivers; https only in production).",
    )(command)
    return option(
        "--allow-destination",
        "allow",
        env="OUTBOX_ALLOW_DESTINATION",
        multiple=True,
        metavar="CIDR",
        help="An address range a webhook may reach although it is private or local (repeat).",
    )(command)


def _check_tenant(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_tenant(value)
    except InvalidMessage as exc:
        raise SettingError(f"--tenant (OUTBOX_TENANT): {exc}") from None


def tenant_option(*, required: bool, help_text: str) -> Callable[[F], F]:
    """``--tenant`` (``OUTBOX_TENANT``): the tenant (the host's customer id) a webhook command
    acts for, checked as it is read."""
    return option(
        "--tenant", env="OUTBOX_TENANT", required=required, callback=_check_tenant, help=help_text
    )


def when(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


# --- database -------------------------------------------------------------------------------------


def _check_database_url(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> str | None:
    if value is None:
        return None
    try:
        conninfo_to_dict(value)
    except psycopg.ProgrammingError:
        # psycopg's message quotes the value, which may hold a password: say what, not where.
        raise SettingError(
            "--database-url: not a PostgreSQL URL or key=value connection string "
            "(details withheld: the value may hold a password)"
        ) from None
    return value


def database_url(
    env: str = "OUTBOX_DATABASE_URL",
    *,
    required: bool = True,
    help_text: str = "PostgreSQL URL (postgresql://user:pass@host:5432/db) or key=value string.",
) -> Callable[[F], F]:
    return option(
        "--database-url", env=env, required=required, callback=_check_database_url, help=help_text
    )


def lane_option(default: str | None, help_text: str) -> Callable[[F], F]:
    return option(
        "--lane",
        env="OUTBOX_LANE",
        default=default,
        show_default=default is not None,
        help=help_text,
    )


@contextlib.contextmanager
def database_errors() -> Iterator[None]:
    """psycopg's failures (and the stores' ``StoreUnavailable``) as one line each; anything else
    is a bug and keeps its traceback."""
    try:
        yield
    except StoreUnavailable as exc:
        raise Failure(f"cannot use the database (--database-url): {exc}") from None
    except psycopg.errors.UndefinedTable:
        raise Failure("the outbox tables are missing: run `outbox schema apply`") from None
    except psycopg.OperationalError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Failure(f"cannot use the database (--database-url): {first_line}") from None


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's asyncio part, its database failures as one line."""
    with database_errors():
        return asyncio.run(coro)


def connection_pool(dsn: str, *, max_size: int = 2) -> Any:  # noqa: ANN401 - a context manager
    """An autocommit pool for a command (:func:`outbox_adapters.postgres.pools.connection_pool`)."""
    return pools.connection_pool(dsn, max_size=max_size, name="outbox-cli")


# --- sealed-field keys (ADR 0010) -----------------------------------------------------------------

KEYS_OPTION = "--encryption-keys (OUTBOX_ENCRYPTION_KEYS) / --encryption-keys-file"


def encryption_keys(*, required: bool = False) -> Callable[[F], F]:
    """``--encryption-keys`` and ``--encryption-keys-file``: the sealed-field keys (ADR 0010)."""

    def decorate(command: F) -> F:
        command = option(
            "--encryption-keys-file",
            env="OUTBOX_ENCRYPTION_KEYS_FILE",
            type=click.Path(exists=True, dir_okay=False),
            help="File holding the key list (kid:base64key, one per line or comma-separated).",
        )(command)
        return option(
            "--encryption-keys",
            env="OUTBOX_ENCRYPTION_KEYS",
            metavar="KID:BASE64KEY,...",
            help="Keys for sealed payload fields; the first one seals, all open."
            " Prefer the environment variable or the file: a command line is visible to others."
            + (" Required (or the file)." if required else ""),
        )(command)

    return decorate


def encryptor_from(keys: str | None, keys_file: str | None) -> Encryptor | None:
    """The encryptor the options describe; ``None`` when neither is given."""
    if keys is None and keys_file is None:
        return None
    if keys is not None and keys_file is not None:
        raise SettingError(f"{KEYS_OPTION}: give the key list once, not both")
    try:
        from outbox_adapters.crypto import AesGcmEncryptor  # noqa: PLC0415 - the crypto extra
    except ImportError:
        raise Failure(
            "sealed fields need the crypto extra: pip install 'leased-outbox[crypto]'"
        ) from None
    try:
        if keys_file is not None:
            return AesGcmEncryptor.from_file(keys_file)
        return AesGcmEncryptor.from_key_list(keys or "", source="the key list")
    except ConfigurationError as exc:
        # The messages name key ids and positions, never key material.
        raise SettingError(f"{KEYS_OPTION}: {exc}") from None


def describe_keys(encryptor: Encryptor | None) -> str:
    """One start-up line: which key seals, which others open (ids only)."""
    if encryptor is None:
        return "sealed fields: off (no encryption keys)"
    others = sorted(encryptor.key_ids - {encryptor.active_key_id})
    return f"sealed fields: key {encryptor.active_key_id!r} seals" + (
        f", also opening {', '.join(map(repr, others))}" if others else ""
    )


def describe_secrets(encryptor: Encryptor | None) -> str:
    """How new webhook signing secrets are stored with these keys (ADR 0030; ids only)."""
    if encryptor is None:
        return "webhook secrets: stored in plaintext (no encryption keys)"
    return f"webhook secrets: sealed under key id {encryptor.active_key_id!r} (AES-256-GCM)"


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM/SIGINT ask the worker to stop: no new claim, the rows in flight finish."""
    loop = asyncio.get_running_loop()
    installed = []

    def on_signal(name: str) -> None:
        click.echo(f"{name}: stopping (finishing the row in flight, releasing the rest)", err=True)
        stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        # Not on Windows, and not outside the main thread: then Ctrl-C is a KeyboardInterrupt.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig.name)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
