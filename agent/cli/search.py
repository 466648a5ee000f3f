"""Commands of the search family: `agent search` and `agent index status|rebuild`."""

from __future__ import annotations

import contextlib
import json
import sys
import time

import click

from agent.oneline import shorten
from agent.cli.common import AgentGroup, get_vault, json_option, vault_option
from agent.ops.search import bound as _bound
from agent.ops.search import parse_day
from agent.ops.search import when as _when
from agent.ops.search import where as _where
from agent.ops.search import who as _who


KINDS = ("sessions", "memory", "notes", "archive")    # agent.search.index.KINDS, imported late
MODES = ("auto", "words", "dense", "hybrid")          # agent.search.index.MODES


@contextlib.contextmanager
def _progress(index):
    """A progress bar while many documents are embedded, on a terminal only."""
    state: dict = {}

    def progress(done, total):
        if total < 200:
            return
        if "bar" not in state:
            state["bar"] = click.progressbar(length=total, label="Embedding documents",
                                             file=sys.stderr)
            state["bar"].__enter__()
        state["bar"].update(done - state["bar"].pos)

    from agent.search import query      # where the search that embeds reads it

    query.PROGRESS = progress if sys.stderr.isatty() else None
    try:
        yield
    finally:
        query.PROGRESS = None
        if "bar" in state:
            state["bar"].__exit__(None, None, None)


def _short(text: str, width: int = 160) -> str:
    return shorten(text, width, placeholder="…")


