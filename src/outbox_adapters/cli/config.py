"""Configuration from a TOML file (``outbox --config FILE``), and ``outbox config show``.

Every setting of every command comes from, highest first: its flag, its ``OUTBOX_*`` variable, the
TOML file, its default. The file is click's ``default_map``: a table per command (nested for
command groups), keyed by the setting's parameter name, ``-`` or ``_`` alike (``--smtp-url`` →
``smtp-url`` or ``smtp_url``; where the flag and the parameter differ, the parameter's:
``--allow-destination`` → ``allow``; docs/reference/settings.md lists every key); a top-level key
applies to every command that has that setting::

    database-url = "postgresql://outbox@db:5432/app"     # every command

    [worker]
    lane = "email"
    smtp-url = "smtp://relay.internal:587"
    sender = "noreply@example.org"

    [relay]
    broker = "nats://nats.internal:4222"

    [feed.prune]
    older-than = "90d"

The file is checked when it is read: an unknown command or setting is refused naming the file,
the table and the key (exit 2); values go through each option's own checks when the command
runs, with messages that name the option.

``outbox config show`` prints, per command, each setting's effective value and where it came from
(environment, file or default), each value through the library's one redaction
(:func:`outbox_core.redaction.redact_setting`: passwords, keys and tokens in every URL and libpq
form, encryption keys, payload values such as ``--field`` ones masked), then the derived timing of
every lane (per-row budget, batch timeout, claim lease) as the workers would print it at start, and how
webhook signing secrets are stored at rest with the worker's keys (plaintext, or sealed under
which key id).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import click
from click.core import ParameterSource

from outbox_adapters.cli.options import SettingError, describe_secrets, encryptor_from, json_option
from outbox_adapters.cli.worker_settings import email_timing
from outbox_adapters.lanes.channel_workers import ChannelTiming
from outbox_adapters.lanes.email_channel import email_channel_lane
from outbox_adapters.lanes.relay import relay_lane
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_core.redaction import redact_setting

__all__ = ["config_group", "default_map", "load_config"]

_SOURCES: Final = {
    ParameterSource.ENVIRONMENT: "environment",
    ParameterSource.DEFAULT_MAP: "config file",
    ParameterSource.DEFAULT: "default",
    ParameterSource.COMMANDLINE: "command line",
}


def _key(name: str) -> str:
    return name.replace("-", "_")


def _params(command: click.Command) -> set[str]:
    return {p.name for p in command.params if p.name and p.expose_value}


def _commands(group: click.Group) -> dict[str, click.Command]:
    """The group's commands, loaded (``outbox``'s are loaded on demand: cli/__init__.py)."""
    ctx = click.Context(group)
    found = {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}
    return {name: command for name, command in found.items() if command is not None}


def _every_param(group: click.Group) -> set[str]:
    found: set[str] = set()
    for command in _commands(group).values():
        found |= _every_param(command) if isinstance(command, click.Group) else _params(command)
    return found


def _table(
    path: str, where: str, group: click.Group, table: Mapping[str, Any], shared: Mapping[str, Any]
) -> dict[str, Any]:
    """``table`` (the file's section for ``group``) as click's default_map, checked."""
    commands = _commands(group)
    out: dict[str, Any] = {}
    for raw_name, section in table.items():
        if not isinstance(section, Mapping):
            continue  # a shared setting, handled by the caller
        command = commands.get(raw_name)
        if command is None:
            raise SettingError(
                f"{path}: [{where}{raw_name}] is not a command (known: {', '.join(sorted(commands))})"
            )
        if isinstance(command, click.Group):
            out[raw_name] = _table(path, f"{where}{raw_name}.", command, section, shared)
            continue
        known = _params(command)
        settings = {_key(k): v for k, v in section.items()}
        unknown = sorted(set(settings) - known)
        if unknown:
            shown = ", ".join(sorted(n.replace("_", "-") for n in known))
            raise SettingError(
                f"{path}: [{where}{raw_name}] has no setting {unknown[0].replace('_', '-')!r}"
                f" (known: {shown})"
            )
        out[raw_name] = {**{k: v for k, v in shared.items() if k in known}, **settings}
    for name, command in commands.items():  # commands without a section take the shared keys
        if name not in out:
            if isinstance(command, click.Group):
                out[name] = _table(path, f"{where}{name}.", command, {}, shared)
            else:
                out[name] = {k: v for k, v in shared.items() if k in _params(command)}
    return out


def load_config(path: str) -> dict[str, Any]:
    """The TOML file at ``path``, parsed; :class:`SettingError` (exit 2) naming what is wrong."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingError(f"--config {path}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingError(f"--config {path}: not valid TOML ({exc})") from None


def default_map(path: str, main: click.Group) -> dict[str, Any]:
    """click's default_map for ``main`` from the TOML file at ``path``, checked."""
    document = load_config(path)
    shared = {_key(k): v for k, v in document.items() if not isinstance(v, Mapping)}
    own = {k: v for k, v in shared.items() if k in _params(main)}  # e.g. log-level
    unknown = sorted(set(shared) - _every_param(main) - set(own))
    if unknown:
        raise SettingError(
            f"{path}: top-level setting {unknown[0].replace('_', '-')!r} is no command's setting"
        )
    return {**own, **_table(path, "", main, document, shared)}


def _effective(command: click.Command, name: str, parent: click.Context) -> dict[str, Any]:
    ctx = command.make_context(name, [], parent=parent, resilient_parsing=True)
    settings = {}
    for param in command.params:
        if not param.name or not param.expose_value or param.name == "as_json":
            continue
        source = ctx.get_parameter_source(param.name)
        value = ctx.params.get(param.name)
        settings[param.name.replace("_", "-")] = {
            "value": redact_setting(param.name, list(value) if isinstance(value, tuple) else value),
            "from": _SOURCES.get(source, "unset") if source is not None else "unset",
        }
    return settings


def _walk(group: click.Group, ctx: click.Context, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, command in sorted(_commands(group).items()):
        if isinstance(command, click.Group):
            sub = command.make_context(name, [], parent=ctx, resilient_parsing=True)
            out.update(_walk(command, sub, f"{prefix}{name} "))
        elif command.name != "show":
            out[f"{prefix}{name}"] = _effective(command, name, ctx)
    return out


def _worker_timing(settings: Mapping[str, Any]) -> str:
    """``outbox worker``'s e-mail timing from its effective settings, or why they can't work."""
    try:
        timing = email_timing(
            settings["budgets"]["value"],
            settings["batch-size"]["value"],
            settings["batch-timeout"]["value"],
        )
    except click.ClickException as exc:
        return f"REFUSED: {exc.format_message()}"
    return timing.describe()


def _lanes(commands: Mapping[str, Any]) -> dict[str, str]:
    """Each lane kind's derived timing, as its worker prints it at start: ``outbox worker``'s
    from its effective settings, the others' from their defaults."""
    channel = ChannelTiming()
    return {
        "email (outbox worker, effective)": _worker_timing(commands["worker"]),
        "webhooks drainer": drain_lane().timing.describe(),
        "webhook deliveries": delivery_lane().timing.describe(),
        "relay (outbox relay)": relay_lane().timing.describe(),
        "e-mail channel lane (notification-email)": email_channel_lane().timing.describe(),
        "consumer channels": (
            f"event deadline {channel.event_deadline.total_seconds():g}s, retry delay"
            f" {channel.retry_delay.total_seconds():g}s, publish budget"
            f" {channel.publish_budget.total_seconds():g}s"
        ),
    }


def _webhook_secrets(root: click.Context) -> str:
    """How webhook signing secrets are stored at rest with ``outbox worker``'s effective keys
    (ADR 0030): in plaintext, or sealed under the active key id; never a key."""
    assert isinstance(root.command, click.Group)  # noqa: S101 - outbox's main is a group
    worker = root.command.get_command(root, "worker")
    assert worker is not None  # noqa: S101 - outbox always has its worker command
    ctx = worker.make_context("worker", [], parent=root, resilient_parsing=True)
    try:
        encryptor = encryptor_from(
            ctx.params.get("encryption_keys"), ctx.params.get("encryption_keys_file")
        )
    except click.ClickException as exc:
        return f"REFUSED: {exc.format_message()}"
    return describe_secrets(encryptor).removeprefix("webhook secrets: ")


@click.group("config")
def config_group() -> None:
    """The effective configuration (flags aside): environment, --config file, defaults."""


@config_group.command("show")
@json_option
@click.pass_context
def show_command(ctx: click.Context, as_json: bool) -> None:  # noqa: FBT001
    """Every command's settings (secrets masked) and where each came from; each lane's timing."""
    root = ctx.find_root()
    assert isinstance(root.command, click.Group)  # noqa: S101 - outbox's main is a group
    commands = _walk(root.command, root)
    lanes = _lanes(commands)
    secrets = _webhook_secrets(root)
    if as_json:
        document = {"commands": commands, "lanes": lanes, "webhook_secrets": secrets}
        click.echo(json.dumps(document, default=str))
        return
    for name, settings in commands.items():
        click.echo(f"[{name}]")
        for setting, shown in settings.items():
            click.echo(f"  {setting:<24} {shown['value']!s:<40} ({shown['from']})")
    click.echo("lane timing:")
    for lane, text in lanes.items():
        click.echo(f"  {lane}: {text}")
    click.echo(f"webhook secrets at rest (outbox worker's keys): {secrets}")
