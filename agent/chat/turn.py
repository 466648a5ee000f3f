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

import contextlib
import dataclasses
import json
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
from agent.chat.cancel import Cancelled, cancellable, new_turn_cancel
from agent.chat.compact import (CompactError, backlog_bytes, backlog_of, compact_backlog,
                                compact_session, compact_until)
from agent.chat.subjects import shorten
from agent.chat.tools import registry
from agent import clock, redact
from agent.config import load_settings
from agent.errors import UserError
from agent.llm import Provider, ProviderError, add_usage, models_for, zero_usage
from agent.stores import sessions
from agent.vault.change import Change, tokens
from agent.vault.staged import StagedVault

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
    compacted: int | None = None          # the archive entry made after this turn, if any
    notes: list[str] = field(default_factory=list)   # things the user should hear of
    # The text of each model call of the turn, in order: those written before a tool call
    # too, so that a channel tells the whole reply (`reply` joins only the calls that
    # ended without tool calls, as the transcript's answer).
    replies: list[str] = field(default_factory=list)
    # The messages injected into the turn, in order, each with how many of `replies`
    # came before the model saw it.
    injected: list[tuple[str, int]] = field(default_factory=list)


def _text_of(blocks: list[dict]) -> str:
    return sessions.message_text(blocks, sep="")


def _joined(replies: list[str]) -> str:
    return "\n\n".join(r for r in replies if r)


# ---- tools ----------------------------------------------------------------------------


def _tool_logger(vault):
    def log_exception(name: str, exc: BaseException) -> None:
        logs = vault.state / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / "tools.log", "a", encoding="utf-8") as f:
            f.write(f"--- {clock.now().isoformat()} tool {name}\n")
            f.write("".join(traceback.format_exception(exc)))
    return log_exception


def run_tools(calls: list[dict], ctx: registry.ToolContext, *, on_tool=None,
              mcp=None, on_tool_done=None, kept: list | None = None) -> list[dict]:
    """tool_result blocks for the tool_use blocks `calls`, run at once, in their order.

    `mcp` (an agent.chat.mcp.client.Hub) answers the calls of its servers' tools;
    `on_tool_done(name, is_error)` hears of each call as it ends (from its thread).
    """
    logger = _tool_logger(ctx.vault)

    def one(call: dict) -> dict:
        if mcp is not None and mcp.owns(call["name"]):
            text, is_error = mcp.call(call["name"], call.get("input"))
        else:
            with registry.use_context(ctx):
                text, is_error = registry.call(call["name"], call.get("input"), log=logger)
        text, found = redact.door(ctx.vault.root, text)    # a key a tool read stays out
        if kept is not None:
            kept.extend(found)
        block = {"type": "tool_result", "tool_use_id": call["id"], "content": text}
        if is_error:
            block["is_error"] = True
        if on_tool_done is not None:
            on_tool_done(call["name"], bool(is_error))
        return block

    for call in calls:
        if on_tool is not None:
            on_tool(call["name"], call.get("input"))
    if len(calls) == 1:
        return [one(calls[0])]
    # A spawn_agent call mostly waits for its run: each gets a worker of its own, so the
    # sub-agents of one reply all run at once.
    spawns = sum(c.get("name") == "spawn_agent" for c in calls)
    pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_TOOLS + spawns, len(calls)),
                              thread_name_prefix="tool")
    try:
        futures = [pool.submit(copy_context().run, one, c) for c in calls]
        return [f.result() for f in futures]
    finally:
        # On Ctrl-C do not wait for tools still running; their staged writes are dropped.
        pool.shutdown(wait=False, cancel_futures=True)


def _mcp_servers(vault, settings):
    """The MCP servers of agent.toml, started (once per process), and one line for each
    that failed; (None, []) when there are none (the SDK is not even imported)."""
    if not (settings.raw.get("mcp") or {}).get("servers"):
        return None, []
    from agent.chat.mcp.client import hub_for
    hub = hub_for(vault.root, settings.raw)
    if hub is None:
        return None, []
    return hub, hub.start()


