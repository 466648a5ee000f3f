"""The turn's tool loop: the model called with the tools, the tools it asks for run, their
results sent back, until a reply without tool calls, the limit of calls, a bound of the
turn (agent.chat.bounds), Ctrl-C or an API failure; the messages sent meanwhile (the
inbox) joining before each call, and the reply streamed as it comes."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent import redact
from agent.chat.bounds import Cut, Watch
from agent.chat.cancel import Cancelled, cancellable, new_turn_cancel
from agent.chat import prompt as context
from agent.chat.tools import registry
from agent.chat.turn.display import Display
from agent.chat.turn.options import TurnOptions
from agent.chat.turn.state import Turn
from agent.chat.turn.toolcalls import forced_tool, mcp_servers, run_tools
from agent.chat.turn.window import fitted_prompt, with_prefix
from agent.config import load_settings
from agent.llm import Provider, ProviderError, add_usage, models_for
from agent.llm.records import (MAX_TOKENS, STOPPED, Interrupted, Message, Request, Text,
                               ToolCall, text_of)
from agent.stores import sessions
from agent.stores.used import Used
from agent.vault.gitstate import head_from_files, object_format
from agent.vault.staged import StagedVault

if TYPE_CHECKING:
    from agent.chat.inbox import Inbox
    from agent.vault.repo import Vault

log = logging.getLogger("agent.chat.turn")


def _text_of(blocks: Any) -> str:
    return blocks if isinstance(blocks, str) else text_of(blocks)


def _joined(replies: list[str]) -> str:
    return "\n\n".join(r for r in replies if r)


def begin(vault: Vault, provider: Provider, session: str, text: str, now: datetime,
          opts: TurnOptions) -> Turn:
    """The turn's state with the prompt built, the tools listed and the MCP servers started."""
    cancel = opts.cancel if opts.cancel is not None else new_turn_cancel()
    settings = opts.settings or load_settings(vault.root)
    text, kept = redact.door(vault.root, text)    # a pasted key reaches neither vault nor model
    sessions.check_key(session)
    models = models_for(opts.model, settings)
    tools = registry.definitions(settings=settings, readonly=opts.readonly)
    # MCP servers' tools may change anything outside the vault: not for a read-only run.
    mcp, mcp_notes = (None, []) if opts.readonly else mcp_servers(vault, settings)
    if mcp is not None:
        tools = tools + mcp.definitions()
    prompt, fit_notes = fitted_prompt(vault, provider, session, text, now, settings, tools,
                                      opts.prefix_messages)
    # The provider imports the SDK at its first call, after the prompt is built: `agent
    # chat` starts importing it in the background (agent.llm.preload), so the two overlap.
    number = prompt.last_turn + 1
    staged = StagedVault(vault)
    messages = with_prefix(opts.prefix_messages, prompt.messages)
    ctx = registry.ToolContext(staged, session, now, settings, opts.depth, provider,
                               cancel=cancel, readonly=opts.readonly, messages=messages,
                               parent=f"{session} turn {number}",
                               asked=text if opts.kind == "chat" and not opts.depth else "",
                               used=Used.from_prompt(prompt.seen, prompt.retrieved,
                                                     vault.root, head_from_files(vault.root),
                                                     object_format(vault.root)))
    return Turn(vault, provider, session, text, now, opts, settings, kept, models, tools,
                mcp, mcp_notes, prompt, fit_notes, number, staged, messages,
                len(messages) - 2 if len(messages) > 1 else -1, ctx, cancel, used=models[0],
                force=forced_tool(text, opts, settings, tools),
                watch=Watch(getattr(settings, "turn_timeout", None)),
                display=Display(opts.on_text))


def inject(turn: Turn, inbox: Inbox, target: Message) -> None:
    """The messages waiting in `inbox`, added to `target` (the user message about to be
    sent) and to the transcript."""
    for said, source in inbox.drain():
        said, found = redact.door(turn.vault.root, said)
        turn.kept.extend(found)
        target.blocks.append(Text(said))
        turn.ctx.asked += f"\n{said}" if turn.ctx.asked else ""
        extra: dict[str, Any] = {"injected": True}
        if source:
            extra["source"] = source
        turn.new.append({"role": "user", "content": said, "extra": extra})
        turn.injected.append((said, len(turn.texts)))


def sink(turn: Turn, chunk: str) -> None:
    """A chunk of the reply as it streams: kept, watched for a bound, shown."""
    if turn.cancel.is_set():
        raise Cancelled()
    turn.streamed.append(chunk)
    try:
        turn.watch.heard(chunk)
    except Cut as e:
        # The reply repeats itself, or the time is up: the provider ends the stream
        # and returns what was written (stop_reason STOPPED).
        turn.cut = e
        raise
    turn.display.show(chunk, first_of_call=len(turn.streamed) == 1)


