"""`agent stats`: memory health per day and in total (agent/ops/stats.py)."""

from __future__ import annotations

import json

import click

from agent.cli.common import get_vault, json_option, vault_option


@click.command("stats")
@click.option("--since", metavar="WHEN", help="Only days on or after WHEN: a date "
              "(2026-11-01) or what `agent log --since` takes ('2 weeks ago', yesterday).")
@json_option("One JSON object, for scripts.")
@vault_option
def stats_cmd(since, as_json):
    """Show memory health: facts, the dream's proposals and their fate, tokens and cost.

    Per day and in total, from the commits' trailers. Costs are estimates from list
    prices (agent.toml's [prices] overrides them); a model without a price shows its
    tokens and "cost unknown".
    """
    from agent.clock import now
    from agent.config import load_settings
    from agent.ops import stats
    from agent.ops.search import parse_day

    vault = get_vault()
    first = parse_day(vault, since, "--since")
    found = stats.stats(vault, load_settings(vault.root), now(), first)
    if as_json:
        click.echo(json.dumps(found.to_json(), ensure_ascii=False, indent=1))
        return
    click.echo(render(found), nl=False)


def render(s) -> str:
    from agent.ops.stats import PARTS, money, rate, unknown_models

    head = (f"{'day':<10} {'facts':>5} {'made':>5} {'acc':>4} {'rej':>4} {'stale':>5} "
            f"{'dup':>4} {'rate':>5} {'tokens in':>10} {'out':>8} {'cache r':>9} "
            f"{'cache w':>8} {'cost':>10}")
    lines = [head]
    for d in [*s.days, s.total]:
        t = {k: sum(d.parts[p].tokens[k] for p in PARTS) for k in d.parts["chat"].tokens}
        cost = money(d.cost) if d.cost is not None else "unknown"
        lines.append(f"{d.day:<10} {d.facts:>5} {d.made:>5} {d.accepted:>4} {d.rejected:>4} "
                     f"{d.stale:>5} {d.dropped:>4} {rate(d.accept_rate):>5} "
                     f"{t['input_tokens']:>10,} {t['output_tokens']:>8,} "
                     f"{t['cache_read_input_tokens']:>9,} {t['cache_creation_input_tokens']:>8,} "
                     f"{cost:>10}")
    lines.append("")
    for p in PARTS:
        part = s.total.parts[p]
        n = part.tokens
        cost = "cost unknown" if part.unknown else money(part.cost)
        lines.append(f"{p:<11} {n['input_tokens']:,} in, {n['output_tokens']:,} out, "
                     f"{n['cache_read_input_tokens']:,} cache read, "
                     f"{n['cache_creation_input_tokens']:,} cache write: {cost}")
    missing = unknown_models(s)
    if missing:
        lines.append(f"No price for {', '.join(missing)}: its cost is unknown (add "
                     f"[prices.\"{missing[0]}\"] with input and output to agent.toml).")
    lines.append("Costs are estimates from list prices; direct edits (landed without "
                 f"review): {s.total.direct}.")
    return "\n".join(lines) + "\n"


COMMANDS = [stats_cmd]
