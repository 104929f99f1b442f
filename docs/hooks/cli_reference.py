"""The CLI and settings references of the site, generated from the ``outbox`` click commands.

docs/reference/cli.md and docs/reference/settings.md hold an introduction and a marker each
(:data:`CLI_MARKER`, :data:`SETTINGS_MARKER`); at build time this hook (mkdocs.yml ``hooks:``)
replaces the marker with the reference rendered from the command tree itself: every command and
subcommand (``outbox`` loads them lazily, cli/__init__.py: they are loaded here through the
group's own ``list_commands`` / ``get_command``), its usage, its help, and a table of its options
with click's own help records (the same text ``--help`` prints). The settings page lists every
option with its ``OUTBOX_*`` environment variable and its key in the ``--config`` TOML file, as
cli/config.py reads them (the table is the command's path, the key the parameter's name with
``-`` for ``_``; a top-level key is shared by every command that has the setting).

Nothing is copied by hand, so a new command or option is in the reference on the next build;
tests/unit/test_cli_reference.py checks that the rendering names every one of them.

docs/deployment.md's table of each lane's database connections is generated the same way, from
the lane descriptions ``outbox worker --lane NAME`` runs (:data:`LANES_MARKER`).

- ``python -m docs.hooks.cli_reference cli`` (or ``settings``, ``lanes``) prints the generated
  Markdown.
"""

from __future__ import annotations

import html
import importlib
import inspect
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Final

import click
from attrs import frozen

__all__ = [
    "CLI_MARKER",
    "LANES_MARKER",
    "SETTINGS_MARKER",
    "Entry",
    "config_key",
    "envvars",
    "load_failures",
    "on_page_markdown",
    "render_cli",
    "render_lanes",
    "render_settings",
    "settable",
    "walk",
]

CLI_MARKER: Final = (
    "<!-- cli-reference (generated from the click commands by docs/hooks/cli_reference.py) -->"
)
LANES_MARKER: Final = "<!-- lane-connections (generated from the lane descriptions by docs/hooks/cli_reference.py) -->"
SETTINGS_MARKER: Final = (
    "<!-- settings-reference (generated from the click commands by docs/hooks/cli_reference.py) -->"
)

#: click's help record ends with its extras: ``help  [env var: X; default: Y; 1<=x<=9]``.
_EXTRA: Final = re.compile(r"(?:^|\s\s)\[([^\[\]]*)\]$")
#: A code span, in Markdown's single or reStructuredText's double backticks.
_CODE: Final = re.compile(r"(``.+?``|`[^`]+`)")


@frozen
class Entry:
    """One command of the tree: its words after ``outbox`` (``()`` for ``outbox`` itself)."""

    path: tuple[str, ...]
    command: click.Command
    ctx: click.Context

    @property
    def name(self) -> str:
        return " ".join(("outbox", *self.path))

    @property
    def anchor(self) -> str:
        return "-".join(("outbox", *self.path))


def _main() -> click.Group:
    from outbox_adapters.cli import main  # noqa: PLC0415 - click and the package, at build time

    return main


def load_failures() -> list[str]:
    """The command modules that do not import here (an extra missing), each as one line; the
    reference is refused rather than built without them."""
    from outbox_adapters.cli import COMMANDS, SUBCOMMANDS  # noqa: PLC0415
    from outbox_adapters.extras import MissingExtra, missing_extra  # noqa: PLC0415

    entries = [
        *COMMANDS.items(),
        *((f"{g} {s}", e) for g, sub in SUBCOMMANDS.items() for s, e in sub.items()),
    ]
    failures = []
    for name, (module, _attribute, _help) in entries:
        try:
            importlib.import_module(f"outbox_adapters.cli.{module}")
        except ImportError as exc:
            found = missing_extra(exc, f"`outbox {name}`")
            failures.append(
                str(found) if isinstance(found, MissingExtra) else f"`outbox {name}`: {exc}"
            )
    return failures


def walk(group: click.Group | None = None) -> Iterator[Entry]:
    """``outbox`` and every command below it, depth first, in the groups' listing order."""
    root = _main() if group is None else group
    ctx = click.Context(root, info_name="outbox")

    def visit(command: click.Command, path: tuple[str, ...], ctx: click.Context) -> Iterator[Entry]:
        yield Entry(path, command, ctx)
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    yield from visit(
                        sub, (*path, name), click.Context(sub, info_name=name, parent=ctx)
                    )

    yield from visit(root, (), ctx)


# --- Markdown -------------------------------------------------------------------------------------


