"""The `agent` command: wires the vault, the stores and the commands together.

Commands that need no model must start fast: nothing here imports the Anthropic SDK,
and command families import their heavy modules inside the command functions.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agent.stores import memory
from agent.cli.common import (AgentGroup, after_change, get_vault, json_option, page, read_stdin,
                              report_recovery, vault_option, vault_path, warn_if_identity_guessed)
from agent.errors import UserError
from agent.clock import now
from agent.ops.vaults import init_vault
from agent.vault.repo import Vault
from agent.vault import gitcmd


@click.group(cls=AgentGroup, context_settings={"help_option_names": ["-h", "--help"]})
@vault_option
@click.version_option(package_name="agent")
@click.pass_context
def cli(ctx):
    """A personal AI agent whose whole mind is a Git repository of plain files."""
    import os

    if os.environ.get("NO_COLOR"):      # https://no-color.org: every echo strips styles
        ctx.color = False


# ---- the vault ----------------------------------------------------------------------


@cli.command()
@click.argument("path", required=False, type=click.Path(path_type=Path))
@vault_option
def init(path):
    """Make a new vault (or adopt a folder of notes) from the template."""
    target = path.expanduser().absolute() if path else vault_path()[0]
    vault, what = init_vault(target)
    if what == "exists":
        click.echo(f"{target} is already a vault; nothing changed.")
    elif what == "adopted":
        click.echo(f"Adopted {target} as a vault: {vault.head()[:7]} init")
    else:
        click.echo(f"Created a new vault at {target}")
    if what != "exists":
        warn_if_identity_guessed(vault)


@cli.command("path")
@vault_option
def path_cmd():
    """Print the path of the vault commands work on."""
    click.echo(str(vault_path()[0]))


@cli.command()
@click.argument("text", nargs=-1)
@vault_option
def note(text):
    """Append a timestamped bullet to today's daily note."""
    body = " ".join(text)
    if not body and not sys.stdin.isatty():
        body = read_stdin("note")
    if not body.strip():
        raise click.ClickException('Nothing to note: give the text, as in agent note "call the dentist"')
    vault = get_vault()
    from agent import redact
    from agent.ops import notes

    try:
        noted = notes.note(vault, body, now())
    finally:
        report_recovery(vault)
    after_change(vault, index=False)
    click.echo(f"{noted.rel}: {noted.line}  ({noted.sha[:7]})")
    if noted.kept:
        click.echo(redact.summary(noted.kept))


@cli.command()
@json_option("One JSON object, for scripts.")
@vault_option
def status(as_json):
    """Show the vault, its HEAD, hand edits, counts and the dream cursor."""
    from agent.ops.status import status as gather

    s = gather(get_vault())
    if as_json:
        from agent.cli.output import report

        t = s.tracking
        report({"vault": s.root, "head": s.head, "hand_edits": s.dirty,
                "hand_edits_blocked_by": s.blocked or s.broken,
                "left_out": s.held_back, "sessions": s.sessions, "messages": s.messages,
                "archive_entries": s.archive_entries, "newest_archive": s.newest_archive,
                "facts": s.facts, "sync_conflicts": s.conflicts,
                "dream_cursor": s.dream_cursor, "dream_waiting": s.dream_waiting,
                "sync": ({"ref": t.ref, "ahead": t.ahead, "behind": t.behind, "last": t.last,
                          "host": t.host} if t else None),
                "held": s.held, "warnings": s.warnings,
                "in_progress": ({"change": s.writing.change, "files": len(s.writing.files),
                                 "running": s.writing.running} if s.writing else None)})
        return
    _render_status(s)


