"""Commands of the chat family: `agent chat` and `agent archive`.

Nothing here imports the Anthropic SDK, the loop or the tools at module level: they are
imported inside the commands, so `agent --help` and the other commands stay fast.
"""

from __future__ import annotations

import sys

import click

from agent.errors import UserError, did_you_mean
from agent.stores import sessions
from agent.cli.common import (after_change, get_vault, name_vault, quiet_logs, read_stdin,
                              report_recovery, vault_option)
from agent.vault import history

DEFAULT_SESSION = "cli/default"
HISTORY_FILE = "chat_history"
HISTORY_LENGTH = 2000

HELP = """\
/new     archive this conversation and start a fresh one
/undo    revert the last turn (its transcript lines and the memory it changed)
/memory  show MEMORY.md and USER.md
/help    this list
/quit    leave (also Ctrl-D, or Ctrl-C at the prompt)
Ctrl-C while a reply is being written stops it; what was said is kept."""


class _Printer:
    """Streams reply text to stdout and tool calls, dimmed, to stderr."""

    def __init__(self):
        self.any = False
        self.newline = True
        self.tools_shown = sys.stderr.isatty()

    def text(self, chunk: str) -> None:
        sys.stdout.write(chunk)
        sys.stdout.flush()
        self.any = True
        self.newline = chunk.endswith("\n")

    def tool(self, name: str, data) -> None:
        if not self.tools_shown:
            return
        if self.any and not self.newline:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.newline = True
        click.echo(click.style(f"  [{name}]", dim=True), err=True)

    def end(self) -> None:
        if self.any and not self.newline:
            sys.stdout.write("\n")
            sys.stdout.flush()
        self.any, self.newline = False, True


def _turn(vault, provider, session: str, text: str, model: str | None):
    from agent.chat.turn import run_turn

    quiet_logs()
    from agent.vault.repo import now

    printer = _Printer()
    try:
        result = run_turn(vault, provider, session, text, now(), model=model,
                          on_text=printer.text, on_tool=printer.tool)
    finally:
        printer.end()
    report_recovery(vault)
    if result.sha:
        name_vault(vault)
    if result.interrupted:
        click.echo(click.style("[interrupted: your message and the partial reply are saved]",
                               dim=True), err=True)
    if result.error:
        click.echo(f"Error: {result.error}", err=True)
        if result.sha:
            click.echo(f"Your message is saved ({result.sha[:7]}).", err=True)
    for note in result.notes:
        click.echo(note, err=True)
    if result.compacted:
        click.echo(click.style(f"[older messages archived as entry {result.compacted}]",
                               dim=True), err=True)
    return result


LAST_SESSION = "last_session"       # in .agent/: the session `agent chat -c` resumes


def last_session(vault) -> str | None:
    """The session `agent chat` used last (else the one with the newest message)."""
    try:
        key = (vault.state / LAST_SESSION).read_text(encoding="utf-8").strip()
        return sessions.check_key(key)
    except (OSError, UserError):
        pass
    from agent.search import index
    found = index.session_summaries(vault)
    return found[0].key if found else None


def _remember_session(vault, key: str) -> None:
    try:
        vault.state.mkdir(exist_ok=True)
        (vault.state / LAST_SESSION).write_text(key + "\n", encoding="utf-8")
    except OSError:
        pass


def session_exists(vault, key: str) -> bool:
    return bool(sessions.Session(vault.root, key).files())


def unknown_session(vault, key: str) -> str:
    """The message for a session key the vault has no transcript of."""
    known = sessions.list_sessions(vault.root)
    return (f"No session {key} in {vault.root}.{did_you_mean(key, known)} "
            f"`agent sessions` lists them.")


@click.command()
@click.option("-m", "--message", metavar="TEXT",
              help="Send one message, print the reply and exit (text piped on stdin works too).")
@click.option("--session", metavar="KEY",
              help=f"The conversation: CHANNEL/CHAT (default {DEFAULT_SESSION}).")
@click.option("-c", "--continue", "continue_", is_flag=True,
              help="Resume the conversation used last.")
@click.option("--new", "new", is_flag=True,
              help="Start the --session conversation if it does not exist yet, without asking.")
