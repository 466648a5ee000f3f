"""Commands of the chat family: `agent chat` and `agent archive`.

Nothing here imports the Anthropic SDK, the loop or the tools at module level: they are
imported inside the commands, so `agent --help` and the other commands stay fast.
"""

from __future__ import annotations

import sys

import click

from agent.stores import sessions
from agent.cli.common import after_change, get_vault, report_recovery, vault_option

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


def _turn(vault, client, session: str, text: str, model: str | None):
    from agent.chat.turn import run_turn
    from agent.vault.repo import now

    printer = _Printer()
    try:
        result = run_turn(vault, client, session, text, now(), model=model,
                          on_text=printer.text, on_tool=printer.tool)
    finally:
        printer.end()
    report_recovery(vault)
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


@click.command()
@click.option("-m", "--message", metavar="TEXT",
              help="Send one message, print the reply and exit (text piped on stdin works too).")
@click.option("--session", default=DEFAULT_SESSION, show_default=True, metavar="KEY",
              help="The conversation: CHANNEL/CHAT.")
@click.option("--model", metavar="NAME", help="The model (default: [model] name in agent.toml).")
@vault_option
def chat(message, session, model):
    """Talk with the agent (a conversation, or one message with -m)."""
    vault = get_vault()
    sessions.check_key(session)
    from agent.llm.anthropic import make_client

    client = make_client()
    if message is None and not sys.stdin.isatty():
        message = sys.stdin.read()
    if message is not None:
        if not message.strip():
            raise click.UsageError('Nothing to send: give the message, as in agent chat -m "hello"')
        try:
            result = _turn(vault, client, session, message, model)
        except KeyboardInterrupt:         # before the turn started: nothing was sent or saved
            click.echo("[cancelled]", err=True)
            sys.exit(130)
        if result.interrupted:
            sys.exit(130)
        if result.error:
            sys.exit(1)
        return
    _repl(vault, client, session, model)


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


def _repl(vault, client, session: str, model: str | None) -> None:
    from agent.config import load_settings

    save_history = _readline(vault)
    settings = load_settings(vault.root)
    click.echo(click.style(f"agent chat - session {session}, model {model or settings.model}. "
                           f"/help for commands, Ctrl-D to leave.", dim=True))
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
                    if _slash(vault, client, session, text) == "quit":
                        return
                    continue
                _turn(vault, client, session, line, model)
            except KeyboardInterrupt:
                # Outside the model call (which saves what it had): nothing was changed.
                click.echo(click.style("[cancelled]", dim=True), err=True)
    finally:
        save_history()


def _slash(vault, client, session: str, text: str) -> str | None:
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
        _new(vault, client, session)
    elif word == "/undo":
        click.echo(undo_last_turn(vault, session))
    else:
        click.echo(f"Unknown command {word}; /help lists them.")
    return None


def _new(vault, client, session: str) -> None:
    from agent.chat.compact import CompactError, compact_session
    from agent.vault.repo import now

    try:
        entry = compact_session(vault, client, session, now(), force=True)
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
    from agent.vault.repo import VaultError

    agent_email = vault.agent_identity().email
    with vault.locked():
        report_recovery(vault)
        out = vault.git("log", "-n", "500", "--format=%H%x1f%ae%x1f%s%x1f"
                        "%(trailers:key=Reverts,valueonly,separator=%x2c)%x1f"
                        "%(trailers:key=Session,valueonly,separator=%x2c)%x1e")
        reverted, target = set(), None
        for rec in out.split("\x1e"):
            rec = rec.strip("\n")
            if not rec:
                continue
            sha, email, subject, reverts, key = rec.split("\x1f")
            reverted.update(r.strip() for r in reverts.split(",") if r.strip())
            if (target is None and email == agent_email and key.strip() == session
                    and sha not in reverted and f"({session}):" in subject
                    and not subject.startswith(("archive(", "undo:"))):
                target = (sha, subject)
        if target is None:
            return f"Nothing to undo in {session}."
        sha, subject = target
        short = subject if len(subject) <= 60 else subject[:57] + "..."
        try:
            new = vault.revert(sha, f'undo: revert "{short}"\n\n'
                                    f'Reverts: {sha}\nSession: {session}\n')
        except VaultError:
            return (f"Cannot undo {sha[:7]} ({subject}): later changes touch the same lines. "
                    f"Nothing was changed.")
    after_change(vault)
    if new is None:
        return f"Nothing to undo: {sha[:7]} ({subject}) changes nothing any more."
    return f"Undid {sha[:7]} ({subject}) in {new[:7]}."


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
    keys = (sessions.list_sessions(vault.root) if all_
            else [sessions.check_key(session or DEFAULT_SESSION)])
    from agent.chat.compact import CompactError, compact_session
    from agent.llm.anthropic import make_client
    from agent.vault.repo import now

    client = make_client()
    failed = 0
    for key in keys:
        try:
            entry = compact_session(vault, client, key, now(), force=True)
        except CompactError as e:
            failed += 1
            click.echo(str(e), err=True)
            continue
        report_recovery(vault)
        if entry is None:
            click.echo(f"{key}: nothing to archive")
        else:
            click.echo(f"{key}: archive entry {entry} ({_topic(vault, entry)})")
    if not keys:
        click.echo("No conversations yet.")
    if failed:
        sys.exit(1)


COMMANDS = [chat, archive_cmd]