def _render_status(s) -> None:
    click.echo(f"vault:      {s.root}")
    click.echo(f"HEAD:       {s.head_line}")
    w = s.writing
    if w is not None:
        files = f"{len(w.files):,} file{'s' * (len(w.files) != 1)}"
        click.echo(f"in progress: {w.change} ({files} written so far; committed as that "
                   f"when it ends)" if w.running else
                   f"interrupted: {w.change} ({files} written; the next command commits "
                   f"them as that change)")
    edits = s.edits
    if edits:
        click.echo(f"hand edits: {len(edits)} uncommitted ({', '.join(edits[:5])}"
                   f"{', ...' if len(edits) > 5 else ''}); "
                   + ("not committed until the problem below is fixed" if s.blocked
                      else "cron.json is not committed until the problem below is fixed"
                      + (", the rest before the agent's next change" if len(edits) > 1 else "")
                      if s.broken else "committed before the agent's next change"))
    else:
        click.echo("hand edits: none")
    left = [p for p in s.dirty if p in s.held_back]
    if left:
        click.echo(f"left out:   {len(left)} file{'s' * (len(left) != 1)} no commit takes "
                   f"({'; '.join(f'{p}: {s.held_back[p]}' for p in left[:3])}"
                   f"{'; ...' if len(left) > 3 else ''})")
    click.echo(f"sessions:   {s.sessions} ({s.messages} message{'s' * (s.messages != 1)})")
    n = s.archive_entries
    click.echo(f"archive:    {n} entr{'y' if n == 1 else 'ies'}")
    n = s.facts[memory.MEMORY]
    click.echo(f"memory:     {n} fact{'s' * (n != 1)} in MEMORY.md, {s.facts[memory.USER]} in USER.md")
    for name, clashes in s.conflicts.items():
        if clashes:
            click.echo(f"            {name}: {clashes} sync conflict{'s' * (clashes != 1)} "
                       f"(both versions kept; the next dream settles them, or edit the file)")
    click.echo(f"dream:      cursor {s.dream_cursor}, newest archive {s.newest_archive} "
               f"({s.dream_waiting} waiting)")
    t = s.tracking
    if t:
        when = f", last sync {t.last[:16].replace('T', ' ')}" if t.last else ", never synced"
        click.echo(f"sync:       {t.ahead} ahead, {t.behind} behind {t.ref}{when}")
        click.echo(f"host:       {t.host} (this machine: it runs the cron jobs and "
                   f"heartbeats marked with it)")
    if s.held:
        n = len(s.held)
        click.echo(f"held:       {n} incoming change{'s' * (n != 1)} not taken "
                   f"({', '.join(s.held[:4])}{', ...' if n > 4 else ''}): see `agent sync held`")
    for w in ([s.blocked or s.broken] if s.blocked or s.broken else []) + s.warnings:
        click.echo(f"Warning: {w}", err=True)


@cli.command()
@click.argument("paths", nargs=-1)
@click.option("-n", "--max-count", type=int, help="Show at most N commits.")
@click.option("--since", help="Only commits after this date (e.g. 2026-11-01, '2 weeks ago').")
@click.option("--oneline", is_flag=True, help="One line per commit, no diffs.")
@click.option("--no-pager", is_flag=True, help="Print straight to the terminal, not through less.")
@json_option("One JSON object per commit (JSON Lines): its lines added and removed.")
@vault_option
def log(paths, max_count, since, oneline, no_pager, as_json):
    """Show how memory files changed, newest first (default MEMORY.md and USER.md).

    On a terminal the diffs are coloured and paged through $PAGER (default less, with
    LESS=FRX as git does: it quits when the output fits on one screen).
    """
    from agent.vault import history

    vault = get_vault()
    targets = [vault.rel(p) for p in paths] or [memory.MEMORY, memory.USER]
    if since is not None and gitcmd.date_stamp(vault, since, now().timestamp()) is None:
        raise UserError(f"--since {since!r}: not a date git understands; use e.g. "
                        f"2026-11-01, yesterday, '2 weeks ago', 'last monday'.")
    from agent.cli.output import records, use_color

    if as_json:
        records(history.file_log_records(vault, targets, max_count=max_count, since=since))
        return

    tty = sys.stdout.isatty()
    out = history.file_log(vault, targets, max_count=max_count, since=since, oneline=oneline,
                           color=use_color())
    # Bytes a person's editor wrote that are not UTF-8 show as U+FFFD, never a crash.
    out = out.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    text = out.rstrip("\n") if out else "No changes to " + ", ".join(targets) + " yet."
    page(text, use_pager=tty and not no_pager and bool(out))


