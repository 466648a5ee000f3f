"""`agent chat`: a conversation at the prompt, or one message with -m.

Nothing here imports the Anthropic SDK, the loop or the tools at module level: they are
imported inside the commands, so `agent --help` and the other commands stay fast.
"""

from __future__ import annotations

import sys

import click

from agent.errors import UserError, did_you_mean
from agent.ops import commands
from agent.ops.sessions import DEFAULT_SESSION
from agent.stores import sessions
from agent.cli import complete
from agent.cli.common import (get_vault, name_vault, quiet_logs, read_stdin, report_recovery,
                              settings_of, vault_option)
from agent.vault.gitstate import check_committable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

HISTORY_FILE = "chat_history"
HISTORY_LENGTH = 2000

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


def _turn(vault: Vault, provider, session: str, text: str, model: str | None, *, inbox=None,
          cancel=None):
    from agent.chat.turn import run_turn

    quiet_logs()
    from agent.clock import now

    printer = _Printer()
    try:
        result = run_turn(vault, provider, session, text, now(), model=model,
                          on_text=printer.text, on_tool=printer.tool, inbox=inbox,
                          cancel=cancel)
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


@click.command()
@click.option("-m", "--message", metavar="TEXT",
              help="Send one message, print the reply and exit (text piped on stdin works too).")
@click.option("--session", metavar="KEY", shell_complete=complete.sessions,
              help=f"The conversation: CHANNEL/CHAT (default {DEFAULT_SESSION}).")
@click.option("-c", "--continue", "continue_", is_flag=True,
              help="Resume the conversation used last.")
@click.option("--new", "new", is_flag=True,
              help="Start the --session conversation if it does not exist yet, without asking.")
@click.option("--model", metavar="NAME", help="The model (default: [model] name in agent.toml).")
@click.option("--remote", is_flag=True,
              help="Talk through this vault's running agent serve (the REPL too).")
@click.option("--local", is_flag=True,
              help="With -m: run the turn in this process even while this vault's agent "
                   "serve runs.")
@vault_option
def chat(message, session, continue_, new, model, remote, local):
    """Talk with the agent (a conversation, or one message with -m)."""
    from agent.llm import make_provider
    from agent.llm.preload import preload
    from agent.ops import sessions as ops

    if continue_ and session:
        raise click.UsageError("Give --session KEY or --continue, not both.")
    if remote and model:
        raise click.UsageError("--model is not for --remote: agent serve answers with its "
                               "[model] name from agent.toml.")
    if remote and local:
        raise click.UsageError("Give --remote or --local, not both.")
    vault = get_vault()
    client = None
    if remote:
        from agent.serve.remote import Remote
        client = Remote.find(vault)
    elif message is not None and not (model or local):
        # One message while this vault's serve runs: it goes through serve's gateway
        # (its local socket), as serve holds the SDK already (loading it here is over a
        # second of CPU), and its router keeps one turn per conversation in flight.
        from agent.serve.remote import Remote
        client = Remote.running(vault)
        if client is not None:
            click.echo(click.style("[through the running agent serve; --local runs the turn "
                                   "here]", dim=True), err=True)
    if client is None:
        from agent.config import load_settings
        from agent.llm import sdk_of
        settings = load_settings(vault.root)
        preload(sdk_of(settings, model))   # the SDK loads while the vault is read, the prompt built, the person types
        check_committable(vault.root)   # before a model call whose turn could not be saved
        from agent.cli.keys import ask
        ask(settings, model)            # a key agent.toml sends somewhere new: asked here
    if continue_:
        session = ops.last_session(vault)
        if session is None:
            raise UserError("Nothing to continue: no conversation yet. Start one with agent chat.")
        click.echo(click.style(f"[continuing {session}]", dim=True), err=True)
    elif session is None:
        session = DEFAULT_SESSION
    else:
        sessions.check_key(session)
    script = None
    if message is None and not sys.stdin.isatty():
        message = read_stdin("message")
        if _is_script(message):
            # `printf '/help\nhello\n' | agent chat`: lines played as typed at the prompt.
            script, message = message.splitlines(), None
    elif message is not None and _piped():
        # As simonw/llm: text piped in goes first, then the message about it.
        piped = read_stdin("text")
        if piped.strip():
            message = f"{piped.rstrip()}\n\n{message}"
    if session != DEFAULT_SESSION and not new and not ops.exists(vault, session):
        close = did_you_mean(session, sessions.list_sessions(vault.root))
        if message is not None or script is not None:     # (stdin is read: no question)
            if close:     # most likely a typo: refuse rather than start a stray session
                raise UserError(f"No session {session} in {vault.root}.{close} "
                                f"Add --new to start {session}.")
            click.echo(click.style(f"[new session {session}]", dim=True), err=True)
        elif not click.confirm(f"No session {session} yet.{close} Start it?", default=not close,
                               err=True):
            raise SystemExit(1)
    if message is not None and not message.strip():
        raise click.UsageError('Nothing to send: give the message, as in agent chat -m "hello"')
    ops.remember_last(vault, session)
    if client is not None:
        if message is not None:
            answer = _remote_once(client, session, message)
            if answer.get("interrupted"):
                sys.exit(130)
            if answer.get("error"):
                sys.exit(1)
            return
        _repl(vault, make_provider(settings_of(vault), lazy=True), session, None, remote=client,
              script=script)
        return
    if message is not None:
        # The key is checked now; the SDK client is made at the first model call, so the
        # prompt is built while the SDK loads in the background.
        provider = make_provider(settings, model=model)
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
    _repl(vault, make_provider(settings, model=model), session, model, script=script)