@click.option("--model", metavar="NAME", help="The model (default: [model] name in agent.toml).")
@vault_option
def chat(message, session, continue_, new, model):
    """Talk with the agent (a conversation, or one message with -m)."""
    from agent.llm import make_provider
    from agent.llm.preload import preload

    preload()     # the SDK loads while the vault is read, the prompt built, the person types
    if continue_ and session:
        raise click.UsageError("Give --session KEY or --continue, not both.")
    vault = get_vault()
    vault.check_committable()       # before a model call whose turn could not be saved
    if continue_:
        session = last_session(vault)
        if session is None:
            raise UserError("Nothing to continue: no conversation yet. Start one with agent chat.")
        click.echo(click.style(f"[continuing {session}]", dim=True), err=True)
    elif session is None:
        session = DEFAULT_SESSION
    else:
        sessions.check_key(session)
    if message is None and not sys.stdin.isatty():
        message = read_stdin("message")
    if session != DEFAULT_SESSION and not new and not session_exists(vault, session):
        close = did_you_mean(session, sessions.list_sessions(vault.root))
        if message is not None:
            if close:     # most likely a typo: refuse rather than start a stray session
                raise UserError(f"No session {session} in {vault.root}.{close} "
                                f"Add --new to start {session}.")
            click.echo(click.style(f"[new session {session}]", dim=True), err=True)
        elif not click.confirm(f"No session {session} yet.{close} Start it?", default=not close,
                               err=True):
            raise SystemExit(1)
    if message is not None and not message.strip():
        raise click.UsageError('Nothing to send: give the message, as in agent chat -m "hello"')
    _remember_session(vault, session)
    if message is not None:
        # The key is checked now; the SDK client is made at the first model call, so the
        # prompt is built while the SDK loads in the background.
        provider = make_provider()
        try:
            result = _turn(vault, provider, session, message, model)
        except KeyboardInterrupt:         # before the turn started: nothing was sent or saved
            click.echo("[cancelled]", err=True)
            sys.exit(130)
        wait_for_runs()
        if result.interrupted:
            sys.exit(130)
        if result.error:
            sys.exit(1)
        return
    _repl(vault, make_provider(), session, model)


def wait_for_runs() -> None:
    """Before leaving: let sub-agents still running in the background end (and commit);
    Ctrl-C stops them, and they save what they did, marked interrupted."""
    from agent.chat import subagents

    running = subagents.running_here()
    if not running:
        return
    click.echo(click.style(f"[waiting for {len(running)} sub-agent"
                           f"{'s' * (len(running) != 1)} still running in the background: "
                           f"{', '.join(r.id for r in running)}; Ctrl-C stops them]", dim=True),
               err=True)
    try:
        subagents.wait_background()
    except KeyboardInterrupt:
        subagents.cancel_all()
        subagents.settle([r.id for r in running])
        click.echo(click.style("[sub-agents stopped; what they did is saved]", dim=True), err=True)


# ---- the conversation in the terminal ---------------------------------------------------


def _readline(vault):
    """Line editing and a history kept in .agent/chat_history; returns a saver."""
    try:
        import readline
    except ImportError:           # not every Python has it; input() still works
        return lambda: None
    path = vault.state / HISTORY_FILE
    vault.state.mkdir(exist_ok=True)
    try:
        readline.read_history_file(path)
    except (FileNotFoundError, OSError):
        pass
    readline.set_history_length(HISTORY_LENGTH)

    def save():
        try:
            readline.write_history_file(path)
        except OSError:
            pass
    return save


def _repl(vault, provider, session: str, model: str | None) -> None:
    from agent.config import load_settings

    save_history = _readline(vault)
    settings = load_settings(vault.root)
    click.echo(click.style(f"agent chat - session {session}, model {model or settings.model}. "
                           f"/help for commands, Ctrl-D to leave.", dim=True))
    from agent.sandbox import startup_note
    note = startup_note(settings)
    if note:
        click.echo(click.style(note, dim=True), err=True)
    try:
        while True:
            try:
                line = input("> ")
            except (EOFError, KeyboardInterrupt):
                click.echo()
                return
            text = line.strip()
            if not text:
                continue
            try:
                if text.startswith("/"):
                    if _slash(vault, provider, session, text) == "quit":
                        return
                    continue
                _turn(vault, provider, session, line, model)
            except KeyboardInterrupt:
                # Outside the model call (which saves what it had): nothing was changed.
                click.echo(click.style("[cancelled]", dim=True), err=True)
    finally:
        save_history()
        wait_for_runs()


def _slash(vault, provider, session: str, text: str) -> str | None:
    word = text.split()[0].lower()
    if word in ("/quit", "/exit", "/q"):
        return "quit"
    if word in ("/help", "/?"):
        click.echo(HELP)
    elif word == "/memory":
        for name in ("MEMORY.md", "USER.md"):
            path = vault.root / name
            body = path.read_text(encoding="utf-8") if path.exists() else "(missing)\n"
            click.echo(click.style(f"--- {name}", bold=True))
            click.echo(body.rstrip("\n"))
    elif word == "/new":
        _new(vault, provider, session)
    elif word == "/undo":
        click.echo(undo_last_turn(vault, session))
    else:
        click.echo(f"Unknown command {word}; /help lists them.")
    return None