@cli.command()
@click.argument("file", required=False)
@click.option("--new", "new", is_flag=True, help="Make FILE if it does not exist yet.")
@vault_option
def edit(file, new):
    """Open $VISUAL or $EDITOR on MEMORY.md (or FILE) and commit the change as yours.

    FILE is a file of the vault: found relative to the current folder when that is
    inside the vault, else relative to the vault's top (so agent.toml is found from
    any folder of the vault). A name that is not there is refused with the closest
    names, unless --new asks for a new file. agent.toml and cron.json are checked when
    the editor exits; a broken one is left uncommitted, with the problem named.
    """
    import os

    vault = get_vault()
    rel = _edit_target(vault, file, new)
    if rel.split("/")[0] in (".git", ".agent"):
        raise UserError(f"{rel} is the agent's or git's own state; it is not edited by hand.")
    path = vault.root / rel
    if path.is_dir():
        raise UserError(f"{rel} is a folder; give a file in it.")
    from agent.cli.config import identity_despite_problems

    identity_despite_problems(vault)     # so that a broken agent.toml can be repaired here
    # (and a broken cron.json: it blocks the lock, so it is repaired before taking it)
    if not (rel == "cron.json" and vault.lock.broken_hand_edit(vault.dirty_paths())):
        with vault.locked():             # earlier hand edits go in first, on their own
            report_recovery(vault)
    from agent.fs import safe
    before = safe.read_bytes(vault.root, rel, limit=safe.COMMIT_BYTES)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    try:
        click.edit(filename=str(path), editor=editor, require_save=False)
    except click.ClickException as e:
        raise UserError(f"The editor failed ({e.message}); set $VISUAL or $EDITOR. "
                        f"{rel} is as the editor left it.") from None
    after = safe.read_bytes(vault.root, rel, limit=safe.COMMIT_BYTES)
    if after == before:
        click.echo(f"{rel} unchanged; nothing committed.")
        return
    problem = _edit_problem(vault, rel)
    if problem:
        raise UserError(f"{problem}. Your edit is kept but not committed: run agent edit {rel} "
                        f"again to fix it.")
    with vault.locked():                 # commits the change as the person's hand edit
        report_recovery(vault)
    after_change(vault)
    from agent.vault import history

    line = history.file_log(vault, [rel], max_count=1, oneline=True).strip()
    click.echo(f"Committed your edit: {line}")


def _edit_target(vault: Vault, file: str | None, new: bool = False) -> str:
    """The vault path `agent edit FILE` opens: FILE relative to the current folder when
    that is in the vault and FILE is there, else relative to the vault's top; a name
    found in neither is refused with the closest names, unless `new` (then it is made
    where the current folder says, as an editor would)."""
    if not file:
        return memory.MEMORY
    p = Path(file).expanduser()
    tried = []
    if p.is_absolute():
        tried.append(vault.rel(p))
    else:
        try:
            here = Path.cwd().absolute() / p
            here.relative_to(vault.root)
            tried.append(vault.rel(here))
        except ValueError:
            pass                         # the current folder is outside the vault
        tried.append(vault.rel(p))
    for rel in tried:
        if (vault.root / rel).exists():
            return rel
    if new:
        return tried[0]
    from agent.cli.suggest import closest

    near = closest(tried[-1], vault.files())
    hint = f" Did you mean {' or '.join(near)}?" if near else ""
    raise UserError(f"There is no {tried[0]} in the vault {vault.root}.{hint} "
                    f"To make a new file: agent edit --new {file}")


