"""`agent --help` and `agent COMMAND --help`: every command family listed with its own
description, each command's whole description shown."""

from __future__ import annotations

from conftest import agent_proc


def test_help_shows_each_commands_whole_description():
    p = agent_proc("--help")
    assert p.returncode == 0
    listing = p.stdout.split("Talk with the agent:")[1]
    assert "..." not in listing
    flat = " ".join(listing.split())
    assert ("Scheduled jobs (cron.json): a message the agent runs at a time, every interval, "
            "or on a cron expression.") in flat
    for name in ("sessions", "doctor", "config", "edit", "skills"):
        assert f"\n  {name} " in listing, name


def test_help_lists_every_command_family_with_its_own_description():
    """`agent --help` lists the commands of other modules without importing them, from
    descriptions kept in agent/cli/app.py: they must be the commands' own."""
    import importlib

    from agent.cli.app import LAZY

    families = ("search", "chat", "sessions", "dream", "schedule", "config", "doctor", "skills",
                "agents", "sync", "mcp", "why", "review", "forget", "timetravel", "web",
                "models", "keys", "stats", "remote")
    commands = {c.name: c for f in families
                for c in importlib.import_module(f"agent.cli.{f}").COMMANDS}
    assert set(LAZY) == set(commands)
    for name, (module, attribute, text) in LAZY.items():
        assert getattr(importlib.import_module(module), attribute) is commands[name]
        assert text == commands[name].get_short_help_str(limit=1000), name
    listing = " ".join(agent_proc("--help").stdout.split())
    for name, (_, _, text) in LAZY.items():
        assert f"{name} {text}" in listing


def test_help_lists_commands_by_topic_with_none_left_out():
    p = agent_proc("--help")
    assert p.returncode == 0
    out = p.stdout
    for title in ("Talk with the agent:", "Memory:", "Schedules and reach:",
                  "The vault and its settings:"):
        assert f"\n{title}\n" in out, title
    # chat comes before note, which comes before init: a newcomer's order, not the alphabet
    assert out.index("\n  chat ") < out.index("\n  note ") < out.index("\n  init ")
    from agent.cli.app import cli
    import click

    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")
              and not line.startswith("   ") and not line.strip().startswith("-")}
    ctx = click.Context(cli)
    assert set(cli.list_commands(ctx)) <= listed


def _parses(words: list[str]) -> None:
    """Parse an example's words down the command tree, as the CLI would before running."""
    import click

    from agent.cli.app import cli

    import warnings

    cmd: click.Command = cli
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # protected_args, until click 9
        ctx = cli.make_context("agent", list(words), resilient_parsing=False)
        while isinstance(cmd, click.Group) and ctx.protected_args + ctx.args:
            rest = ctx.protected_args + ctx.args
            name, cmd, args = cmd.resolve_command(ctx, rest)
            ctx = cmd.make_context(name, args, parent=ctx)


def test_every_example_in_a_commands_help_parses():
    import shlex

    import click

    from agent.cli.topics import EXAMPLES

    from agent.cli.app import cli

    commands = set(cli.list_commands(click.Context(cli)))
    for name, lines in EXAMPLES.items():
        if name not in commands:         # a command still to come (agent stats) has none
            continue
        for line in lines:
            words = shlex.split(line, comments=True)
            if words[0] != "agent":        # `claude mcp add ... -- agent mcp`, `cd "$(agent path)"`
                continue
            try:
                _parses(words[1:])
            except click.BadParameter as e:
                if "does not exist" not in str(e):     # an example's file need not exist here
                    raise AssertionError(f"{line!r}: {e}") from e
            except Exception as e:  # noqa: BLE001 - report which example is wrong, whatever click raised
                raise AssertionError(f"{line!r}: {e}") from e


def test_a_commands_help_ends_with_examples():
    p = agent_proc("note", "--help")
    assert "Examples:" in p.stdout
    assert '$ agent note "Dentist moved to Thursday 10:30"' in p.stdout
