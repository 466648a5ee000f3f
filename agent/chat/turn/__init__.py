"""One turn of a conversation: prompt, tool loop, one commit.

    result = run_turn(vault, provider, "cli/default", "plan the Kyoto trip", now())

1. The prompt is built (agent.chat.prompt) from the vault's files and the session window,
   fitted to its budget (`window`).
2. The model is called with the tools (`loop`); the tool calls of one reply run at once
   (one thread each: `toolcalls`); their results go back to the model, until a reply
   without tool calls or `settings.max_iterations` model calls. The reply streams as it
   comes (`display`), watched for a runaway or the turn's time (agent.chat.bounds).
3. Under the vault lock, and only then (`save`): the tools' staged file changes
   (agent.vault.staged), the turn's transcript lines (`record`), one commit
   `chat(cli/default): <the message, shortened>` with trailers Session, Turn, Model,
   Tokens. Then the search index is brought up to date.
4. If the window is over its budget, its oldest part is compacted (agent.chat.compact).

The model is never called with the lock held. An API failure still saves the user's
message (and whatever the turn did before it) with the error; Ctrl-C saves the user's
message and the partial reply, marked `"interrupted": true`.

The parts: `options` (TurnOptions, TurnResult), `state` (one turn's state as it goes),
`loop`, `toolcalls`, `display`, `window`, `record`, `save`.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent.chat.turn import record
from agent.chat.turn.loop import begin, loop
from agent.chat.turn.options import TurnOptions, TurnResult
from agent.chat.turn.save import NotCommitted, SavedThenInterrupted, persist
from agent.chat.turn.toolcalls import run_tools
from agent.chat.turn.window import compact_after
from agent.llm import Provider

if TYPE_CHECKING:
    from agent.vault.repo import Vault

__all__ = ["NotCommitted", "SavedThenInterrupted", "TurnOptions", "TurnResult", "persist",
           "run_tools", "run_turn"]


def run_turn(vault: Vault, provider: Provider, session: str, text: str, now: datetime,
             options: TurnOptions | None = None, **keywords: Any) -> TurnResult:
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
    turn = begin(vault, provider, session, text, now, opts)
    loop(turn)
    if record.leaves_no_trace(turn):
        turn.staged.release_claims()
        return TurnResult(turn.reply, None, session, turn.number, turn.usage, turn.used)
    result = record.saved(turn, record.transcript(turn))
    if not result.interrupted and not turn.unsaved:
        compact_after(turn, result)
    return result
