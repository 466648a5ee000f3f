"""What every phase of a dream run shares: the run's options and settings, its clock,
the outcome it returns, and the record of its last failure.

The phases themselves live beside this module: `submit` (requests out, as a batch or
plain calls), `collect` (a batch's results taken into the record) and `apply` (the edits
committed with the cursor); `run` is the state machine that moves between them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agent.config import Settings, load_settings
from agent.dream import reading
from agent.dream.cost import estimate
from agent.dream.edits import FILES, Applied
import agent.dream.state as runstate
from agent.dream.state import RunState
from agent.fs import atomic, safe
from agent.llm import Provider
from agent.stores import archive

if TYPE_CHECKING:
    from agent.vault.repo import Vault

LAST_FAILURE = "dream-failure.json"


@dataclass
class DreamOutcome:
    """What a call to run_dream did.

    kind: "nothing", "submitted", "waiting", "committed", "no_changes", "failed",
    "dry_run" (and "canceled" from cancel_dream).
    """
    kind: str
    message: str
    sha: str | None = None
    report: Applied | None = None
    cursor: int | None = None          # the cursor the run started from
    first: int | None = None           # the first archive id it covers
    through: int | None = None         # the last archive id it covers
    model: str | None = None
    mode: str | None = None            # "batch" or "sync"
    batches: list[str] = field(default_factory=list)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)   # phase -> token counts
    cost: float | None = None          # estimated USD (batch prices for batches)
    diff: str = ""                     # for dry runs: what would be committed
    waited: float = 0.0                # seconds spent sleeping between polls
    branch: str | None = None          # the branch of edits waiting for review
    free: bool = False                 # the model answers on this machine
    duplicates: int = 0                # edits dropped: memory held them already

    @property
    def range(self) -> str:
        """The run's id, `first..through` (as its commit subject and the ledger say it)."""
        if self.through is None:
            return ""
        return f"{self.first if self.first is not None else self.through}..{self.through}"


@dataclass(eq=False)
class RunContext:
    """One call of run_dream: its options, the vault's settings, and what the phases
    share (a cache of session files, the run's archive entries, the time waited)."""
    vault: Vault
    provider: Provider
    now: datetime
    _: KW_ONLY
    wait: bool
    sync: bool
    dry_run: bool
    max_entries: int | None
    allow_shrink: bool
    progress: Callable[[str], None] | None
    poll_interval: float
    settings: Settings = field(init=False)
    waited: float = field(init=False, default=0.0)
    _t0: float = field(init=False, default_factory=time.monotonic)
    _sessions: reading.SessionCache | None = field(init=False, default=None)
    _entries: list[archive.Entry] | None = field(init=False, default=None)
    # Each text the run's requests send, scrubbed of secrets once (agent.redact):
    # every request of both phases repeats the memory files.
    scrubbed: dict[str, str] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.settings = load_settings(self.vault.root)

    def say(self, line: str) -> None:
        """A line of progress, to whoever asked for it."""
        if self.progress is not None:
            self.progress(line)

    def clock(self) -> datetime:
        """`now` moved on by the time this run has taken (for elapsed times)."""
        return self.now + timedelta(seconds=time.monotonic() - self._t0)

    def outcome(self, kind: str, message: str, state: RunState | None = None,
                **kw: Any) -> DreamOutcome:
        out = DreamOutcome(kind, message, waited=self.waited, **kw)
        if state is not None:
            out.cursor, out.first, out.through = state.cursor, state.first, state.through
            out.model, out.mode = state.model, state.mode
            out.batches = state.batch_ids()
            out.usage = dict(state.usage)
            out.free = self.on_this_machine(out.model or "")
            costs = [0.0 if out.free else
                     estimate(out.model or "", u, batch=bool((step := state.step(p)) and step.batch))
                     for p, u in out.usage.items()]
            known = [c for c in costs if c is not None]
            out.cost = None if len(known) != len(costs) or not costs else sum(known)
        return out

    def on_this_machine(self, model: str) -> bool:
        """Whether `model`'s provider answers on this machine (its tokens cost nothing)."""
        from agent.llm.spec import specs, split

        spec = specs(self.settings).get(split(model)[0])
        return spec is not None and spec.local

    # -- what the run reads

    def session_cache(self) -> reading.SessionCache:
        """One cache of session files for the run's checks, so each file is read once."""
        if self._sessions is None:
            self._sessions = reading.SessionCache(self.vault.root)
        return self._sessions

    def run_entries(self, state: RunState) -> list[archive.Entry]:
        """The archive entries the run sent to the model, loaded once."""
        if self._entries is None:
            wanted = set(state.entries or [])
            self._entries = [archive.load(self.vault.root, rel)
                             for entry_id, rel in archive.entry_ids(self.vault.root)
                             if entry_id in wanted]
        return self._entries

    def read_memory(self) -> dict[str, str]:
        """MEMORY.md and USER.md as the dream edits them: read strictly (a bad byte is
        refused, naming the file and line, rather than rewritten as U+FFFD)."""
        return {name: safe.read_text(self.vault.root, name) or "" for name in FILES}

    # -- failures

    def record_failure(self, state: RunState, message: str) -> None:
        atomic.write_json(self.vault.state / LAST_FAILURE,
                          {"at": self.clock().isoformat(), "cursor": state.cursor,
                           "first": state.first, "through": state.through,
                           "batches": state.batch_ids(), "message": message})

    def clear_failure(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.vault.state / LAST_FAILURE).unlink()

    def not_sent(self, state: RunState, phase: str, problem: str) -> DreamOutcome:
        """Nothing was accepted by the API: what is saved stays (the analyst's findings,
        if any), so the next run retries just this step."""
        self.record_failure(state, f"could not send the {phase} requests: {problem}")
        return self.outcome("failed", f"Could not send the {phase} request(s) for "
                            f"{state.span}: {problem}. Memory and cursor are unchanged; the "
                            f"next `agent dream` tries again.", state)

    def fail(self, state: RunState, why: str) -> DreamOutcome:
        """A finished batch's results are final, so the record goes: the next run starts over."""
        out = self.outcome("failed", f"The dream over {state.span} failed: {why}. Memory and "
                           f"cursor are unchanged; the next `agent dream` starts over from "
                           f"archive {state.first}.", state)
        runstate.clear(self.vault)
        self.record_failure(state, why)
        return out
