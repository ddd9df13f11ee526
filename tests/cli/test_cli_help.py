"""Every option of every command says what it does in ``--help``, and sizes read the same everywhere."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from speechpack.cli import main

pytestmark = pytest.mark.fast


def _commands(group: click.Group, ctx: click.Context, prefix: tuple[str, ...] = ()):
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from _commands(command, click.Context(command, parent=ctx, info_name=name), prefix + (name,))


def test_every_option_of_every_command_has_help():
    ctx = click.Context(main, info_name="speechpack")
    missing = [f"speechpack {' '.join(path)} {param.opts[0]}" for path, command in _commands(main, ctx)
               for param in command.params if isinstance(param, click.Option) and not (param.help or "").strip()]
    assert missing == []


def test_peek_and_plan_explain_seed_and_state():
    for command in ("peek", "plan"):
        shown = CliRunner().invoke(main, [command, "--help"], terminal_width=200).output
        assert "The loader state the config is read for" in shown
        assert "The loader's seed" in shown


def test_import_muvap_shows_the_shard_size_as_every_build_does():
    runner = CliRunner()
    muvap = runner.invoke(main, ["import", "muvap", "--help"], terminal_width=200).output
    build = runner.invoke(main, ["build", "wesep", "--help"], terminal_width=200).output
    assert "[default: 1.00 GB]" in muvap and "[default: 1.00 GB]" in build
    assert "1GB]" not in muvap