def loop(turn: Turn) -> None:
    """Call the model and run its tools until a reply without tool calls, the limit
    of calls, Ctrl-C or an API failure (the last two recorded, not raised)."""
    calls_allowed = max(1, turn.settings.max_iterations)
    try:
        for call_no in range(calls_allowed):
            if call(turn, more_allowed=call_no + 1 < calls_allowed):
                break
        else:
            last = next((m for m in reversed(turn.new) if m["role"] == "assistant"), None)
            turn.reply = _joined(turn.replies + [_text_of(last["content"]) if last else ""])
            turn.error = (f"Stopped: the turn reached its limit of "
                          f"{turn.settings.max_iterations} model calls "
                          f"(chat.max_iterations in agent.toml).")
    except Cut as e:
        # Out of time between two model calls (one cut mid-stream ends in call()).
        turn.cut = e
        turn.reply = _joined(turn.replies)
        turn.cancel.set()           # its sub-agents stop too, and save what they did
        turn.cancel.settle()
    except KeyboardInterrupt as e:
        turn.interrupted = True
        turn.reply = _joined(turn.replies + ["".join(turn.streamed)])
        turn.texts.append("".join(turn.streamed))
        if isinstance(e, Interrupted):      # what the provider counted of the reply
            add_usage(turn.usage, e.usage)
        # Every sub-agent this turn started stops too, and saves what it did.
        turn.cancel.set()
        turn.cancel.settle()
    except ProviderError as e:
        turn.error = str(e)
        turn.reply = _joined(turn.replies)
        log.warning("turn %s of %s: %s", turn.number, turn.session, turn.error)


def call(turn: Turn, more_allowed: bool) -> bool:
    """One model call and the tools it asks for; True when the turn's reply is done."""
    messages = turn.messages
    turn.cancel.check()
    turn.watch.check()
    inbox = turn.opts.inbox
    if inbox is not None and messages and messages[-1].role == "user":
        if isinstance(messages[-1].content, str):
            messages[-1].content = [Text(messages[-1].content)]
        inject(turn, inbox, messages[-1])
        if not messages[-1].content:          # nothing came after all
            messages.pop()
            turn.reply = _joined(turn.replies)
            return True
    context.strip_marks(messages, turn.window_end)
    context.mark_last(messages)
    turn.streamed.clear()
    models = turn.models
    request = Request(messages, turn.settings.max_tokens, system=turn.prompt.system,
                      tools=turn.tools, tool_choice=turn.force, deadline=turn.watch.deadline())
    turn.watch.reset()
    turn.force = None
    msg = cancellable(turn.cancel, turn.provider.stream, models[models.index(turn.used):],
                      request, on_text=lambda chunk: sink(turn, chunk))
    if msg.model != turn.used and msg.model not in turn.fell_back:
        # The model asked for failed (its server down, killed mid-reply, overloaded):
        # what the person saw streamed may have been its start, then the next one's.
        turn.fell_back.append(msg.model)
        turn.fell_back_from.append(turn.used)
    turn.used = msg.model
    add_usage(turn.usage, msg.usage)
    blocks = [b for b in msg.content if not (isinstance(b, Text) and not b.text)]
    turn.streamed.clear()
    if blocks:
        # Separate lists: cache breakpoints go on the request, never the transcript.
        messages.append(Message("assistant", list(blocks)))
        turn.new.append({"role": "assistant", "content": blocks})
    calls = [b for b in blocks if isinstance(b, ToolCall)]
    turn.texts.append(_text_of(blocks))
    if msg.stop_reason == STOPPED:
        if turn.cut is None:
            # Stopped with nothing said of why: the request's deadline shut the stream.
            turn.cut = turn.watch.timed_out()
        # A bound of the turn stopped the stream (sink kept which): what was written
        # is the turn's reply.
        turn.replies.append(_text_of(blocks))
        turn.reply = _joined(turn.replies)
        return True
    if not calls:
        turn.replies.append(_text_of(blocks))
        if inbox is not None and more_allowed and inbox.waiting():
            # Messages came while the model wrote this reply: it is kept, and
            # they are answered by the next call (injected at the loop's top).
            if messages[-1].role != "user":
                messages.append(Message("user", []))
            return False
        if msg.stop_reason == MAX_TOKENS:
            turn.cut = Cut("max_tokens", f"Cut: the reply reached its limit of "
                                         f"{turn.settings.max_tokens:,} tokens ([model] "
                                         f"max_tokens in agent.toml).")
        turn.reply = _joined(turn.replies)
        return True
    results = run_tools(calls, turn.ctx, on_tool=turn.opts.on_tool, mcp=turn.mcp,
                        on_tool_done=turn.opts.on_tool_done, kept=turn.kept)
    messages.append(Message("user", list(results)))
    turn.new.append({"role": "user", "content": results})
    return False