def _is_script(text: str) -> bool:
    """Whether piped text is REPL input (its first line a slash command) rather than
    one message."""
    first = text.lstrip().split("\n", 1)[0].split()
    return bool(first) and commands.word(first[0]) in commands.words("repl")


def _piped() -> bool:
    """Whether stdin is a pipe or a file given with <, the only stdin `chat -m` reads:
    not a terminal, /dev/null or a socket a service manager left open."""
    import os
    import stat

    try:
        st = os.fstat(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):   # (no real file: CliRunner's input)
        return not sys.stdin.isatty()
    try:
        null = os.stat(os.devnull)       # (a container may make it a plain file)
        if (st.st_dev, st.st_ino) == (null.st_dev, null.st_ino):
            return False
    except OSError:
        pass
    return stat.S_ISFIFO(st.st_mode) or stat.S_ISREG(st.st_mode)


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


def _readline(vault: Vault):
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
    # A paste of several lines is one message, as a shell takes it: CPython turns
    # readline's bracketed paste off, so each pasted line was sent on its own (and the
    # lines pasted while the first one's turn ran arrived joined by "\r").
    if "libedit" not in (readline.__doc__ or ""):
        readline.parse_and_bind("set enable-bracketed-paste on")

    def save():
        try:
            readline.write_history_file(path)
        except OSError:
            pass
    return save


def _repl(vault: Vault, provider, session: str, model: str | None, *, remote=None,
          script: list[str] | None = None) -> None:
    """The conversation at the prompt; with `script` (lines piped in), those lines are
    played as typed ones, with no banner or prompt (as a shell reading a script)."""
    from agent.config import load_settings

    # Named now if not the current folder's, not after the first reply in mid-conversation.
    name_vault(vault)
    save_history = _readline(vault) if script is None else (lambda: None)
    settings = load_settings(vault.root)
    where = f"through agent serve at {remote.where}" if remote else \
        f"model {model or settings.model}"
    if script is None:
        click.echo(click.style(f"agent chat - session {session}, {where}. "
                               f"/help for commands, Ctrl-D to leave.", dim=True))
    from agent.sandbox import startup_note
    note = startup_note(settings)
    if note:
        click.echo(click.style(note, dim=True), err=True)
    lines = iter(script) if script is not None else None
    try:
        while True:
            try:
                line = input("> ") if lines is None else next(lines)
            except (EOFError, StopIteration):
                if lines is None:
                    click.echo()
                return
            except KeyboardInterrupt:   # as a shell: Ctrl-C at the prompt leaves with 130
                click.echo()
                raise SystemExit(130) from None
            text = line.strip()
            if not text:
                continue
            try:
                if text.startswith("/"):
                    if _slash(vault, provider, session, text) == "quit":
                        return
                    continue
                if remote is not None:
                    _remote_turns(remote, session, line)
                else:
                    _local_turns(vault, provider, session, line, model)
            except KeyboardInterrupt:
                # Outside the model call (which saves what it had): nothing was changed.
                click.echo(click.style("[cancelled]", dim=True), err=True)
    finally:
        save_history()
        wait_for_runs()


