"""mkdocs hooks of the documentation site (mkdocs.yml): the command reference is
complete.

`agent`'s top-level group loads most command families only when one is run
(agent.cli.common.AgentGroup's `lazy`), and mkdocs-click lists a group's loaded commands
only, so before the pages are rendered every group is asked for each command it lists:
the reference then shows every command, from the click objects themselves.
"""

from __future__ import annotations

from typing import Any

import click


def _load_all(group: click.Group, ctx: click.Context) -> None:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            _load_all(command, click.Context(command, info_name=name, parent=ctx))


def on_config(config: Any, **kwargs: Any) -> Any:
    from agent.cli.app import cli

    _load_all(cli, click.Context(cli, info_name="agent"))
    return config