@click.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option("-n", "--limit", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Show at most N hits.")
@json_option("One JSON object per hit, for scripts (with why it is there and its context).")
@click.option("--since", metavar="WHEN",
              help="Only hits dated on or after WHEN: a date (2025-03-01) or what `agent log "
                   "--since` takes ('2 weeks ago', yesterday); undated facts are left out.")
@click.option("--until", metavar="WHEN", help="Only hits dated on or before WHEN (same forms; "
                                             "a day means up to its end, a time that second).")
@click.option("--in", "kinds", type=click.Choice(KINDS), multiple=True,
              help="Only search these (repeatable): sessions, memory (MEMORY.md and USER.md), "
                   "notes (daily notes), archive.")
@click.option("--mode", type=click.Choice(MODES), default="auto", show_default=True,
              help="words (full text), dense (the embedding model), hybrid (both), auto "
                   "(hybrid when the embed extra is installed).")
@click.option("--as-of", "as_of", metavar="WHEN", help="Search what the agent knew at WHEN (a "
              "date, or a commit): the messages up to then and the memory files as they were.")
@vault_option
def search_cmd(query, limit, as_json, since, until, kinds, mode, as_of):
    """Search everything the vault remembers: messages, facts, daily notes, archive.

    QUERY is plain words; quotes, AND/OR/NOT and other punctuation are taken as text.
    Start it with -- if it begins with a dash: agent search -- -foo. A message that
    holds none of the query's words is shown as context under the hit it sits next to;
    a hit found by meaning alone (the embed extra) is marked so.
    """
    from agent.search import index

    text = " ".join(query)
    vault = get_vault()
    first, last = parse_day(vault, since, "--since"), parse_day(vault, until, "--until")
    if as_of:                                       # issue 26: the vault as it was then
        from agent.ops import timetravel
        hits, then = timetravel.search_as_of(vault, text, as_of, limit, since=first,
                                             until=last, kinds=set(kinds) if kinds else None)
        click.echo(f"as of {then}", err=True)
    else:
        with _progress(index):
            hits = index.search(vault, text, limit, since=first, until=last,
                                kinds=set(kinds) if kinds else None, mode=mode)
    if index.LAST.get("problem"):
        click.echo(index.LAST["problem"], err=True)
    for problem in index.LAST.get("damaged", ()):     # what the search could not read whole
        click.echo(problem, err=True)
    if not hits:
        where = f" in {', '.join(kinds)}" if kinds else ""
        when = (f" since {_bound(first)}" if first else "") + (f" until {_bound(last)}" if last else "")
        click.echo(f"No matches for {text!r}{where}{when}.", err=as_json)
        sys.exit(1)                     # as grep: a search that finds nothing fails
    for hit in hits:
        if as_json:
            click.echo(json.dumps(hit.to_json(), ensure_ascii=False))
            continue
        head = "  ".join(x for x in (_where(hit), _when(hit.ts), _who(hit)) if x)
        if hit.why == "meaning":
            head = click.style(head, bold=True) + "  " + click.style(
                "[close in meaning, no query word]", fg="yellow")
        else:
            head = click.style(head, bold=True)  # click drops the style when not a terminal
        click.echo(head)
        click.echo(f"    {hit.snippet}")
        for c in hit.context:
            who = f"{c.speaker}: " if c.speaker else ""
            click.echo(click.style(f"      context {_where(c)}  {who}", dim=True) + _short(c.text))


@click.group("index", cls=AgentGroup)
def index_group():
    """Inspect or rebuild the search index (.agent/index.sqlite, derived from the files)."""


@index_group.command("status")
@json_option("One JSON object, for scripts.")
@vault_option
def status_cmd(as_json):
    """Show what the index holds and how far behind the vault it is."""
    import dataclasses

    from agent.search import index

    vault = get_vault()
    st = index.status(vault)
    if as_json:
        from agent.cli.output import report

        report({k: str(v) if k == "path" else v for k, v in dataclasses.asdict(st).items()})
        return
    if not st.exists:
        click.echo(f"No index yet at {st.path}: the next `agent search` builds it "
                   f"(or run `agent index rebuild`).")
        click.echo(f"search:     {st.mode}")
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
    click.echo(f"search:     {st.mode}")
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
    with _progress(index):
        stats = index.rebuild(vault)
    dense = stats.dense
    how = "words and meaning" if dense is not None and dense.embedder is not None else "words alone"
    click.echo(f"Indexed {stats.docs} documents from {stats.files} files in "
               f"{time.perf_counter() - t0:.1f}s ({index.db_path(vault)}; {how})")
    if dense is not None and dense.problem:
        click.echo(dense.problem, err=True)


@index_group.command("embed")
@vault_option
def embed_cmd():
    """Make every vector still waiting (after an import), with a progress bar."""
    from agent.search import index

    vault = get_vault()
    index.refresh(vault)
    embed_waiting(vault, quiet_if_none=False)


def embed_waiting(vault, *, quiet_if_none: bool = True) -> None:
    """Make every vector that waits, with a progress bar on a terminal, and say so.

    Ctrl-C keeps what was made (the index commits per batch of documents) and says how
    many still wait and what makes them: the next `agent index embed`, `agent import`
    or `agent serve` goes on from there. `quiet_if_none`: nothing is printed when no
    vector waits or search runs on words alone (an import of a plain install)."""
    from agent.search import index

    waiting = index.vectors_waiting(vault)
    if quiet_if_none and not waiting:
        return
    t0 = time.perf_counter()
    try:
        with _progress(index):
            dense = index.vectors_now(vault)
    except KeyboardInterrupt:
        left = index.vectors_waiting(vault)
        click.echo(f"\n[interrupted: {waiting - left:,} of {waiting:,} documents embedded; "
                   f"{left:,} still wait and are found by their words meanwhile: agent index "
                   f"embed (or agent serve) makes them]", err=True)
        sys.exit(130)
    if dense.problem:
        if quiet_if_none:
            click.echo(dense.problem, err=True)
            return
        raise click.ClickException(dense.problem)
    if dense.embedder is None:
        if not quiet_if_none:
            click.echo("Search runs on words alone here (no embedding model): nothing to embed.")
        return
    took = time.perf_counter() - t0
    click.echo(f"Embedded {waiting:,} document{'s' * (waiting != 1)} in {took:.1f}s; "
               f"meaning-search is up to date.")


COMMANDS = [search_cmd, index_group]
