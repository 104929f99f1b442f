"""The site's CLI and settings references (docs/hooks/cli_reference.py) name every command, argument,
option and environment variable the ``outbox`` command has, and the config-file keys they show are
the ones ``--config FILE`` accepts; docs/deployment.md's connection table is each lane's own. The
command tree is walked here with click's own API, not the generator's, so a command or option the
generator drops fails a test."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import click
import pytest
from docs.hooks import cli_reference

from outbox_adapters.cli import COMMANDS, SUBCOMMANDS, main
from outbox_adapters.cli.config import default_map
from outbox_adapters.cli.lane_flags import BUILTIN_LANES, builtin_lane
from outbox_adapters.cli.options import SettingError

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _tree(
    command: click.Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            yield from _tree(sub, (*path, name))


TREE = dict(_tree(main))


def _section(page: str, anchor: str) -> str:
    """The text of the section whose heading carries ``{#anchor}``, up to the next heading."""
    _head, found, rest = page.partition(f" {{#{anchor}}}\n")
    assert found, f"no section #{anchor}"
    return rest.split("\n## ", 1)[0]


def _flags(section: str) -> set[str]:
    """The flags the first column of a section's option table names."""
    cells = [
        re.split(r"(?<!\\)\|", line)[1] for line in section.splitlines() if line.startswith("| `-")
    ]
    return {flag for cell in cells for flag in re.findall(r"(?<![\w-])--?[\w][\w-]*", cell)}


def _envvars(param: click.Parameter) -> list[str]:
    found = param.envvar
    return [] if found is None else [found] if isinstance(found, str) else list(found)


@pytest.fixture(scope="module")
def cli_page() -> str:
    assert cli_reference.load_failures() == []
    return cli_reference.render_cli()


@pytest.fixture(scope="module")
def settings_page() -> str:
    return cli_reference.render_settings()


def test_every_command_of_the_cli_is_walked() -> None:
    walked = {entry.path for entry in cli_reference.walk()}
    listed = {(name,) for name in COMMANDS} | {
        (group, sub) for group, subs in SUBCOMMANDS.items() for sub in subs
    }
    assert listed <= walked
    assert walked == set(TREE)
    assert {("worker",), ("schema", "apply"), ("feed", "prune"), ("enqueue", "webhook")} <= walked


def test_the_cli_reference_has_a_section_for_every_command_with_its_usage_and_help(
    cli_page: str,
) -> None:
    for path, command in TREE.items():
        name = " ".join(("outbox", *path))
        section = _section(cli_page, "-".join(("outbox", *path)))
        assert section.startswith(f"\n```text\n{name} "), name
        first_line = (command.help or command.short_help or "").strip().splitlines()[0]
        words = re.findall(r"[A-Za-z]{4,}", first_line)
        assert all(word in section for word in words), (name, first_line)
        if path:
            assert f"[`{name}`](#{'-'.join(('outbox', *path))})" in cli_page


def test_the_cli_reference_names_every_option_argument_and_variable_of_each_command(
    cli_page: str,
) -> None:
    checked = 0
    for path, command in TREE.items():
        section = _section(cli_page, "-".join(("outbox", *path)))
        for param in command.params:
            if isinstance(param, click.Argument):
                assert param.make_metavar(click.Context(command)) in section, (path, param.name)
                continue
            assert isinstance(param, click.Option)
            for flag in (*param.opts, *param.secondary_opts):
                assert flag in _flags(section), (path, flag)
            for name in _envvars(param):
                assert f"`{name}`" in section, (path, name)
            checked += 1
    assert checked > 150  # every command's options, not a handful


def test_the_settings_reference_gives_every_setting_its_variable_and_config_key(
    settings_page: str,
) -> None:
    for path, command in TREE.items():
        if isinstance(command, click.Group) and path:
            continue
        options = [p for p in command.params if isinstance(p, click.Option)]
        settings = [o for o in options if _envvars(o) or o.expose_value]
        if not settings:
            continue
        section = _section(settings_page, "settings-" + "-".join(("outbox", *path)))
        table = f"[{'.'.join(path)}]" if path else "top level:"
        for option in settings:
            row = next(
                (
                    line
                    for line in section.splitlines()
                    if re.match(rf"\| `{re.escape(option.opts[0])}[ `]", line)
                ),
                None,
            )
            assert row is not None, (path, option.opts[0])
            for name in _envvars(option):
                assert f"`{name}`" in row, (path, name)
            if option.expose_value:
                assert f"`{table} {option.name.replace('_', '-')}`" in row, (path, option.name)
            else:
                assert "not in the file" in row
    index = _section(settings_page, "every-environment-variable")
    every = {name for command in TREE.values() for p in command.params for name in _envvars(p)}
    assert set(re.findall(r"^\| `(\w+)`", index, re.MULTILINE)) == every


def test_the_config_keys_the_reference_shows_are_the_ones_the_file_accepts(
    tmp_path: Path, settings_page: str
) -> None:
    tables: dict[str, list[str]] = {}
    for table, key in re.findall(r"`\[([\w.-]+)\] ([\w-]+)`", settings_page):
        tables.setdefault(table, []).append(key)
    assert {"worker", "schema.apply", "feed.prune"} <= tables.keys()
    top = re.findall(r"`top level: ([\w-]+)`", settings_page)
    lines = [f'{key} = "x"' for key in top]
    for table, keys in tables.items():
        lines += [f"[{table}]", *(f'{key} = "x"' for key in keys)]
    config = tmp_path / "outbox.toml"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    found = default_map(str(config), main)
    assert found["worker"]["allow"] == "x"  # --allow-destination's key is its parameter's name
    config.write_text('[worker]\nallow-destination = "10.0.0.0/8"\n', encoding="utf-8")
    with pytest.raises(SettingError, match="allow-destination"):
        default_map(str(config), main)


def test_a_command_or_option_the_generator_leaves_out_is_found(cli_page: str) -> None:
    """The checks above catch a reference that lost a command or an option."""
    entries = list(cli_reference.walk())
    without_worker = cli_reference.render_cli([e for e in entries if e.path != ("worker",)])
    with pytest.raises(AssertionError, match="no section #outbox-worker"):
        _section(without_worker, "outbox-worker")
    flag = "--rows-in-flight"
    assert f"`{flag} N`" in _section(cli_page, "outbox-worker")
    dropped = cli_reference.render_cli(entries).replace(f"`{flag} N`", "`N`")
    assert flag not in _flags(_section(dropped, "outbox-worker"))
    assert "--group-marks" in _flags(_section(dropped, "outbox-worker"))


def test_a_new_command_and_option_are_in_the_next_rendering() -> None:
    @click.group()
    def tool() -> None:
        """A tool."""

    @tool.command("brand-new")
    @click.option("--fresh-flag", envvar="OUTBOX_FRESH_FLAG", default=3, show_default=True)
    def brand_new(fresh_flag: int) -> None:
        """Something nobody documented by hand."""

    entries = list(cli_reference.walk(tool))
    page = cli_reference.render_cli(entries)
    section = _section(page, "outbox-brand-new")
    assert "`--fresh-flag INTEGER`" in section
    assert "`OUTBOX_FRESH_FLAG`" in section
    assert "`3`" in section
    assert "Something nobody documented by hand." in section
    settings = cli_reference.render_settings(entries)
    assert "`[brand-new] fresh-flag`" in settings


def test_help_text_is_escaped_for_markdown_but_code_spans_are_kept() -> None:
    text = cli_reference._text("parks on <topic>.dlq; OUTBOX_* and ``outbox_wakeup``")
    assert text == r"parks on &lt;topic&gt;.dlq; OUTBOX\_\* and `outbox_wakeup`"


def test_the_pages_hold_the_markers_the_hook_replaces() -> None:
    cli = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    settings = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")
    assert cli.count(cli_reference.CLI_MARKER) == 1
    assert settings.count(cli_reference.SETTINGS_MARKER) == 1
    hooks = (DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8")
    assert "docs/hooks/cli_reference.py" in hooks


def test_the_deployment_page_s_connection_table_is_each_lane_s_own() -> None:
    table = cli_reference.render_lanes()
    for name in BUILTIN_LANES:
        lane = builtin_lane(name)
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"| {lane.pool_size()} |" in row, row
        assert ("| + 1 |" in row) == (lane.wakeup_lane is not None), row
    assert "| `email` (any e-mail lane) | `EmailLane` | 3 + `--rows-in-flight`" in table
    page = (DOCS / "deployment.md").read_text(encoding="utf-8")
    assert page.count(cli_reference.LANES_MARKER) == 1


def test_the_hook_puts_each_generated_part_in_place_of_its_marker() -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_path="reference/cli.md"))
    text = f"# CLI\n\n{cli_reference.CLI_MARKER}\n\n{cli_reference.LANES_MARKER}\n"
    out = cli_reference.on_page_markdown(text, page=page)
    assert cli_reference.CLI_MARKER not in out
    assert cli_reference.LANES_MARKER not in out
    assert "## outbox worker {#outbox-worker}" in out
    assert "| `events` | `RelayLane` |" in out
    assert cli_reference.on_page_markdown("# no marker\n", page=page) == "# no marker\n"