def _text(text: str) -> str:
    """Help text as Markdown: code spans kept, everything else escaped (``<topic>``, ``OUTBOX_*``,
    ``a_b`` are shown as typed)."""
    parts = _CODE.split(text)
    return "".join(
        f"`{part.strip('`')}`"
        if part.startswith("`")
        else re.sub(r"([\\*_\[\]])", r"\\\1", html.escape(part, quote=False))
        for part in parts
    )


def _cell(text: str) -> str:
    return _text(" ".join(text.split())).replace("|", "\\|")


def _code(text: str) -> str:
    """A code span for a table cell (Python-Markdown's tables split no cell inside one)."""
    return f"`{text}`"


def _help(command: click.Command) -> str:
    """The command's help, paragraph by paragraph (click's ``\\b`` no-rewrap markers dropped)."""
    text = command.help or command.short_help or ""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", inspect.cleandoc(text))]
    out = []
    for paragraph in paragraphs:
        lines = [line for line in paragraph.splitlines() if line.strip() != "\b"]
        if not lines:
            continue
        if any(line.startswith("    ") for line in lines) or paragraph.endswith("::"):
            out.append("\n".join(lines))  # an indented block (a usage example): kept as it is
            continue
        out.append(_text(" ".join(line.strip() for line in lines)))
    return "\n\n".join(out).replace("::\n", ":\n")


def envvars(param: click.Parameter) -> list[str]:
    """The environment variables a parameter reads (click takes one name or several)."""
    found = param.envvar
    if found is None:
        return []
    return [found] if isinstance(found, str) else list(found)


def _options(entry: Entry) -> list[click.Option]:
    return [p for p in entry.command.params if isinstance(p, click.Option) and not p.hidden]


def _arguments(entry: Entry) -> list[click.Argument]:
    return [p for p in entry.command.params if isinstance(p, click.Argument)]


def _record(param: click.Option, ctx: click.Context) -> tuple[str, str, str]:
    """click's help record split: the option as ``--help`` shows it, its help, its default and
    other extras (range, required) without the environment variable (a column of its own)."""
    record = param.get_help_record(ctx)
    shown, text = record if record is not None else (", ".join(param.opts), "")
    default, others = "", []
    found = _EXTRA.search(text)
    if found:
        text = text[: found.start()]
        for item in found.group(1).split("; "):
            if item.startswith("env var:"):
                continue
            if item.startswith("default:"):
                default = item.removeprefix("default:").strip()
            else:
                others.append(item)
    if others:
        text = f"{text} ({'; '.join(others)})"
    return shown, text, default


def _usage(entry: Entry) -> str:
    pieces = entry.command.collect_usage_pieces(entry.ctx)
    return " ".join((entry.name, *pieces))


def render_cli(entries: Sequence[Entry] | None = None) -> str:
    """The CLI reference: per command its usage, its help, its arguments and options."""
    entries = list(walk()) if entries is None else list(entries)
    out: list[str] = []
    summary = ["| command | what it does |", "| --- | --- |"]
    summary += [
        f"| [`{e.name}`](#{e.anchor}) | {_cell(e.command.get_short_help_str(limit=200))} |"
        for e in entries
        if e.path
    ]
    out.append("\n".join(summary))
    for entry in entries:
        out.append(f"## {entry.name} {{#{entry.anchor}}}")
        out.append(f"```text\n{_usage(entry)}\n```")
        if entry.command.help or entry.command.short_help:
            out.append(_help(entry.command))
        if isinstance(entry.command, click.Group):
            subs = [
                e
                for e in entries
                if len(e.path) == len(entry.path) + 1 and e.path[:-1] == entry.path
            ]
            out.append(
                "Commands: " + ", ".join(f"[`{e.path[-1]}`](#{e.anchor})" for e in subs) + "."
            )
        arguments = _arguments(entry)
        if arguments:
            out.append(
                "Arguments: "
                + ", ".join(
                    f"`{a.make_metavar(entry.ctx)}`" + (" (required)" if a.required else "")
                    for a in arguments
                )
                + "."
            )
        options = _options(entry)
        if options:
            rows = [
                "| option | environment variable | default | description |",
                "| --- | --- | --- | --- |",
            ]
            for option in options:
                shown, text, default = _record(option, entry.ctx)
                env = ", ".join(_code(v) for v in envvars(option))
                rows.append(
                    f"| {_code(shown)} | {env} | {_code(default) if default else ''} | {_cell(text)} |"
                )
            out.append("\n".join(rows))
    return "\n\n".join(out) + "\n"


def config_key(entry: Entry, param: click.Parameter) -> str | None:
    """Where ``--config FILE`` sets ``param`` (cli/config.py): ``[worker] smtp-url``; ``None``
    for a parameter the file can't set (not passed to the command: ``--app``, ``--config``,
    ``--version``)."""
    if not param.name or not param.expose_value:
        return None
    key = param.name.replace("_", "-")
    if not entry.path:
        return f"top level: {key}"
    return f"[{'.'.join(entry.path)}] {key}"


