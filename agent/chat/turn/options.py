"""What a turn is asked to do (TurnOptions) and what it tells its caller (TurnResult)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from agent.llm.records import Message

if TYPE_CHECKING:
    from agent.chat.cancel import Cancel
    from agent.chat.inbox import Inbox
    from agent.config import Settings


@dataclass
class TurnOptions:
    """How a turn runs and what it saves, beyond the message it answers (see run_turn).

    run_turn takes these as an object (`options=`) or as keywords, which override it."""
    settings: Settings | None = None     # read from the vault if None
    model: str | None = None             # the first model to try (then the fallbacks)
    kind: str = "chat"                   # the commit's kind: chat, cron, heartbeat, agent
    on_text: Callable[[str], None] | None = None       # the reply as it streams
    on_tool: Callable[[str, Any], None] | None = None  # (name, input) as a tool call starts
    on_tool_done: Callable[[str, bool], None] | None = None   # (name, is_error) as it ends
    discard_reply: str | None = None     # a reply equal to it that changed nothing: no trace
    on_save: Callable[[str | None, bool], None] | None = None   # (error, interrupted), locked
    cancel: Cancel | None = None         # agent.chat.cancel's event; a new one if None
    depth: int = 0                       # how deep in sub-agents
    readonly: bool = False
    prefix_messages: list[Message] | None = None   # a parent's window (context=full)
    scope: str | None = None             # the commit's scope (default the session)
    extra_trailers: dict[str, str] | None = None
    line_extra: dict[str, Any] | None = None       # added to the first transcript line
    inbox: Inbox | None = None
    backlog: bool = True                 # archive a chunk of imported history after the
                                         # reply (serve archives it in the background)


@dataclass
class TurnResult:
    reply: str
    sha: str | None
    session: str
    turn: int
    # input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens
    usage: dict[str, int]
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