# ---- typing while a reply is written: injection --------------------------------------------


def _note(text: str) -> None:
    click.echo(click.style(text, dim=True), err=True)


def _add_history(line: str) -> None:
    try:
        import readline
        readline.add_history(line)
    except ImportError:
        pass


def _while_reading(work, on_line, on_interrupt):
    """work() in a worker thread while this (the main) thread reads the lines typed
    meanwhile, each given to on_line(line); Ctrl-C calls on_interrupt() (once) and the
    work is waited for. work's result, or its exception, raised here."""
    import os
    import select
    import threading

    box: dict = {}

    def target():
        try:
            box["value"] = work()
        except BaseException as e:  # noqa: BLE001 - raised again in the main thread
            box["error"] = e

    worker = threading.Thread(target=target, daemon=True, name="chat-turn")
    worker.start()
    fd = sys.stdin.fileno()
    buf, reading, stopped = b"", True, False
    while worker.is_alive():
        try:
            if not reading:
                worker.join(0.1)
                continue
            ready, _, _ = select.select([fd], [], [], 0.05)
            if not ready:
                continue
            data = os.read(fd, 4096)
            if not data:                       # Ctrl-D: nothing more to read
                reading = False
                continue
            buf += data
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                on_line(raw.decode("utf-8", errors="replace").rstrip("\r"))
        except KeyboardInterrupt:
            if not stopped:
                stopped = True
                on_interrupt()
        except (OSError, ValueError):          # stdin is no terminal after all
            reading = False
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _typed(inbox, late: list[str], stop=None):
    """What a line typed during a turn does: joins the turn (or the next one); /stop
    stops it (`stop()`, as Ctrl-C does)."""
    def on_line(line: str) -> None:
        text = line.strip()
        if not text:
            return
        if commands.word(text) == "/stop" and stop is not None:
            _note(f"[{commands.run(commands.Context(None, '', 'repl', stop=stop), text).text}]")
            return
        if text.startswith("/"):
            _note(f"[{text.split()[0]} waits for the prompt: Ctrl-C stops the reply]")
            return
        _add_history(line)
        if inbox.put(line):
            _note("[added to the running turn]")
        else:
            late.append(line)
            _note("[sent as the next message]")
    return on_line


def _local_turns(vault: Vault, provider, session: str, text: str, model: str | None) -> None:
    """A turn run in a worker thread: lines typed meanwhile join it (agent.chat.inbox);
    those too late for it run right after, as the next turn."""
    from agent.chat.cancel import new_turn_cancel
    from agent.chat.inbox import Inbox

    pending = [text]
    while pending:
        inbox, late = Inbox(), []
        for more in pending[1:]:               # seen by the next turn's first model call
            inbox.put(more)
        cancel = new_turn_cancel()
        first = pending[0]
        _while_reading(lambda first=first, inbox=inbox, cancel=cancel: _turn(
                           vault, provider, session, first, model, inbox=inbox, cancel=cancel),
                       _typed(inbox, late, lambda cancel=cancel: not cancel.set()), cancel.set)
        pending = inbox.close() + late


# ---- --remote: through the gateway of agent serve ---------------------------------------------


def _remote_turn(remote, session: str, text: str, *, printer=None) -> dict:
    """Send one message through the gateway, streaming the reply; the answer."""
    printer = printer or _Printer()

    def on_event(kind: str, data: dict) -> None:
        if kind == "text":
            printer.text(data.get("text", ""))
        elif kind == "tool_start":
            printer.tool(data.get("name", "?"), data.get("input"))
    try:
        answer = remote.send(session, text, on_event=on_event)
    finally:
        printer.end()
    _remote_report(answer)
    return answer


