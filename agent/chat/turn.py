"""One turn of a conversation: prompt, tool loop, one commit.

    result = run_turn(vault, provider, "cli/default", "plan the Kyoto trip", now())

1. The prompt is built (agent.chat.prompt) from the vault's files and the session window.
2. The model is called with the tools; the tool calls of one reply run at once (one
   thread each); their results go back to the model, until a reply without tool calls
   or `settings.max_iterations` model calls.
3. Under the vault lock, and only then: the tools' staged file changes
   (agent.vault.staged), the turn's transcript lines, one commit
   `chat(cli/default): <the message, shortened>` with trailers Session, Turn, Model,
   Tokens. Then the search index is brought up to date.
4. If the window is over its budget, its oldest part is compacted (agent.chat.compact).

The model is never called with the lock held. An API failure still saves the user's
message (and whatever the turn did before it) with the error; Ctrl-C saves the user's
message and the partial reply, marked `"interrupted": true`.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import signal
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from agent.chat import prompt as context
from agent.chat.bounds import Cut, Watch
from agent.chat.cancel import Cancelled, cancellable, new_turn_cancel
from agent.chat.compact import (CompactError, backlog_bytes, backlog_of, compact_backlog,
                                compact_session, compact_until)
from agent.chat.subjects import shorten
from agent.chat.tools import registry
from agent.stores.used import Used
from agent import clock, redact
from agent.config import load_settings
from agent.errors import UserError
from agent.llm import Provider, ProviderError, add_usage, models_for, zero_usage
from agent.llm.records import (MAX_TOKENS, STOPPED, Interrupted, Message, Request, Text,
                               Tool, ToolCall, ToolResult, text_of)
from agent.llm.size import chars
from agent.stores import sessions
from agent.vault.change import Change, tokens
from agent.vault.gitstate import head_from_files, object_format
from agent.vault.staged import StagedVault
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

log = logging.getLogger("agent.chat.turn")

MAX_PARALLEL_TOOLS = 8


@dataclass
class TurnResult:
    reply: str
    sha: str | None
    session: str
    turn: int
    # input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens
    usage: dict
    model: str
    error: str | None = None
    interrupted: bool = False
    # Why the reply was cut short: "repeating", "time" (agent.chat.bounds) or
    # "max_tokens"; the turn is saved, marked so, and `notes` says it in one line.
    cut: str | None = None
    compacted: int | None = None          # the archive entry made after this turn, if any
    notes: list[str] = field(default_factory=list)   # things the user should hear of
    # The text of each model call of the turn, in order: those written before a tool call
    # too, so that a channel tells the whole reply (`reply` joins only the calls that
    # ended without tool calls, as the transcript's answer).
    replies: list[str] = field(default_factory=list)
    # The messages injected into the turn, in order, each with how many of `replies`
    # came before the model saw it.
    injected: list[tuple[str, int]] = field(default_factory=list)


def _text_of(blocks) -> str:
    return blocks if isinstance(blocks, str) else text_of(blocks)


def _joined(replies: list[str]) -> str:
    return "\n\n".join(r for r in replies if r)


# ---- tools ----------------------------------------------------------------------------


def _tool_logger(vault: Vault):
    def log_exception(name: str, exc: BaseException) -> None:
        logs = vault.state / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / "tools.log", "a", encoding="utf-8") as f:
            f.write(f"--- {clock.now().isoformat()} tool {name}\n")
            f.write("".join(traceback.format_exception(exc)))
    return log_exception


def run_tools(calls: list[ToolCall], ctx: registry.ToolContext, *, on_tool=None,
              mcp=None, on_tool_done=None, kept: list | None = None) -> list[ToolResult]:
    """The results of the tool calls `calls`, run at once, in their order.

    `mcp` (an agent.chat.mcp_client.client.Hub) answers the calls of its servers' tools;
    `on_tool_done(name, is_error)` hears of each call as it ends (from its thread).
    """
    logger = _tool_logger(ctx.vault)

    def one(call: ToolCall) -> ToolResult:
        if mcp is not None and mcp.owns(call.name):
            text, is_error = mcp.call(call.name, call.input)
        else:
            with registry.use_context(ctx):
                text, is_error = registry.call(call.name, call.input, log=logger)
        text, found = redact.door(ctx.vault.root, text)    # a key a tool read stays out
        if kept is not None:
            kept.extend(found)
        if on_tool_done is not None:
            on_tool_done(call.name, bool(is_error))
        return ToolResult(call.id, text, is_error=bool(is_error))

    for call in calls:
        if on_tool is not None:
            on_tool(call.name, call.input)
    if len(calls) == 1:
        return [one(calls[0])]
    # A spawn_agent call mostly waits for its run: each gets a worker of its own, so the
    # sub-agents of one reply all run at once.
    spawns = sum(c.name == "spawn_agent" for c in calls)
    pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_TOOLS + spawns, len(calls)),
                              thread_name_prefix="tool")
    try:
        futures = [pool.submit(copy_context().run, one, c) for c in calls]
        return [f.result() for f in futures]
    finally:
        # On Ctrl-C do not wait for tools still running; their staged writes are dropped.
        pool.shutdown(wait=False, cancel_futures=True)


def _mcp_servers(vault: Vault, settings):
    """The MCP servers of agent.toml, started (once per process), and one line for each
    that failed; (None, []) when there are none (the SDK is not even imported)."""
    if not (settings.raw.get("mcp") or {}).get("servers"):
        return None, []
    from agent.chat.mcp_client.client import hub_for
    hub = hub_for(vault.root, settings.raw)
    if hub is None:
        return None, []
    return hub, hub.start()


# ---- persisting -----------------------------------------------------------------------


class _HeldSigint:
    """Ctrl-C waits while the turn is being written (milliseconds, or as long as another
    process holds the vault lock), then takes effect: the handler that was in place runs
    (a KeyboardInterrupt in the terminal; `agent serve` stops as on SIGINT)."""

    def __init__(self):
        self.got: list = []
        self.previous = None
        self.holding = False

    def __enter__(self) -> "_HeldSigint":
        if threading.current_thread() is threading.main_thread():
            try:
                self.previous = signal.signal(signal.SIGINT, lambda *a: self.got.append(a))
                self.holding = True
            except ValueError:      # a main thread without signals (an embedding host)
                pass
        return self

    def __exit__(self, *exc) -> None:
        if self.holding:
            signal.signal(signal.SIGINT, self.previous)
            self.holding = False

    def deliver(self) -> None:
        """The Ctrl-C held meanwhile, given to the handler it was meant for."""
        if not self.got:
            return
        signum, frame = self.got[0]
        self.got.clear()
        if callable(self.previous):
            self.previous(signum, frame)
        elif self.previous == signal.SIG_DFL:
            signal.raise_signal(signum)


class SavedThenInterrupted(KeyboardInterrupt):
    """Ctrl-C came while the turn was being saved: it is saved (commit `sha`), then stopped."""

    def __init__(self, sha: str | None):
        super().__init__()
        self.sha = sha


def _line(turn: int, n: int, now: datetime, role: str, content, **extra) -> sessions.Line:
    return sessions.Line.new(turn, role, content, now, id=f"{turn}.{n}-{secrets.token_hex(3)}",
                             **extra)


class NotCommitted(Exception):
    """The turn is written to its files (journalled for the next command to commit) but
    its commit could not be made; or, said so, it could not even be written."""


def persist(vault: Vault, staged: StagedVault | None, session: str, now: datetime,
            lines: list[sessions.Line],
            change: Change, before_commit: Callable[[], None] | None = None) -> str | None:
    """Apply the turn's staged changes, append its lines and commit, under the vault lock.

    `before_commit()` runs under the lock just before the commit: what it writes through
    the vault lands in the same commit. When the vault cannot commit (its repair fails:
    an unfinished merge, a sync's checkout git refuses; or the commit itself fails), the
    turn is still written and journalled, so the next command that can commits it as
    this turn, and NotCommitted says so: an answered turn is never dropped.
    """
    from agent.search import index

    rel = sessions.month_file(session, now)
    done = {"lines": False}

    def write(change: Change) -> Change:
        change = _renumber(vault, session, lines, change)
        # The commit this will be, journalled first: a kill before it lands leaves a
        # `recover` commit that tells the turn (and undo takes back); the transcript
        # goes in before the memory files, so a fact never lands without it.
        vault.intend(change)
        if lines:
            kept = vault.append_lines(rel, [line.dumps() for line in lines])
            if staged is not None:
                staged.removed.extend(kept)
        done["lines"] = True
        if staged is not None:
            staged.apply()
        if before_commit is not None:
            before_commit()
        return change

    held = _HeldSigint()
    try:
        with held:
            sha = _save(vault, rel, change, write, done)
            index.refresh(vault, after_commit=True)
    except BaseException:  # any: the held signal is delivered, then the failure raised again
        held.deliver()      # a Ctrl-C pressed meanwhile: it wins over the failure
        raise
    try:
        held.deliver()
    except KeyboardInterrupt:
        raise SavedThenInterrupted(sha) from None
    return sha


def _save(vault: Vault, rel: str, change: Change, write, done: dict) -> str | None:
    """The turn written and committed under the lock, or NotCommitted (see persist)."""
    try:
        with vault.locked():
            return vault.commit(write(change))
    except UserError as e:
        if not done["lines"]:
            try:
                with vault.locked(repair=False):
                    write(change)
            except (UserError, OSError) as again:
                raise NotCommitted(f"This turn could not be saved: {again} (and: {e})") \
                    from None
        # The error's own advice is for a command that wrote nothing; this one did.
        why = str(e).replace("; then run the command again", "").replace(
            " Nothing was changed.", "")
        raise NotCommitted(f"This turn is saved in {rel} but not committed; the next "
                           f"command commits it once this is fixed: {why}") from None


def _with_prefix(prefix: list[Message] | None, messages: list[Message]) -> list[Message]:
    """`prefix` (a parent's window, ending with a user message) then `messages`, the two
    user messages where they meet joined into one (the API wants roles to alternate)."""
    if not prefix:
        return messages
    prefix = [Message(m.role, m.content if isinstance(m.content, str) else    # a copy,
                      [dataclasses.replace(b, cache=None) for b in m.content])  # no cache marks
              for m in prefix]
    if prefix[-1].role == "user" and messages and messages[0].role == "user":
        joined = Message("user", prefix[-1].blocks + messages[0].blocks)
        return prefix[:-1] + [joined] + messages[1:]
    return prefix + messages


def _renumber(vault: Vault, session: str, lines: list[sessions.Line], change: Change) -> Change:
    """Give the turn the next free number as the session is now, under the lock.

    The number was taken when the prompt was built, before the model call; a concurrent
    turn on the same session may have saved that number meanwhile.
    """
    if not lines or lines[0].turn is None:
        return change
    last = sessions.Session(vault.root, session).last_turn()
    if last < lines[0].turn:
        return change
    turn = last + 1
    for line in lines:
        line.turn = turn
        if isinstance(line.id, str) and "." in line.id:
            line.id = f"{turn}.{line.id.split('.', 1)[1]}"
    if "Turn" in change.trailers:
        change = dataclasses.replace(change, trailers={**change.trailers, "Turn": str(turn)})
    return change


# ---- the turn -------------------------------------------------------------------------


@dataclass
class TurnOptions:
    """How a turn runs and what it saves, beyond the message it answers (see run_turn).

    run_turn takes these as an object (`options=`) or as keywords, which override it."""
    settings: object = None              # agent.config.Settings; read from the vault if None
    model: str | None = None             # the first model to try (then the fallbacks)
    kind: str = "chat"                   # the commit's kind: chat, cron, heartbeat, agent
    on_text: Callable[[str], None] | None = None       # the reply as it streams
    on_tool: Callable | None = None                    # (name, input) as a tool call starts
    on_tool_done: Callable | None = None               # (name, is_error) as it ends
    discard_reply: str | None = None     # a reply equal to it that changed nothing: no trace
    on_save: Callable[[str | None, bool], None] | None = None   # (error, interrupted), locked
    cancel: object = None                # agent.chat.cancel's event; a new one if None
    depth: int = 0                       # how deep in sub-agents
    readonly: bool = False
    prefix_messages: list[Message] | None = None   # a parent's window (context=full)
    scope: str | None = None             # the commit's scope (default the session)
    extra_trailers: dict | None = None
    line_extra: dict | None = None       # added to the first transcript line
    inbox: object = None                 # agent.chat.inbox.Inbox
    backlog: bool = True                 # archive a chunk of imported history after the
                                         # reply (serve archives it in the background)


def run_turn(vault: Vault, provider: Provider, session: str, text: str, now: datetime,
             options: TurnOptions | None = None, **keywords) -> TurnResult:
    """Answer `text` in `session`, using tools, and save the turn as one commit.

    `options` (TurnOptions, or its fields as keywords): `on_text(chunk)` receives the
    reply as it streams; `on_tool(name, input)` hears of each tool call. With
    `discard_reply` (e.g. "HEARTBEAT_OK"): a reply equal to it from a turn that changed
    no file leaves no trace (sha None). `on_save(error, interrupted)` runs under the vault
    lock as the turn is saved, with how the turn went (`error` in one line, as its Error
    trailer says it, or None): what it writes through the vault lands in the turn's
    commit (`agent serve` records a job's run so).

    Sub-agents (agent.chat.subagents) run turns too: `cancel` stops the turn and every
    run it started (Ctrl-C sets it as well); `depth`, `readonly` and `prefix_messages`
    (the parent's window, for context=full) shape what the turn sees; `scope` (default
    the session), `extra_trailers` and `line_extra` (on the first transcript line) what
    it saves.

    `inbox` (agent.chat.inbox.Inbox) brings messages sent while the turn runs: before
    each model call the waiting ones join the conversation (after the tool results, or
    after a reply, which is then kept and the loop goes on), so each is answered in this
    turn; they are saved as user lines marked `"injected": true` where the model saw
    them, and the commit says `Injected: N`. What arrives after the last model call is
    the caller's (`inbox.close()`), to run as the next turn. `on_tool_done(name,
    is_error)` hears of each tool call as it ends.

    Ctrl-C pressed while the turn is saved waits for the save, then stops the turn
    (`interrupted`, and no compaction after it).
    """
    opts = dataclasses.replace(options or TurnOptions(), **keywords)
    turn = _Turn.start(vault, provider, session, text, now, opts)
    turn.loop()
    if turn.leaves_no_trace():
        turn.staged.release_claims()
        return TurnResult(turn.reply, None, session, turn.number, turn.usage, turn.used)
    result = turn.save(turn.transcript())
    if not result.interrupted and not turn.unsaved:
        turn.compact_after(result)
    return result


@dataclass
class _Turn:
    """One turn's state as it goes: what run_turn's steps share."""
    vault: object
    provider: Provider
    session: str
    text: str
    now: datetime
    opts: TurnOptions
    settings: object
    kept: list                    # what redact.door held back (keys pasted or read)
    models: list[str]
    tools: list[Tool]
    mcp: object
    mcp_notes: list[str]
    prompt: context.Prompt
    fit_notes: list[str]
    number: int                   # the turn's number (renumbered under the lock if taken)
    staged: StagedVault
    messages: list[Message]       # the request's messages
    window_end: int
    ctx: registry.ToolContext
    cancel: object
    usage: dict = field(default_factory=zero_usage)
    new: list[dict] = field(default_factory=list)        # the turn's messages after the user's
    streamed: list[str] = field(default_factory=list)    # text of the call in progress
    shown: dict = field(default_factory=lambda: {"any": False, "newline": True})
    reply: str = ""
    replies: list[str] = field(default_factory=list)     # replies that ended a call without tools
    texts: list[str] = field(default_factory=list)       # every call's text (a channel's answer)
    injected: list[tuple[str, int]] = field(default_factory=list)
    error: str | None = None
    interrupted: bool = False
    used: str = ""
    force: str | None = None      # the tool the next model call must call (then None)
    watch: Watch = field(default_factory=lambda: Watch(None))
    fell_back: list[str] = field(default_factory=list)        # models that answered instead
    fell_back_from: list[str] = field(default_factory=list)   # of these, which failed
    cut: Cut | None = None        # a bound that stopped the turn (agent.chat.bounds)
    unsaved: str | None = None
    lines: list[sessions.Line] = field(default_factory=list)   # the transcript lines saved

    @classmethod
    def start(cls, vault: Vault, provider: Provider, session: str, text: str, now: datetime,
              opts: TurnOptions) -> "_Turn":
        """The prompt built, the tools listed and the MCP servers started."""
        cancel = opts.cancel if opts.cancel is not None else new_turn_cancel()
        settings = opts.settings or load_settings(vault.root)
        text, kept = redact.door(vault.root, text)    # a pasted key reaches neither vault nor model
        sessions.check_key(session)
        models = models_for(opts.model, settings)
        tools = registry.definitions(settings=settings, readonly=opts.readonly)
        # MCP servers' tools may change anything outside the vault: not for a read-only run.
        mcp, mcp_notes = (None, []) if opts.readonly else _mcp_servers(vault, settings)
        if mcp is not None:
            tools = tools + mcp.definitions()
        prompt, fit_notes = _fitted_prompt(vault, provider, session, text, now, settings, tools,
                                           opts.prefix_messages)
        # The provider imports the SDK at its first call, after the prompt is built: `agent
        # chat` starts importing it in the background (agent.llm.preload), so the two overlap.
        number = prompt.last_turn + 1
        staged = StagedVault(vault)
        messages = _with_prefix(opts.prefix_messages, prompt.messages)
        ctx = registry.ToolContext(staged, session, now, settings, opts.depth, provider,
                                   cancel=cancel, readonly=opts.readonly, messages=messages,
                                   parent=f"{session} turn {number}",
                                   asked=text if opts.kind == "chat" and not opts.depth else "",
                                   used=Used.from_prompt(prompt.seen, prompt.retrieved,
                                                         vault.root, head_from_files(vault.root),
                                                         object_format(vault.root)))
        return cls(vault, provider, session, text, now, opts, settings, kept, models, tools,
                   mcp, mcp_notes, prompt, fit_notes, number, staged, messages,
                   len(messages) - 2 if len(messages) > 1 else -1, ctx, cancel, used=models[0],
                   force=_forced_tool(text, opts, settings, tools),
                   watch=Watch(getattr(settings, "turn_timeout", None)))

    # -- the tool loop --

    def inject(self, target: Message) -> None:
        """The messages waiting in the inbox, added to `target` (the user message about
        to be sent) and to the transcript."""
        for said, source in self.opts.inbox.drain():
            said, found = redact.door(self.vault.root, said)
            self.kept.extend(found)
            target.blocks.append(Text(said))
            self.ctx.asked += f"\n{said}" if self.ctx.asked else ""
            extra = {"injected": True}
            if source:
                extra["source"] = source
            self.new.append({"role": "user", "content": said, "extra": extra})
            self.injected.append((said, len(self.texts)))

    def sink(self, chunk: str) -> None:
        if self.cancel.is_set():
            raise Cancelled()
        self.streamed.append(chunk)
        try:
            self.watch.heard(chunk)
        except Cut as e:
            # The reply repeats itself, or the time is up: the provider ends the stream
            # and returns what was written (stop_reason STOPPED).
            self.cut = e
            raise
        on_text, shown = self.opts.on_text, self.shown
        if on_text is not None and chunk:
            if shown["any"] and not self.streamed[:-1] and not shown["newline"]:
                on_text("\n\n")
            on_text(chunk)
            shown["any"] = True
            shown["newline"] = chunk.endswith("\n")

    def loop(self) -> None:
        """Call the model and run its tools until a reply without tool calls, the limit
        of calls, Ctrl-C or an API failure (the last two recorded, not raised)."""
        calls_allowed = max(1, self.settings.max_iterations)
        try:
            for call_no in range(calls_allowed):
                if self.call(more_allowed=call_no + 1 < calls_allowed):
                    break
            else:
                last = next((m for m in reversed(self.new) if m["role"] == "assistant"), None)
                self.reply = _joined(self.replies + [_text_of(last["content"]) if last else ""])
                self.error = (f"Stopped: the turn reached its limit of "
                              f"{self.settings.max_iterations} model calls "
                              f"(chat.max_iterations in agent.toml).")
        except Cut as e:
            # Out of time between two model calls (one cut mid-stream ends in call()).
            self.cut = e
            self.reply = _joined(self.replies)
            self.cancel.set()           # its sub-agents stop too, and save what they did
            self.cancel.settle()
        except KeyboardInterrupt as e:
            self.interrupted = True
            self.reply = _joined(self.replies + ["".join(self.streamed)])
            self.texts.append("".join(self.streamed))
            if isinstance(e, Interrupted):      # what the provider counted of the reply
                add_usage(self.usage, e.usage)
            # Every sub-agent this turn started stops too, and saves what it did.
            self.cancel.set()
            self.cancel.settle()
        except ProviderError as e:
            self.error = str(e)
            self.reply = _joined(self.replies)
            log.warning("turn %s of %s: %s", self.number, self.session, self.error)

    def call(self, more_allowed: bool) -> bool:
        """One model call and the tools it asks for; True when the turn's reply is done."""
        messages = self.messages
        self.cancel.check()
        self.watch.check()
        if self.opts.inbox is not None and messages and messages[-1].role == "user":
            if isinstance(messages[-1].content, str):
                messages[-1].content = [Text(messages[-1].content)]
            self.inject(messages[-1])
            if not messages[-1].content:          # nothing came after all
                messages.pop()
                self.reply = _joined(self.replies)
                return True
        context.strip_marks(messages, self.window_end)
        context.mark_last(messages)
        self.streamed.clear()
        models = self.models
        request = Request(messages, self.settings.max_tokens, system=self.prompt.system,
                          tools=self.tools, tool_choice=self.force)
        self.watch.reset()
        self.force = None
        msg = cancellable(self.cancel, self.provider.stream, models[models.index(self.used):],
                          request, on_text=self.sink)
        if msg.model != self.used and msg.model not in self.fell_back:
            # The model asked for failed (its server down, killed mid-reply, overloaded):
            # what the person saw streamed may have been its start, then the next one's.
            self.fell_back.append(msg.model)
            self.fell_back_from.append(self.used)
        self.used = msg.model
        add_usage(self.usage, msg.usage)
        blocks = [b for b in msg.content if not (isinstance(b, Text) and not b.text)]
        self.streamed.clear()
        if blocks:
            # Separate lists: cache breakpoints go on the request, never the transcript.
            messages.append(Message("assistant", list(blocks)))
            self.new.append({"role": "assistant", "content": blocks})
        calls = [b for b in blocks if isinstance(b, ToolCall)]
        self.texts.append(_text_of(blocks))
        if msg.stop_reason == STOPPED:
            # A bound of the turn stopped the stream (sink kept which): what was written
            # is the turn's reply.
            self.replies.append(_text_of(blocks))
            self.reply = _joined(self.replies)
            return True
        if not calls:
            self.replies.append(_text_of(blocks))
            inbox = self.opts.inbox
            if inbox is not None and more_allowed and inbox.waiting():
                # Messages came while the model wrote this reply: it is kept, and
                # they are answered by the next call (injected at the loop's top).
                if messages[-1].role != "user":
                    messages.append(Message("user", []))
                return False
            if msg.stop_reason == MAX_TOKENS:
                self.cut = Cut("max_tokens", f"Cut: the reply reached its limit of "
                                             f"{self.settings.max_tokens:,} tokens ([model] "
                                             f"max_tokens in agent.toml).")
            self.reply = _joined(self.replies)
            return True
        results = run_tools(calls, self.ctx, on_tool=self.opts.on_tool, mcp=self.mcp,
                            on_tool_done=self.opts.on_tool_done, kept=self.kept)
        messages.append(Message("user", list(results)))
        self.new.append({"role": "user", "content": results})
        return False

    # -- saving --

    def leaves_no_trace(self) -> bool:
        """A `discard_reply` answer from a turn that changed nothing (a quiet heartbeat)."""
        return (self.opts.discard_reply is not None and self.error is None
                and not self.interrupted and self.reply.strip() == self.opts.discard_reply
                and not self.staged.changed() and not self.ctx.runs and not self.injected)

    def transcript(self) -> list[sessions.Line]:
        """The turn's session lines: the user's message, then what the turn said and did."""
        turn, now, text, used = self.number, self.now, self.text, self.used
        new, reply, interrupted, error = self.new, self.reply, self.interrupted, self.error
        line_extra = self.opts.line_extra
        lines = [_line(turn, 0, now, "user", text)]
        for n, m in enumerate(new, 1):
            content = m["content"]
            if m["role"] == "assistant" and len(content) == 1 and isinstance(content[0], Text):
                content = content[0].text
            extra = {"model": used} if m["role"] == "assistant" else m.get("extra", {})
            lines.append(_line(turn, n, now, m["role"], content, **extra))
        if interrupted:
            if reply:
                lines.append(_line(turn, len(lines), now, "assistant", reply, model=used,
                                   interrupted=True))
            else:
                lines[-1].extra["interrupted"] = True
        if error and not interrupted:
            lines[0].extra["error"] = error
        if self.cut is not None:
            # The reply as far as it went (or, cut between two calls, the turn's last
            # line), marked as cut and why.
            lines[-1].extra["cut"] = self.cut.why
        answer = next((line for line in reversed(lines) if line.role == "assistant"), None)
        if answer is not None and self.ctx.used is not None:
            # What memory the model was shown, by ids (agent.stores.used): never sent back.
            answer.extra["used"] = self.ctx.used.record()
        if line_extra:
            lines[0].extra.update(line_extra)
        return lines

    def error_line(self) -> str | None:
        """The error in one line, as the Error trailer and `on_save` say it."""
        return " ".join(self.error.split())[:200] if self.error else None

    def trailers(self) -> dict:
        trailers = {"Session": self.session, "Turn": str(self.number), "Model": self.used,
                    "Tokens": tokens(self.usage)}
        if self.interrupted:
            trailers["Interrupted"] = "yes"
        if self.cut is not None:
            trailers["Cut"] = self.cut.why
        if self.error_line():
            trailers["Error"] = self.error_line()
        if self.ctx.runs:
            trailers["Runs"] = ", ".join(self.ctx.runs)
        if self.injected:
            trailers["Injected"] = str(len(self.injected))
        trailers.update(self.opts.extra_trailers or {})
        return trailers

    def save(self, lines: list[sessions.Line]) -> TurnResult:
        """Write and commit the turn (persist), and what the caller hears of it."""
        on_save, error_line = self.opts.on_save, self.error_line()
        change = Change(self.opts.kind, shorten(self.text), scope=self.opts.scope or self.session,
                        trailers=self.trailers())
        stopped = False
        try:
            sha = persist(self.vault, self.staged, self.session, self.now, lines, change,
                          before_commit=(lambda: on_save(error_line, self.interrupted))
                          if on_save else None)
        except NotCommitted as e:
            # The reply was shown (streamed) already: it must not read as a saved turn.
            sha, self.unsaved = None, str(e)
            log.error("turn of %s: %s", self.session, self.unsaved)
        except SavedThenInterrupted as e:
            sha, stopped = e.sha, True
        turn = lines[0].turn if lines else self.number
        error, unsaved = self.error, self.unsaved
        result = TurnResult(self.reply, sha, self.session, turn, self.usage, self.used,
                            f"{error} {unsaved}" if error and unsaved else error or unsaved,
                            self.interrupted or stopped, replies=self.texts,
                            injected=self.injected,
                            cut=self.cut.why if self.cut is not None else None)
        if self.cut is not None:
            result.notes.append(self.cut.line)
        for failed, answered in zip(self.fell_back_from, self.fell_back):
            result.notes.append(f"{failed} did not answer (agent doctor says why); "
                                f"{answered}, its fallback, did.")
        result.notes.extend(self.fit_notes)
        result.notes.extend(filter(None, [redact.summary(self.kept + self.staged.removed)]))
        result.notes.extend(f"Warning: {w}" for w in self.prompt.warnings)
        result.notes.extend(self.staged.problems)
        result.notes.extend(self.mcp_notes + (self.mcp.problems() if self.mcp is not None else []))
        self.lines = lines
        return result

    def compact_after(self, result: TurnResult) -> None:
        """If the window is now over its budget (or imported history waits), archive its
        oldest part; a failure is a note, and the conversation is kept."""
        vault, provider, session, now, settings = (self.vault, self.provider, self.session,
                                                   self.now, self.settings)
        prompt, text = self.prompt, self.text
        window = prompt.window + [line.to_dict() for line in self.lines]
        # The window's share of [chat] window_tokens: what the system prompt and tools leave
        # of it (this turn's message, counted apart in its own request, is window now).
        budget = (settings.window_tokens if prompt.window_budget is None else
                  prompt.window_budget + min(len(text), settings.max_message_tokens * 4) // 4)
        budget = max(budget, 1)
        over = context.estimate_tokens(window, settings.max_message_tokens) > budget
        if not over and (not self.opts.backlog or backlog_of(vault.root, session) is None):
            return
        try:
            if over:
                result.compacted = compact_session(vault, provider, session, now,
                                                   settings=settings, budget=budget)
            else:
                result.compacted = compact_backlog(vault, provider, session, now,
                                                   settings=settings)
                left = backlog_bytes(vault.root, session)
                if result.compacted is not None and left:
                    result.notes.append(
                        f"Archived part of the imported history (entry {result.compacted}); "
                        f"about {left // 1024:,} KB still wait, one part after each turn "
                        f"(`agent archive` does them all now, `agent serve` in the background).")
        except CompactError as e:
            result.notes.append(f"{e} (The conversation is kept; compaction is tried again "
                                f"after the next turn.)")
        except KeyboardInterrupt:
            result.notes.append("Compaction interrupted; it is tried again after the next turn.")


def _forced_tool(text: str, opts: TurnOptions, settings, tools: list[Tool]) -> str | None:
    """`remember` when the person's message asks to keep something ("Remember that my
    boat is called Wren"): the turn's first call must then call it, so a model that would
    only say "I'll remember that" (small local ones often do) cannot drop the fact. The
    same reading of an ask as explicit learning's (agent.dream.learning): never a
    question ("do you remember..."); only the person's own chat turn, never a job's, a
    heartbeat's or a sub-agent's message; `[chat] force_remember = false` turns it off."""
    from agent.dream.learning import REMEMBER_TOOL, asks_to_remember

    if (opts.kind != "chat" or opts.depth or opts.readonly
            or not getattr(settings, "force_remember", True)):
        return None
    if not any(t.name == REMEMBER_TOOL for t in tools) or not asks_to_remember(text):
        return None
    return REMEMBER_TOOL


def _fitted_prompt(vault: Vault, provider: Provider, session: str, text: str, now: datetime, settings,
                   tools: list[Tool], prefix_messages) -> tuple[context.Prompt, list[str]]:
    """The turn's prompt, within `[chat] window_tokens` with the tools counted: a window
    that does not fit is compacted first (in chunks that each fit a request); if that
    fails, this request leaves out the window's oldest turns (they stay in the session)."""
    budget = settings.window_tokens - chars(tools) // 4
    if prefix_messages:
        budget -= chars(prefix_messages) // 4

    def build():
        return context.build(vault, session, text, now, budget=budget,
                             max_message_tokens=settings.max_message_tokens)
    prompt = build()
    notes: list[str] = []
    if not prompt.trimmed:
        return prompt, notes
    try:
        made = compact_until(vault, provider, session, now, settings=settings,
                             budget=max(prompt.window_budget or 0, 1))
    except CompactError as e:
        made = []
        notes.append(f"{e} (The oldest messages of the conversation were left out of this "
                     f"request to fit [chat] window_tokens; they are kept.)")
    if made:
        notes.append(f"Archived the conversation's oldest part first (entr"
                     f"{'ies' if len(made) > 1 else 'y'} {', '.join(map(str, made))}), so "
                     f"the request fits [chat] window_tokens.")
    return (build() if made else prompt), notes
