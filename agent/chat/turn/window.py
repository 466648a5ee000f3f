"""The turn's window of conversation within its budget: fitted before the model call
(compacted first when it does not fit), a sub-agent's parent window put before it, and
compacted after the turn when it has grown over `[chat] window_tokens`."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING

from agent.chat import prompt as context
from agent.chat.compact import (CompactError, backlog_bytes, backlog_of, compact_backlog,
                                compact_session, compact_until)
from agent.chat.turn.options import TurnResult
from agent.chat.turn.state import Turn
from agent.config import Settings
from agent.llm import Provider
from agent.llm.records import Message, Tool
from agent.llm.size import chars

if TYPE_CHECKING:
    from agent.vault.repo import Vault


def with_prefix(prefix: list[Message] | None, messages: list[Message]) -> list[Message]:
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


def fitted_prompt(vault: Vault, provider: Provider, session: str, text: str, now: datetime,
                  settings: Settings, tools: list[Tool],
                  prefix_messages: list[Message] | None) -> tuple[context.Prompt, list[str]]:
    """The turn's prompt, within `[chat] window_tokens` with the tools counted: a window
    that does not fit is compacted first (in chunks that each fit a request); if that
    fails, this request leaves out the window's oldest turns (they stay in the session)."""
    budget = settings.window_tokens - chars(tools) // 4
    if prefix_messages:
        budget -= chars(prefix_messages) // 4

    def build() -> context.Prompt:
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


def compact_after(turn: Turn, result: TurnResult) -> None:
    """If the window is now over its budget (or imported history waits), archive its
    oldest part; a failure is a note, and the conversation is kept."""
    vault, provider, session, now, settings = (turn.vault, turn.provider, turn.session,
                                               turn.now, turn.settings)
    prompt, text = turn.prompt, turn.text
    window = prompt.window + [line.to_dict() for line in turn.lines]
    # The window's share of [chat] window_tokens: what the system prompt and tools leave
    # of it (this turn's message, counted apart in its own request, is window now).
    budget = (settings.window_tokens if prompt.window_budget is None else
              prompt.window_budget + min(len(text), settings.max_message_tokens * 4) // 4)
    budget = max(budget, 1)
    over = context.estimate_tokens(window, settings.max_message_tokens) > budget
    if not over and (not turn.opts.backlog or backlog_of(vault.root, session) is None):
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