def _edit_problem(vault: Vault, rel: str) -> str | None:
    """What is wrong with a control file after a hand edit, or None."""
    if rel == "agent.toml":
        from agent import config as cfg
        try:
            data, _ = cfg.read_data(vault.root)
        except cfg.SettingsError as e:
            return str(e)
        found = cfg.problems(data)
        return f"{rel}: {found[0]}" if found else None
    if rel == "cron.json":
        from agent.stores import cronfile
        try:
            cronfile.read(vault.root)
        except UserError as e:
            return str(e)
    return None


@cli.command()
@click.argument("sha", required=False)
@vault_option
def undo(sha):
    """Revert the newest agent commit (or the one named) with a new commit."""
    from agent.ops.undo import undo as undo_change

    vault = get_vault()
    try:
        done = undo_change(vault, sha)
    finally:
        report_recovery(vault)
    after_change(vault, index=False)      # (the operation brought the index up to date)
    c = done.commit
    if done.sha is None:
        click.echo(f"Nothing to undo: {c.short} ({c.subject}) changes nothing any more.")
    else:
        click.echo(f"Reverted {c.short} ({c.subject}) in {done.sha[:7]}")


@cli.command("git", context_settings={"ignore_unknown_options": True,
                                      "allow_interspersed_args": False})
@vault_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def git_cmd(args):
    """Run any git command in the vault, as in: agent git log --stat"""
    vault = get_vault()
    sys.exit(gitcmd.passthrough(vault, *args))


@cli.command("import")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["chatgpt", "claude", "jsonl"]),
              help="The export's format, when telling it by content is not wanted.")
@click.option("--embed/--no-embed", default=True, show_default=True,
              help="Make the new messages' vectors for meaning-search now, with a progress "
                   "bar (Ctrl-C keeps what was made); --no-embed leaves them to agent serve "
                   "or agent index embed.")
@vault_option
def import_cmd(path, fmt, embed):
    """Import ChatGPT's or Claude's export (a folder, .zip or file) or a JSONL transcript.

    Each conversation becomes a session import/chatgpt-ID or import/claude-UUID, with
    its title and times; importing again adds only what is new. With the embed extra,
    the new messages are then embedded, so search finds them by meaning at once.
    """
    if fmt == "jsonl" or (fmt is None and path.is_file() and path.suffix == ".jsonl"):
        _import_jsonl(path)
        if embed:
            _embed_imported()
        return
    _import_export(path, fmt)
    if embed:
        _embed_imported()


def _embed_imported() -> None:
    """The vectors of what the import added (and anything else waiting), now."""
    from agent.cli.search import embed_waiting

    embed_waiting(get_vault())


def _import_export(path: Path, fmt: str | None) -> None:
    import shlex

    from agent.ops.imports import import_path

    vault = get_vault()
    with _import_progress() as shown, _stop_on_interrupt() as asked:
        done = import_path(vault, path, now=now(), fmt=fmt, on_progress=shown, stop=asked)
    report_recovery(vault)
    for s in done.skipped:
        click.echo(f"Skipped {s.where}: {s.why}.", err=True)
    if done.cut:
        click.echo(f"{done.cut:,} message{'s' * (done.cut != 1)} over 1,000,000 characters "
                   f"{'were' if done.cut != 1 else 'was'} kept up to there, with a line "
                   f"saying how much more the export holds.", err=True)
    if done.stopped:
        if done.added:
            after_change(vault)
        again = f"agent import {shlex.quote(str(path))}"
        if done.added:
            click.echo(f"Stopped: {done.added:,} message{'s' * (done.added != 1)} in "
                       f"{done.sessions:,} conversation{'s' * (done.sessions != 1)} are in, "
                       f"committed. Run the same command again to finish: {again}", err=True)
        else:
            click.echo(f"Stopped before anything was imported. Run the same command again "
                       f"to import it: {again}", err=True)
        sys.exit(130)
    if done.added:
        after_change(vault)
        click.echo(f"Imported {done.added:,} message{'s' * (done.added != 1)} in "
                   f"{done.sessions:,} conversation{'s' * (done.sessions != 1)} "
                   f"({done.new_sessions:,} new) from {path.name}, in {len(done.commits)} "
                   f"commit{'s' * (len(done.commits) != 1)}.")
        click.echo("They wait to be archived for the dream: agent archive --all (or agent "
                   "serve, in the background), then agent dream.")
    elif done.conversations:
        click.echo(f"Nothing new: all {done.conversations:,} conversations "
                   f"({done.messages:,} messages) of {path.name} are already in the vault.")
    if done.memories is not None:
        click.echo(f"Claude's memories are archive entry {done.memories}: agent dream turns "
                   f"them into proposals for agent review.")
    if not done.added and done.memories is None and not done.conversations:
        click.echo(f"Nothing to import from {path.name}.")


