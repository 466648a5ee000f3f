"""Commands of the search family: `agent search` and `agent index status|rebuild`."""

from __future__ import annotations

import json
import time

import click

from agent.cli.common import AgentGroup, get_vault, vault_option


KINDS = ("sessions", "memory", "notes", "archive")    # agent.search.index.KINDS, imported late


def _when(ts: str | None) -> str:
    if not ts:
        return ""
    return ts[:16].replace("T", " ")


def _where(hit) -> str:
    return f"{hit.path}:{hit.line}" if hit.line else hit.path


def _who(hit) -> str:
    if hit.kind == "sessions":
        return hit.speaker or ""
    if hit.kind == "memory":
        return f"fact ({hit.topic})" if hit.topic else "fact"
    if hit.kind == "archive":
        return f"archive: {hit.topic}" if hit.topic else "archive"
    return "note"


@click.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option("-n", "--limit", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Show at most N hits.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per hit, for scripts.")
@click.option("--since", type=click.DateTime(formats=["%Y-%m-%d"]), metavar="DATE",
              help="Only hits dated on or after DATE (YYYY-MM-DD); undated facts are left out.")
@click.option("--in", "kinds", type=click.Choice(KINDS), multiple=True,
              help="Only search these (repeatable): sessions, memory (MEMORY.md and USER.md), "
                   "notes (daily notes), archive.")
@vault_option
def search_cmd(query, limit, as_json, since, kinds):
    """Search everything the vault remembers: messages, facts, daily notes, archive.

    QUERY is plain words; quotes, AND/OR/NOT and other punctuation are taken as text.
    Start it with -- if it begins with a dash: agent search -- -foo.
    """
    from agent.search import index

    text = " ".join(query)
    vault = get_vault()
    hits = index.search(vault, text, limit, since=since.date() if since else None,
                        kinds=set(kinds) if kinds else None)
    if not hits:
        where = f" in {', '.join(kinds)}" if kinds else ""
        when = f" since {since:%Y-%m-%d}" if since else ""
        click.echo(f"No matches for {text!r}{where}{when}.", err=as_json)
        return
    for hit in hits:
        if as_json:
            click.echo(json.dumps(hit.to_json(), ensure_ascii=False))
            continue
        head = "  ".join(x for x in (_where(hit), _when(hit.ts), _who(hit)) if x)
        click.echo(click.style(head, bold=True))  # click drops the style when not a terminal
        click.echo(f"    {hit.snippet}")


@click.group("index", cls=AgentGroup)
def index_group():
    """Inspect or rebuild the search index (.agent/index.sqlite, derived from the files)."""


@index_group.command("status")
@vault_option
def status_cmd():
    """Show what the index holds and how far behind the vault it is."""
    from agent.search import index

    vault = get_vault()
    st = index.status(vault)
    if not st.exists:
        click.echo(f"No index yet at {st.path}: the next `agent search` builds it "
                   f"(or run `agent index rebuild`).")
        return
    total = sum(st.documents.values())
    parts = ", ".join(f"{k} {st.documents.get(k, 0)}" for k in index.KINDS)
    size = f"{st.size / 1e6:.1f} MB" if st.size >= 1e6 else f"{st.size / 1e3:.0f} kB"
    click.echo(f"index:      {st.path} ({size}, {st.backend})")
    click.echo(f"commit:     {(st.commit or '(none)')[:7]} (HEAD {(st.head or '(none)')[:7]})")
    if st.commits_behind == 0 and not st.files_behind:
        click.echo("staleness:  up to date")
    else:
        behind = "?" if st.commits_behind is None else str(st.commits_behind)
        files = ", ".join(st.files_behind[:5]) + (", ..." if len(st.files_behind) > 5 else "")
        click.echo(f"staleness:  {behind} commit{'s' * (behind != '1')} and "
                   f"{len(st.files_behind)} file{'s' * (len(st.files_behind) != 1)} behind"
                   + (f" ({files})" if files else "") + "; the next search catches up")
    click.echo(f"documents:  {total} ({parts})")
    if st.built:
        click.echo(f"built:      {st.built}")
    for problem in st.problems:
        click.echo(f"skipped:    {problem}")


@index_group.command("rebuild")
@vault_option
def rebuild_cmd():
    """Build the index again from every file of the vault."""
    from agent.search import index

    vault = get_vault()
    t0 = time.perf_counter()
    stats = index.rebuild(vault)
    click.echo(f"Indexed {stats.docs} documents from {stats.files} files in "
               f"{time.perf_counter() - t0:.1f}s ({index.db_path(vault)})")


COMMANDS = [search_cmd, index_group]