def _new(vault, provider, session: str) -> None:
    from agent.chat.compact import CompactError, compact_session
    from agent.vault.repo import now

    try:
        entry = compact_session(vault, provider, session, now(), force=True)
    except CompactError as e:
        click.echo(f"{e} The conversation goes on as it was.", err=True)
        return
    report_recovery(vault)
    if entry is None:
        click.echo("Nothing to archive; this is already a fresh conversation.")
    else:
        click.echo(f"Archived as entry {entry} ({_topic(vault, entry)}). "
                   f"A fresh conversation starts.")


def _topic(vault, entry_id: int) -> str:
    from agent.stores import archive

    found = next(iter(sorted(vault.root.glob(f"{archive.ARCHIVE}/*/*/{entry_id}.md"))), None)
    if found is None:
        return ""
    return archive.load(vault.root, found.relative_to(vault.root).as_posix()).topic


def undo_last_turn(vault, session: str) -> str:
    """Revert the newest turn commit of `session` not yet undone; says what happened."""
    try:
        done = history.undo(vault, session=session)
    except history.NothingToUndo as e:
        return str(e)
    except history.UndoConflict as e:
        return (f"Cannot undo {e.commit.short} ({e.commit.subject}): later changes touch the "
                f"same lines. Nothing was changed.")
    finally:
        report_recovery(vault)
    after_change(vault)
    c = done.commit
    if done.sha is None:
        return f"Nothing to undo: {c.short} ({c.subject}) changes nothing any more."
    return f"Undid {c.short} ({c.subject}) in {done.sha[:7]}."


# ---- agent archive ------------------------------------------------------------------------


@click.command("archive")
@click.option("--session", metavar="KEY", help=f"The conversation (default {DEFAULT_SESSION}).")
@click.option("--all", "all_", is_flag=True, help="Every conversation of the vault.")
@vault_option
def archive_cmd(session, all_):
    """Archive conversations now, so the dream sees recent talk.

    Compacts the whole window of the conversation (or of every one) into an archive
    entry with a model-written topic and summary.
    """
    if session and all_:
        raise click.UsageError("Give --session KEY or --all, not both.")
    vault = get_vault()
    if all_:
        keys = sessions.list_sessions(vault.root)
    else:
        key = sessions.check_key(session or DEFAULT_SESSION)
        if session and not session_exists(vault, key):
            raise UserError(unknown_session(vault, key))
        keys = [key]
    from agent.llm.preload import preload

    preload()
    quiet_logs()
    from agent.chat.compact import CompactError, compact_session
    from agent.llm import make_provider
    from agent.vault.repo import now

    provider = make_provider()
    failed, done = 0, []
    for key in keys:
        try:
            entry = compact_session(vault, provider, key, now(), force=True)
        except CompactError as e:
            failed += 1
            click.echo(str(e), err=True)
            continue
        except KeyboardInterrupt:
            kept = (f"{', '.join(done)} archived; " if done else "")
            click.echo(f"\n[interrupted: {kept}{key} is unchanged]", err=True)
            sys.exit(130)
        report_recovery(vault)
        if entry is None:
            click.echo(f"{key}: nothing to archive")
        else:
            done.append(key)
            click.echo(f"{key}: archive entry {entry} ({_topic(vault, entry)})")
    if not keys:
        click.echo("No conversations yet.")
    if done:
        name_vault(vault)
    if failed:
        sys.exit(1)


# ---- agent sessions -----------------------------------------------------------------------


def _short(text: str, width: int) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[:width - 3].rstrip() + "..."


@click.command("sessions")
@click.option("--json", "as_json", is_flag=True, help="A JSON array, for scripts.")
@vault_option
def sessions_cmd(as_json):
    """List the conversations: messages, first and last time, the last line."""
    import json
    import shutil

    from agent.search import index

    vault = get_vault()
    found = index.session_summaries(vault)
    if as_json:
        click.echo(json.dumps([{"session": s.key, "messages": s.messages, "first": s.first,
                                "last": s.last, "last_speaker": s.last_speaker,
                                "last_text": s.last_text} for s in found],
                              ensure_ascii=False, indent=2))
        return
    if not found:
        click.echo('No conversations yet. Start one: agent chat -m "hello"')
        return

    def when(ts):
        return ts[:16].replace("T", " ") if ts else "-"

    head = ["SESSION", "MESSAGES", "FIRST", "LAST", "LAST LINE"]
    rows = [[s.key, str(s.messages), when(s.first), when(s.last),
             f"{s.last_speaker}: {s.last_text}" if s.last_speaker else s.last_text]
            for s in found]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    width = shutil.get_terminal_size((100, 24)).columns
    room = max(20, width - sum(widths) - 2 * 4)
    for r in [head, *rows]:
        cells = [r[0].ljust(widths[0]), r[1].rjust(widths[1]), r[2].ljust(widths[2]),
                 r[3].ljust(widths[3]), _short(r[4], room)]
        click.echo("  ".join(cells).rstrip())


COMMANDS = [chat, archive_cmd, sessions_cmd]