# ---- persisting -----------------------------------------------------------------------


@contextlib.contextmanager
def _hold_sigint():
    """Ctrl-C waits while the turn is being written (it is a few milliseconds)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *a: got.append(a))
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _line(turn: int, n: int, now: datetime, role: str, content, **extra) -> sessions.Line:
    return sessions.Line.new(turn, role, content, now, id=f"{turn}.{n}-{secrets.token_hex(3)}",
                             **extra)


class NotCommitted(Exception):
    """The turn is written to its files (journalled for the next command to commit) but
    its commit could not be made; or, said so, it could not even be written."""


def persist(vault, staged: StagedVault | None, session: str, now: datetime,
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
            vault.append_lines(rel, [line.dumps() for line in lines])
        done["lines"] = True
        if staged is not None:
            staged.apply()
        if before_commit is not None:
            before_commit()
        return change

    with _hold_sigint():
        try:
            with vault.locked():
                sha = vault.commit(write(change))
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
        index.refresh(vault, after_commit=True)
    return sha


def _with_prefix(prefix: list[dict] | None, messages: list[dict]) -> list[dict]:
    """`prefix` (a parent's window, ending with a user message) then `messages`, the two
    user messages where they meet joined into one (the API wants roles to alternate)."""
    if not prefix:
        return messages
    prefix = json.loads(json.dumps(prefix))          # a copy, without cache marks
    for m in prefix:
        if isinstance(m.get("content"), list):
            for b in m["content"]:
                b.pop("cache_control", None)
    if prefix[-1]["role"] == "user" and messages and messages[0]["role"] == "user":
        def blocks(c):
            return [{"type": "text", "text": c}] if isinstance(c, str) else list(c)
        joined = {"role": "user", "content": blocks(prefix[-1]["content"])
                  + blocks(messages[0]["content"])}
        return prefix[:-1] + [joined] + messages[1:]
    return prefix + messages


def _renumber(vault, session: str, lines: list[sessions.Line], change: Change) -> Change:
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


def run_turn(vault, provider: Provider, session: str, text: str, now: datetime, *, settings=None,
             model: str | None = None, kind: str = "chat", on_text=None,
             discard_reply: str | None = None, on_tool=None,
             on_save: Callable[[str | None, bool], None] | None = None, cancel=None,
             depth: int = 0, readonly: bool = False, prefix_messages: list[dict] | None = None,
             scope: str | None = None, extra_trailers: dict | None = None,
             line_extra: dict | None = None, inbox=None, on_tool_done=None) -> TurnResult:
    """Answer `text` in `session`, using tools, and save the turn as one commit.

    `on_text(chunk)` receives the reply as it streams; `on_tool(name, input)` hears of
    each tool call. With `discard_reply` (e.g. "HEARTBEAT_OK"): a reply equal to it
    from a turn that changed no file leaves no trace (sha None). `on_save(error,
    interrupted)` runs under the vault lock as the turn is saved, with how the turn
    went (`error` in one line, as its Error trailer says it, or None): what it writes
    through the vault lands in the turn's commit (`agent serve` records a job's run so).

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
    """
    cancel = cancel if cancel is not None else new_turn_cancel()
    settings = settings or load_settings(vault.root)
    text, kept = redact.door(vault.root, text)    # a pasted key reaches neither vault nor model
    sessions.check_key(session)
    models = models_for(model, settings)
    tools = registry.definitions(settings=settings, readonly=readonly)
    # MCP servers' tools may change anything outside the vault: not for a read-only run.
    mcp, mcp_notes = (None, []) if readonly else _mcp_servers(vault, settings)
    if mcp is not None:
        tools = tools + mcp.definitions()
    prompt, fit_notes = _fitted_prompt(vault, provider, session, text, now, settings, tools,
                                       prefix_messages)
    # The provider imports the SDK at its first call, after the prompt is built: `agent
    # chat` starts importing it in the background (agent.llm.preload), so the two overlap.
    turn = prompt.last_turn + 1
    staged = StagedVault(vault)
    messages = _with_prefix(prefix_messages, prompt.messages)
    window_end = len(messages) - 2 if len(messages) > 1 else -1
    ctx = registry.ToolContext(staged, session, now, settings, depth, provider, cancel=cancel,
                               readonly=readonly, messages=messages,
                               parent=f"{session} turn {turn}")

    usage = zero_usage()
    new: list[dict] = []          # the turn's messages after the user's: (role, content)
    streamed: list[str] = []      # text of the call in progress
    shown = {"any": False, "newline": True}
    reply = ""
    replies: list[str] = []       # replies that ended a call without tool calls
    texts: list[str] = []         # the text of every call, tool calls' too (a channel's answer)
    injected: list[tuple[str, int]] = []
    error = None
    interrupted = False
    used = models[0]
    calls_allowed = max(1, settings.max_iterations)

    def inject(target: dict) -> None:
        """The messages waiting in the inbox, added to `target` (the user message about
        to be sent) and to the transcript."""
        for said, source in inbox.drain():
            said, found = redact.door(vault.root, said)
            kept.extend(found)
            target["content"].append({"type": "text", "text": said})
            extra = {"injected": True}
            if source:
                extra["source"] = source
            new.append({"role": "user", "content": said, "extra": extra})
            injected.append((said, len(texts)))

    def sink(chunk: str) -> None:
        if cancel.is_set():
            raise Cancelled()
        streamed.append(chunk)
        if on_text is not None and chunk:
            if shown["any"] and not streamed[:-1] and not shown["newline"]:
                on_text("\n\n")
            on_text(chunk)
            shown["any"] = True
            shown["newline"] = chunk.endswith("\n")

    try:
        for call_no in range(calls_allowed):
            cancel.check()
            if inbox is not None and messages and messages[-1]["role"] == "user":
                if isinstance(messages[-1]["content"], str):
                    messages[-1]["content"] = [{"type": "text",
                                                "text": messages[-1]["content"]}]
                inject(messages[-1])
                if not messages[-1]["content"]:       # nothing came after all
                    messages.pop()
                    reply = _joined(replies)
                    break
            context.strip_marks(messages, window_end)
            context.mark_last(messages)
            streamed.clear()
            msg = cancellable(
                cancel, provider.stream, models[models.index(used):], on_text=sink,
                max_tokens=settings.max_tokens, system=prompt.system, messages=messages,
                tools=tools)
            used = msg.model
            add_usage(usage, msg.usage)
            blocks = [b for b in msg.content if not (b.get("type") == "text" and not b.get("text"))]
            streamed.clear()
            if blocks:
                # Separate lists: cache breakpoints go on the request, never the transcript.
                messages.append({"role": "assistant", "content": list(blocks)})
                new.append({"role": "assistant", "content": blocks})
            calls = [b for b in blocks if b.get("type") == "tool_use"]
            texts.append(_text_of(blocks))
            if not calls:
                replies.append(_text_of(blocks))
                if inbox is not None and call_no + 1 < calls_allowed and inbox.waiting():
                    # Messages came while the model wrote this reply: it is kept, and
                    # they are answered by the next call (injected at the loop's top).
                    if messages[-1]["role"] != "user":
                        messages.append({"role": "user", "content": []})
                    continue
                reply = _joined(replies)
                break
            results = run_tools(calls, ctx, on_tool=on_tool, mcp=mcp, on_tool_done=on_tool_done,
                                kept=kept)
            messages.append({"role": "user", "content": list(results)})
            new.append({"role": "user", "content": results})
        else:
            last = next((m for m in reversed(new) if m["role"] == "assistant"), None)
            reply = _joined(replies + [_text_of(last["content"]) if last else ""])
            error = (f"Stopped: the turn reached its limit of {settings.max_iterations} model "
                     f"calls (chat.max_iterations in agent.toml).")
    except KeyboardInterrupt as e:
        interrupted = True
        reply = _joined(replies + ["".join(streamed)])
        texts.append("".join(streamed))
        if getattr(e, "partial_usage", None) is not None:
            add_usage(usage, e.partial_usage)
        # Every sub-agent this turn started stops too, and saves what it did.
        cancel.set()
        cancel.settle()
    except ProviderError as e:
        error = str(e)
        reply = _joined(replies)
        log.warning("turn %s of %s: %s", turn, session, error)

    if (discard_reply is not None and error is None and not interrupted
            and reply.strip() == discard_reply and not staged.changed() and not ctx.runs
            and not injected):
        staged.release_claims()
        return TurnResult(reply, None, session, turn, usage, used)

    lines = [_line(turn, 0, now, "user", text)]
    for n, m in enumerate(new, 1):
        content = m["content"]
        if m["role"] == "assistant" and len(content) == 1 and content[0]["type"] == "text":
            content = content[0]["text"]
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
    if line_extra:
        lines[0].extra.update(line_extra)

    trailers = {"Session": session, "Turn": str(turn), "Model": used,
                "Tokens": tokens(usage)}
    error_line = " ".join(error.split())[:200] if error else None
    if interrupted:
        trailers["Interrupted"] = "yes"
    if error_line:
        trailers["Error"] = error_line
    if ctx.runs:
        trailers["Runs"] = ", ".join(ctx.runs)
    if injected:
        trailers["Injected"] = str(len(injected))
    trailers.update(extra_trailers or {})
    unsaved = None
    try:
        sha = persist(vault, staged, session, now, lines,
                      Change(kind, shorten(text), scope=scope or session, trailers=trailers),
                      before_commit=(lambda: on_save(error_line, interrupted)) if on_save
                      else None)
    except NotCommitted as e:
        # The reply was shown (streamed) already: it must not read as a saved turn.
        sha, unsaved = None, str(e)
        log.error("turn of %s: %s", session, unsaved)
    turn = lines[0].turn if lines else turn
    result = TurnResult(reply, sha, session, turn, usage, used,
                        f"{error} {unsaved}" if error and unsaved else error or unsaved,
                        interrupted, replies=texts, injected=injected)
    result.notes.extend(fit_notes)
    result.notes.extend(filter(None, [redact.summary(kept + redact.heard(vault))]))
    result.notes.extend(f"Warning: {w}" for w in prompt.warnings)
    result.notes.extend(staged.problems)
    result.notes.extend(mcp_notes + (mcp.problems() if mcp is not None else []))

    window = prompt.window + [line.to_dict() for line in lines]
    # The window's share of [chat] window_tokens: what the system prompt and tools leave
    # of it (this turn's message, counted apart in its own request, is window now).
    budget = (settings.window_tokens if prompt.window_budget is None else
              prompt.window_budget + min(len(text), settings.max_message_tokens * 4) // 4)
    budget = max(budget, 1)
    over = context.estimate_tokens(window, settings.max_message_tokens) > budget
    if not interrupted and not unsaved and \
            (over or backlog_of(vault.root, session) is not None):
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
    return result


def _fitted_prompt(vault, provider: Provider, session: str, text: str, now: datetime, settings,
                   tools: list[dict], prefix_messages) -> tuple[context.Prompt, list[str]]:
    """The turn's prompt, within `[chat] window_tokens` with the tools counted: a window
    that does not fit is compacted first (in chunks that each fit a request); if that
    fails, this request leaves out the window's oldest turns (they stay in the session)."""
    budget = settings.window_tokens - len(json.dumps(tools, ensure_ascii=False)) // 4
    if prefix_messages:
        budget -= len(json.dumps(prefix_messages, ensure_ascii=False)) // 4

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
