"""`agent --help` and `agent COMMAND --help`: every command family listed with its own
description, each command's whole description shown."""

from __future__ import annotations

from conftest import agent_proc


def test_help_shows_each_commands_whole_description():
    p = agent_proc("--help")
    assert p.returncode == 0
    listing = p.stdout.split("Commands:")[1]
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
                "models")
    commands = {c.name: c for f in families
                for c in importlib.import_module(f"agent.cli.{f}").COMMANDS}
    assert set(LAZY) == set(commands)
    for name, (module, attribute, text) in LAZY.items():
        assert getattr(importlib.import_module(module), attribute) is commands[name]
        assert text == commands[name].get_short_help_str(limit=1000), name
    listing = " ".join(agent_proc("--help").stdout.split())
    for name, (_, _, text) in LAZY.items():
        assert f"{name} {text}" in listing