def _stop_on_interrupt():
    """Ctrl-C during an import asks it to stop between two conversations (it commits
    what it wrote and says how to finish); a second Ctrl-C interrupts at once. A
    callback saying whether a stop was asked."""
    import contextlib
    import signal
    import threading

    @contextlib.contextmanager
    def asking():
        asked = threading.Event()
        if threading.current_thread() is not threading.main_thread():
            yield asked.is_set
            return

        def on_interrupt(signum, frame):
            if asked.is_set():
                raise KeyboardInterrupt
            asked.set()
            click.echo("\nStopping after the conversation being written (Ctrl-C again "
                       "to stop at once)...", err=True)
        before = signal.signal(signal.SIGINT, on_interrupt)
        try:
            yield asked.is_set
        finally:
            signal.signal(signal.SIGINT, before)
    return asking()


def _import_progress():
    """A progress bar on a terminal (stderr), nothing otherwise: a callback for the import."""
    import contextlib

    @contextlib.contextmanager
    def bar():
        if not sys.stderr.isatty():
            yield None
            return
        state: dict = {}

        def shown(p):
            if "bar" not in state:
                state["bar"] = click.progressbar(length=p.total, label="Importing",
                                                 file=sys.stderr, show_pos=True)
                state["bar"].__enter__()
            state["bar"].update(p.done - state["bar"].pos)
        try:
            yield shown
        finally:
            if "bar" in state:
                state["bar"].__exit__(None, None, None)
    return bar()


def _import_jsonl(file: Path):
    from agent.chat.importer import import_file
    from agent.stores import transcripts

    vault = get_vault()
    # Read through the store's bounded, regular-files-only reader (never /dev/zero).
    if not transcripts.parse_import(file):
        click.echo(f"Nothing to import: {file.name} is empty.")
        return
    added, keys, sha = import_file(vault, file)
    report_recovery(vault)
    if not added:
        click.echo(f"Nothing to import: every message of {file.name} is already in the vault.")
        return
    after_change(vault)
    click.echo(f"Imported {added} message{'s' * (added != 1)} into {keys} "
               f"session{'s' * (keys != 1)} ({(sha or '')[:7]})")


@cli.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_cmd(shell):
    """Print the shell completion script for bash, zsh or fish (eval it at start-up)."""
    from click.shell_completion import get_completion_class

    comp = get_completion_class(shell)(cli, {}, "agent", "_AGENT_COMPLETE")
    click.echo(comp.source())


# ---- the other command families -------------------------------------------------------
# Imported when named (see AgentGroup): name -> (module, attribute, one-line description).

