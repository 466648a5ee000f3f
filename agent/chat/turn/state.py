"""One turn's state as it goes: what its steps (loop, record, window) share."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent.chat import prompt as context
from agent.chat.bounds import Cut, Watch
from agent.chat.cancel import Cancel
from agent.chat.tools import registry
from agent.chat.turn.display import Display
from agent.chat.turn.options import TurnOptions
from agent.config import Settings
from agent.llm import Provider, zero_usage
from agent.llm.records import Message, Tool
from agent.stores import sessions
from agent.vault.staged import StagedVault

if TYPE_CHECKING:
    from agent.chat.mcp_client.client import Hub
    from agent.vault.repo import Vault


@dataclass
class Turn:
    """One turn's state as it goes: what run_turn's steps share."""
    vault: Vault
    provider: Provider
    session: str
    text: str
    now: datetime
    opts: TurnOptions
    settings: Settings
    kept: list[str]               # what redact.door held back (keys pasted or read)
    models: list[str]
    tools: list[Tool]
    mcp: Hub | None
    mcp_notes: list[str]
    prompt: context.Prompt
    fit_notes: list[str]
    number: int                   # the turn's number (renumbered under the lock if taken)
    staged: StagedVault
    messages: list[Message]       # the request's messages
    window_end: int
    ctx: registry.ToolContext
    cancel: Cancel
    usage: dict[str, int] = field(default_factory=zero_usage)
    # The turn's messages after the user's: {"role", "content", and "extra" for a user's}.
    new: list[dict[str, Any]] = field(default_factory=list)
    streamed: list[str] = field(default_factory=list)    # text of the call in progress
    display: Display = field(default_factory=lambda: Display(None))
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