def _remote_once(remote, session: str, text: str) -> dict:
    """One message through serve (`agent chat -m`), as with --local: Ctrl-C stops the
    turn in serve, which saves what it had, marked interrupted, and its answer is
    awaited; a second Ctrl-C leaves at once (serve still saves the turn)."""
    import threading

    box: dict = {}
    done = threading.Event()        # (not Thread.join: a join Ctrl-C broke says "not alive")

    def go():
        try:
            box["answer"] = _remote_turn(remote, session, text)
        except BaseException as e:  # noqa: BLE001 - raised again in the main thread, whatever it is
            box["error"] = e
        finally:
            done.set()
    threading.Thread(target=go, daemon=True).start()
    try:
        done.wait()
    except KeyboardInterrupt:
        try:
            stopped = False
            while not done.is_set():
                if not stopped:         # (not yet running in serve: asked again until it is)
                    try:
                        stopped = remote.stop(session)
                    except UserError as e:
                        click.echo(f"Error: {e}", err=True)
                        stopped = True
                done.wait(0.2)
        except KeyboardInterrupt:
            _note("[left at once; agent serve saves the turn, marked interrupted]")
            sys.exit(130)
    if "error" in box:
        raise box["error"]
    return box["answer"]


def _remote_report(answer: dict) -> None:
    if answer.get("interrupted"):
        _note("[interrupted: your message and the partial reply are saved]")
    if answer.get("error"):
        click.echo(f"Error: {answer['error']}", err=True)
        if answer.get("commit"):
            click.echo(f"Your message is saved ({answer['commit'][:7]}).", err=True)


def _remote_turns(remote, session: str, text: str) -> None:
    """A remote turn; lines typed meanwhile are sent too: serve injects them into the
    running turn (or runs them next, and their reply is shown when it comes)."""
    import threading

    sent: list[threading.Thread] = []

    def send_more(line: str) -> None:
        def go():
            try:
                answer = remote.send(session, line)
            except UserError as e:
                click.echo(f"Error: {e}", err=True)
                return
            if not answer.get("injected"):       # its own turn: its reply was not streamed
                if answer.get("reply"):
                    click.echo(answer["reply"])
                _remote_report(answer)
        t = threading.Thread(target=go, daemon=True)
        t.start()
        sent.append(t)

    class _Joined:                              # the inbox of a turn that runs in serve
        def put(self, line: str) -> bool:
            send_more(line)
            return True

    def stop() -> bool:
        try:
            return remote.stop(session)
        except UserError as e:
            click.echo(f"Error: {e}", err=True)
            return False

    _while_reading(lambda: _remote_turn(remote, session, text), _typed(_Joined(), [], stop),
                   stop)
    for t in sent:
        t.join()


# ---- slash commands: agent.ops.commands, rendered for the terminal -------------------------

REPL_HELP = """\
Ctrl-C while a reply is being written stops it; what was said is kept.
A line typed while a reply is being written joins the running turn: the agent sees it
at its next step and answers it in the same reply."""


def _slash(vault: Vault, provider, session: str, text: str) -> str | None:
    """Run a slash command typed at the prompt and print its reply; "quit" when the
    conversation ends. (Nothing runs at the prompt: /stop says so.)"""
    ctx = commands.Context(vault, session, "repl", provider=provider)
    try:
        reply = commands.run(ctx, text)
    finally:
        report_recovery(vault)
    if reply.changed:
        name_vault(vault)
    if reply.quit:
        return "quit"
    for name, body in reply.sections:
        click.echo(click.style(f"--- {name}", bold=True))
        click.echo(body)
    if reply.text:
        click.echo(reply.text, err=reply.aside)
    if commands.word(text) in ("/help", "/?"):
        click.echo(REPL_HELP)
    for item in reply.review:
        click.echo("")
        for line in item.lines():
            click.echo(line)
    if reply.review:
        click.echo("")
        click.echo("agent review accept N... | reject N... [--because TEXT] | edit N")
    return None


COMMANDS = [chat]