LAZY = {
    "search": ("agent.cli.search", "search_cmd",
               "Search everything the vault remembers: messages, facts, daily notes, archive."),
    "index": ("agent.cli.search", "index_group",
              "Inspect or rebuild the search index (.agent/index.sqlite, derived from the files)."),
    "chat": ("agent.cli.chat", "chat",
             "Talk with the agent (a conversation, or one message with -m)."),
    "archive": ("agent.cli.sessions", "archive_cmd",
                "Archive conversations now, so the dream sees recent talk."),
    "sessions": ("agent.cli.sessions", "sessions_cmd",
                 "List the conversations: messages, first and last time, the last line."),
    "dream": ("agent.cli.dream", "dream",
              "Consolidate new archive entries into MEMORY.md and USER.md, and commit."),
    "cron": ("agent.cli.schedule", "cron",
             "Scheduled jobs (cron.json): a message the agent runs at a time, every interval, "
             "or on a cron expression."),
    "heartbeat": ("agent.cli.schedule", "heartbeat",
                  "Heartbeats (heartbeat/*.md): prompts the agent runs every interval inside "
                  "active hours."),
    "serve": ("agent.cli.schedule", "serve",
              "Run cron jobs, heartbeats, the nightly dream and idle compaction until stopped."),
    "config": ("agent.cli.config", "config",
               "Check, show and change the settings of agent.toml (keeping its comments)."),
    "doctor": ("agent.cli.doctor", "doctor",
               "Check the API key, models, git, the sandbox, the index and the vault's files."),
    "models": ("agent.cli.models", "models_cmd",
               "List the configured models, their providers, and which answers chat and dream."),
    "keys": ("agent.cli.keys", "keys_group",
             "Show where each key agent.toml sends may go on this machine (approve, revoke)."),
    "skills": ("agent.cli.skills", "skills",
               "Skills (skills/<name>/SKILL.md): instructions the agent loads for a task."),
    "agents": ("agent.cli.agents", "agents",
               "List sub-agent runs (running, done, failed, interrupted) and their parent turns."),
    "sync": ("agent.cli.sync", "sync_cmd",
             "Fetch, merge and push the vault through its git remote, losing nothing."),
    "clone": ("agent.cli.sync", "clone_cmd",
              "Make a vault on this machine from a remote (a path, ssh or https URL)."),
    "remote": ("agent.cli.remote", "remote_group",
               "The vault's remotes, and the devices an encrypted one is readable by."),
    "key": ("agent.cli.remote", "key_cmd",
            "Print this machine's public key (made on first use), for `agent remote trust`."),
    "mcp": ("agent.cli.mcp", "mcp_group",
            "Serve the vault as memory to MCP clients (Claude Code, Claude Desktop) over stdio."),
    "review": ("agent.cli.review", "review",
               "List the dream's proposals and accept, reject or edit them."),
    "web": ("agent.cli.web", "web_cmd",
            "Open the agent's web page: chat, memory and its history, review, search."),
    "why": ("agent.cli.why", "why_cmd",
            "Tell where the line of MEMORY.md or USER.md that best matches TEXT came from."),
    "stats": ("agent.cli.stats", "stats_cmd",
              "Show memory health: facts, the dream's proposals and their fate, tokens and cost."),
    "forget": ("agent.cli.forget", "forget_cmd",
               "Remove a phrase from every file and commit, here and on every clone."),
    "show": ("agent.cli.timetravel", "show_cmd",
             "Print a vault file as it was at a date or commit (--as-of WHEN)."),
    "restore": ("agent.cli.timetravel", "restore_cmd",
                "Bring back a removed line of MEMORY.md or USER.md holding TEXT, as one commit."),
}
cli.lazy.update(LAZY)


def main():
    bad = not_text(sys.argv[1:])
    if bad is not None:
        click.echo(f"Error: {bad}", err=True)
        sys.exit(2)                     # as click does for any other bad usage
    cli(prog_name="agent")


def not_text(args: list[str]) -> str | None:
    """What is wrong with the first argument that is not UTF-8 text, in one line, or
    None. Python hands such bytes on as lone surrogates (PEP 383), which no file of the
    vault can hold: caught here, before a command writes half of something."""
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as e:
            raw = arg.encode("utf-8", "surrogateescape")
            shown = raw.decode("utf-8", "backslashreplace")
            byte = ord(arg[e.start]) & 0xFF
            return (f"the argument '{shown}' is not UTF-8 text (byte 0x{byte:02x}): "
                    f"type it in a UTF-8 terminal, or set LANG to a UTF-8 locale.")
    return None


if __name__ == "__main__":
    main()
