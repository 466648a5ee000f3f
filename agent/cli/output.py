"""How results are rendered for people and for scripts: colour only where wanted
(a terminal, and $NO_COLOR unset, as https://no-color.org asks), and one JSON shape
(`--json`: one object for a report, JSON Lines for a list of records)."""

from __future__ import annotations

import json
import os
import sys

import click


def no_color() -> bool:
    """Whether $NO_COLOR asks for no colour (set and not empty)."""
    return bool(os.environ.get("NO_COLOR"))


def use_color(stream=None) -> bool:
    """Whether to colour what goes to `stream` (default stdout): a terminal without
    $NO_COLOR."""
    stream = stream or sys.stdout
    return not no_color() and stream.isatty()


def report(data: dict) -> None:
    """A report as one JSON object on one line."""
    click.echo(json.dumps(data, ensure_ascii=False, default=str))


def records(rows) -> None:
    """Records as JSON Lines: one object per line."""
    for row in rows:
        click.echo(json.dumps(row, ensure_ascii=False, default=str))


def table(rows: list[list[str]], head: list[str]) -> str:
    """Rows under a header, each column as wide as its widest cell."""
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r).rstrip() for r in [head, *rows])
