"""The slash commands of a conversation, one table for every front-end that holds one:
the terminal (`agent chat`), Telegram and the web page. Each front-end parses the line,
calls `run`, and renders the `Reply`; what a command does is here, once.

    ctx = Context(vault, "telegram/42", "telegram", provider=provider, stop=cancel)
    reply = run(ctx, "/undo")              # Reply(text="Undid 1a2b3c4 (...) in 5d6e7f8.")

Where a command makes no sense a front-end does not offer it, and `/help` there does
not list it (`unavailable(front)` says why, for the README and the tests):

- `/quit` is the terminal's only: a Telegram chat or a web page is not a program that
  one leaves; the conversation is simply there the next time.
- `/start` is Telegram's only: Telegram's apps send it when a person first opens a bot;
  it shows the help.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, ContextManager, TYPE_CHECKING, cast

if TYPE_CHECKING:
    from agent.vault.repo import Vault
    from agent.llm import Provider

FRONTS = ("repl", "telegram", "web")
ALL = frozenset(FRONTS)


@dataclass
class Context:
    """Where a command runs: the vault, the conversation, and what the front-end lends."""
    vault: Vault
    session: str
    front: str                                   # one of FRONTS
    provider: Provider | None = None             # the model, for /new's summary
    clock: Callable[[], datetime] | None = None  # now (default: agent.clock.now)
    # Stops the conversation's running turn; True when one was running. None: no turn
    # runs while this command does (the terminal's prompt).
    stop: Callable[[], bool] | None = None
    # hold(session): a context in which the conversation's running turn is saved and its
    # next messages wait (serve's router); the terminal runs one thing at a time.
    hold: Callable[[str], ContextManager[Any]] | None = None

    def now(self) -> datetime:
        if self.clock is not None:
            return self.clock()
        from agent.clock import now
        return now()


@dataclass
class Reply:
    """What a command answers, for the front-end to render."""
    text: str = ""
    sections: list[tuple[str, str]] = field(default_factory=list)  # /memory: (file, text)
    review: list[Any] = field(default_factory=list)   # /review: agent.ops.review.Item waiting
    aside: bool = False          # a note, not an answer (the terminal prints it on stderr)
    changed: bool = False        # a commit was made
    quit: bool = False           # the terminal leaves


@dataclass(frozen=True)
class Command:
    name: str                                    # "/undo"
    help: str
    run: Callable[[Context, str], Reply]
    fronts: frozenset[str] = ALL
    aliases: tuple[str, ...] = ()
    holds: bool = False          # waits until the running turn is saved (it changes the vault)
    help_in: tuple[tuple[str, str], ...] = ()    # (front, help) where it reads otherwise

    def help_for(self, front: str) -> str:
        return dict(self.help_in).get(front, self.help)


# ---- the commands ---------------------------------------------------------------------------


def _new(ctx: Context, text: str) -> Reply:
    from agent.ops import sessions

    # Every front-end that offers /new gives its model (a summary needs one).
    done = sessions.new_conversation(ctx.vault, cast("Provider", ctx.provider), ctx.session,
                                     ctx.now())
    return Reply(done.said, aside=done.error is not None, changed=done.entry is not None)


def _undo(ctx: Context, text: str) -> Reply:
    from agent.ops import undo

    done = undo.undo_last_turn(ctx.vault, ctx.session)
    return Reply(done.said, changed=done.changed)


def _memory(ctx: Context, text: str) -> Reply:
    from agent.errors import UserError
    from agent.stores import memory
    from agent.fs import safe

    out = []
    for name in memory.MEMORY_FILES:
        try:
            body = safe.read_text(ctx.vault.root, name)
        except UserError as e:          # a link out of the vault, too big: say so
            body = f"(unreadable: {e})"
        out.append((name, "(missing)" if body is None else body.rstrip("\n")))
    return Reply(sections=out)


def _stop(ctx: Context, text: str) -> Reply:
    stopped = ctx.stop() if ctx.stop is not None else False
    return Reply("Stopped; what was said is kept." if stopped else "Nothing is running.")


def _review(ctx: Context, text: str) -> Reply:
    from agent.ops import review

    items = review.pending(ctx.vault)
    if not items:
        return Reply("Nothing waits for review.")
    n = len(items)
    return Reply(f"{n} proposal{'s' * (n != 1)} wait{'s' * (n == 1)} for review:", review=items)


def _help(ctx: Context, text: str) -> Reply:
    return Reply(help_text(ctx.front))


def _quit(ctx: Context, text: str) -> Reply:
    return Reply(quit=True)


COMMANDS: tuple[Command, ...] = (
    Command("/new", "archive this conversation and start a fresh one", _new, holds=True),
    Command("/undo", "revert the last turn (its messages and the memory it changed)", _undo,
            holds=True),
    Command("/memory", "show MEMORY.md and USER.md", _memory),
    Command("/stop", "stop the reply being written", _stop,
            help_in=(("repl", "stop the reply being written (typed while it is, or Ctrl-C)"),)),
    Command("/review", "the dream's proposals waiting for your decision", _review,
            help_in=(("telegram", "the dream's proposals, with Accept and Reject buttons"),
                     ("repl", "the dream's proposals waiting (agent review decides them)"))),
    Command("/help", "this list", _help, aliases=("/?",)),
    Command("/start", "this list", _help, fronts=frozenset({"telegram"})),
    Command("/quit", "leave (also Ctrl-D, or Ctrl-C at the prompt: exit status 130)", _quit,
            fronts=frozenset({"repl"}), aliases=("/exit", "/q")),
)

WHY_NOT = {
    "/quit": "a chat there is not a program one leaves: the conversation is there next time",
    "/start": "Telegram's apps send it when a bot is first opened; elsewhere /help is the start",
}


def word(text: str) -> str:
    """The command word of a line: `/Undo@my_bot now` -> `/undo` (Telegram adds the
    bot's name in groups)."""
    first = text.strip().split()[0] if text.strip() else ""
    return first.split("@", 1)[0].lower()


def offered(front: str) -> list[Command]:
    """The commands `front` offers, in /help's order."""
    return [c for c in COMMANDS if front in c.fronts]


def words(front: str) -> set[str]:
    """Every word `front` understands, aliases included."""
    return {w for c in offered(front) for w in (c.name, *c.aliases)}


def find(text: str, front: str) -> Command | None:
    """The command a line starting with `/` names on `front`; None: not one there."""
    w = word(text)
    return next((c for c in offered(front) if w in (c.name, *c.aliases)), None)


def unavailable(front: str) -> dict[str, str]:
    """{command: why} of the table's commands `front` does not offer."""
    return {c.name: WHY_NOT.get(c.name, "") for c in COMMANDS if front not in c.fronts}


def help_text(front: str) -> str:
    """/help on `front`: one line per command it offers (/start, an alias, goes unsaid)."""
    return "\n".join(f"{c.name:<8} {c.help_for(front)}" for c in offered(front)
                     if c.name != "/start")


def run(ctx: Context, text: str) -> Reply:
    """Do the slash command `text` in `ctx`; an unknown one is answered, not raised."""
    command = find(text, ctx.front)
    if command is None:
        return Reply(f"Unknown command {word(text)}; /help lists them.")
    if command.holds and ctx.hold is not None:
        with ctx.hold(ctx.session):
            return command.run(ctx, text)
    return command.run(ctx, text)
