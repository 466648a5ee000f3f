"""`agent skills list|show`: the skills the agent can load (the vault's, then built-ins)."""

from __future__ import annotations

import click

from agent.cli.common import AgentGroup, get_vault, json_option, page, vault_option


@click.group(cls=AgentGroup)
@vault_option
def skills():
    """Skills (skills/<name>/SKILL.md): instructions the agent loads for a task."""


@skills.command("list")
@json_option("One JSON object per skill (JSON Lines).")
@vault_option
def skills_list(as_json):
    """List the skills: name, where from, whether usable here, description."""
    from agent.stores import skills as store

    vault = get_vault()
    found = store.discover(vault.root)
    if as_json:
        from agent.cli.output import records

        records({"name": s.name, "from": s.where, "problem": s.problem,
                 "missing": [] if s.problem else s.missing(), "description": s.description}
                for s in found)
        return
    if not found:
        click.echo("No skills. Add one: skills/<name>/SKILL.md (frontmatter name and "
                   "description; the body is the instructions).")
        return
    rows = []
    for s in found:
        if s.problem:
            state = "broken"
        else:
            missing = s.missing()
            state = "yes" if not missing else f"no: needs {', '.join(missing)}"
        rows.append([s.name, s.where, state, s.problem or s.description or "(no description)"])
    head = ["NAME", "FROM", "USABLE", "DESCRIPTION"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(3)]
    for r in [head, *rows]:
        click.echo("  ".join([*(c.ljust(w) for c, w in zip(r[:3], widths)), r[3]]).rstrip())


@skills.command("show")
@click.argument("name")
@vault_option
def skills_show(name):
    """Print a skill's SKILL.md (through the pager on a terminal)."""
    import sys

    from agent.errors import UserError, did_you_mean
    from agent.stores import skills as store

    vault = get_vault()
    found = store.discover(vault.root)
    skill = next((s for s in found if s.name == name), None)
    if skill is None:
        names = [s.name for s in found]
        raise UserError(f"No skill named {name!r}.{did_you_mean(name, names, cutoff=0.6)} "
                        f"Skills: {', '.join(names) or 'none'}.")
    if skill.problem:
        raise UserError(skill.problem)
    where = (skill.path.relative_to(vault.root).as_posix() if skill.where == "vault"
             else f"built-in {skill.path.parent.name}/SKILL.md")
    click.echo(click.style(f"# {where}", dim=True), err=True)
    page(skill.text().rstrip("\n"), use_pager=sys.stdout.isatty())


COMMANDS = [skills]