def settable(entry: Entry) -> list[click.Option]:
    """The options of ``entry`` that are settings: read from a variable or the config file
    (``--version`` is neither)."""
    return [o for o in _options(entry) if envvars(o) or config_key(entry, o) is not None]


def render_settings(entries: Sequence[Entry] | None = None) -> str:
    """The settings reference: every command's options with their environment variable and
    config-file key; then every environment variable and the options it sets."""
    entries = list(walk()) if entries is None else list(entries)
    out: list[str] = []
    by_env: dict[str, list[str]] = {}
    for entry in entries:
        if not settable(entry) or (isinstance(entry.command, click.Group) and entry.path):
            continue
        out.append(f"## {entry.name} {{#settings-{entry.anchor}}}")
        rows = [
            "| option | environment variable | config file | default |",
            "| --- | --- | --- | --- |",
        ]
        for option in settable(entry):
            _shown, _help_text, default = _record(option, entry.ctx)
            flags = " / ".join((*option.opts, *option.secondary_opts))
            key = config_key(entry, option)
            env = envvars(option)
            for name in env:
                by_env.setdefault(name, []).append(f"`{entry.name} {option.opts[0]}`")
            rows.append(
                f"| {_code(flags)} | {', '.join(_code(v) for v in env)} |"
                f" {_code(key) if key else 'not in the file'} | {_code(default) if default else ''} |"
            )
        out.append("\n".join(rows))
    index = ["| environment variable | sets |", "| --- | --- |"]
    index += [f"| `{name}` | {', '.join(uses)} |" for name, uses in sorted(by_env.items())]
    out.append("## Every environment variable {#every-environment-variable}")
    out.append("\n".join(index))
    return "\n\n".join(out) + "\n"


def render_lanes() -> str:
    """The connections each lane's worker process opens, from the lane descriptions ``outbox
    worker --lane NAME`` runs without ``--app`` (cli/lane_flags.py): its pool's size, the LISTEN
    connection of ``--listen``, and whether it holds the leader lease."""
    from outbox_adapters.app import EmailLane  # noqa: PLC0415 - the package, at build time
    from outbox_adapters.cli.lane_flags import BUILTIN_LANES, builtin_lane  # noqa: PLC0415

    rows = [
        "| `--lane` | description | pool (connections at most) | with `--listen` | leader lease |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in ("email", *BUILTIN_LANES):
        lane = builtin_lane(name)
        pool = str(lane.pool_size())
        if isinstance(lane, EmailLane):
            shown = "`email` (any e-mail lane)"
            base = EmailLane(lane.name, rows_in_flight=2).pool_size() - 2
            if all(EmailLane(lane.name, rows_in_flight=n).pool_size() == base + n for n in (1, 8)):
                pool = f"{base} + `--rows-in-flight` ({pool} by default)"
        else:
            shown = f"`{name}`"
        listen = "+ 1" if lane.wakeup_lane is not None else "none"
        leader = "yes (`--no-leader` turns it off)" if "leader" in lane.options else "no"
        rows.append(f"| {shown} | `{type(lane).__name__}` | {pool} | {listen} | {leader} |")
    return "\n".join(rows) + "\n"


# --- the MkDocs hook ------------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, **_kwargs: Any) -> str:  # noqa: ANN401 - MkDocs'
    """Put the generated reference in place of its marker; refuse a build that can't load every
    command (the reference would leave some out)."""
    wanted = {CLI_MARKER: render_cli, SETTINGS_MARKER: render_settings, LANES_MARKER: render_lanes}
    found = [marker for marker in wanted if marker in markdown]
    if not found:
        return markdown
    from mkdocs.exceptions import PluginError  # noqa: PLC0415 - only when MkDocs runs the hook

    failures = load_failures()
    if failures:
        raise PluginError(
            f"{page.file.src_path}: the CLI reference needs every command loadable (install the"
            f" package with its extras, e.g. pip install -e '.[all]' --group docs): {'; '.join(failures)}"
        )
    for marker in found:
        markdown = markdown.replace(marker, wanted[marker]())
    return markdown


def main(argv: list[str] | None = None) -> int:
    which = (argv if argv is not None else sys.argv[1:]) or ["cli"]
    render = {"cli": render_cli, "settings": render_settings, "lanes": render_lanes}.get(which[0])
    if render is None:
        print("usage: python -m docs.hooks.cli_reference [cli|settings|lanes]", file=sys.stderr)
        return 2
    print(render(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
