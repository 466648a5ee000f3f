"""Sub-agents: runs of the tool loop that a turn starts with `spawn_agent`.

A run is one turn (agent.chat.turn.run_turn) on its own session `agent/<run id>`, in
its own thread, with the parent's tools (less the writing ones when read-only) and
`depth` one more than its parent's. It commits on its own when it ends, as
`agent(<run id>): <its prompt>`, with trailers Run, Parent and Depth; the parent's
commit names the runs it started (trailer `Runs`). Runs of one turn run at once: the
vault lock is taken only to write and commit (inside run_turn), never across model
calls or commands.

Cancellation: every turn has a `Cancel`; a run's is a child of its parent turn's, and
every turn's is a child of the process-wide ROOT (set by SIGTERM in `agent serve`).
Setting one sets its whole subtree at once: a run then stops at its next step (its
model call returns at once, its command is killed), saves what it did, marked
interrupted, and commits.

While a run is going, `.agent/runs/<run id>.json` says so (with the pid), so
`agent agents` in another process lists it as running; what a run did is its session
file, whose first line carries the run's record (`"run": {...}`).
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from agent.chat.cancel import ROOT, Cancel, Cancelled, cancellable  # noqa: F401 (used by tools)
from agent.errors import UserError
from agent.llm.records import Message, Request, Text, ToolCall, ToolResult
from agent.stores import sessions
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

AGENT_CHANNEL = "agent"
RUNS_DIR = "runs"


class CancellableProvider:
    """The parent's provider, but a call returns at once (raising Cancelled) when the
    run is cancelled: the call goes on in a helper thread and its answer is dropped."""

    def __init__(self, provider, cancel: Cancel):
        self._provider = provider
        self._cancel = cancel

    def __getattr__(self, name):
        return getattr(self._provider, name)

    def _call(self, fn, *args, **kwargs):
        return cancellable(self._cancel, fn, *args, **kwargs)

    def stream(self, *args, on_text=None, **kwargs):
        cancel = self._cancel

        def guarded(chunk):
            if cancel.is_set():
                raise Cancelled()
            if on_text is not None:
                on_text(chunk)
        return self._call(self._provider.stream, *args, on_text=guarded, **kwargs)

    def create(self, *args, **kwargs):
        return self._call(self._provider.create, *args, **kwargs)


# ---- runs --------------------------------------------------------------------------------


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


@dataclass
class RunRecord:
    """What a run is, as saved on the first line of its session (`"run": {...}`)."""
    id: str
    parent: str                 # "<session> turn <n>" of the turn that started it
    depth: int
    context: str                # none | summary | full
    readonly: bool
    background: bool
    timeout: float
    started: str                # ISO time


@dataclass
class Run:
    record: RunRecord
    prompt: str
    cancel: Cancel
    status: str = "running"     # running | done | failed | interrupted
    reply: str = ""
    error: str | None = None
    sha: str | None = None
    ended: float | None = None
    background: bool = False    # moved to (or started in) the background
    progress: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def session(self) -> str:
        return f"{AGENT_CHANNEL}/{self.record.id}"

    def answer(self) -> str:
        """What spawn_agent and agent_output say of the run."""
        if self.status == "running":
            steps = ", ".join(self.progress[-10:]) or "no tool call yet"
            return (f"Run {self.id} is still running (steps so far: {steps}). Ask again with "
                    f"agent_output(run_id={self.id!r}) later.")
        head = {"done": "finished", "failed": "failed", "interrupted": "was interrupted"}[self.status]
        text = f"Run {self.id} {head}"
        if self.sha:
            text += f" (commit {self.sha[:7]})"
        text += "."
        if self.error:
            text += f"\nError: {self.error}"
        text += "\n\n" + (self.reply or "(no reply)")
        return text


RUNS: dict[str, Run] = {}
_runs_lock = threading.Lock()


def _marker(vault: Vault, run_id: str) -> Path:
    return vault.state / RUNS_DIR / f"{run_id}.json"


def _write_marker(vault: Vault, run: Run) -> None:
    from agent.fs import atomic

    data = {"pid": os.getpid(), "prompt": run.prompt[:200], **asdict(run.record)}
    atomic.write_json(_marker(vault, run.id), data)


def running_here() -> list[Run]:
    with _runs_lock:
        return [r for r in RUNS.values() if r.status == "running"]


def start(vault: Vault, provider, settings, *, prompt: str, parent_ctx, context: str, readonly: bool,
          background: bool, timeout: float, prefix: list[Message], now: datetime) -> Run:
    """Start a run in its own thread (it saves and commits itself when it ends)."""
    from agent.chat.turn import run_turn
    from agent.clock import now as clock

    record = RunRecord(new_run_id(now), parent_ctx.parent or parent_ctx.session,
                       parent_ctx.depth + 1, context, readonly, background, timeout,
                       now.isoformat(timespec="seconds"))
    parent_cancel = parent_ctx.cancel if isinstance(parent_ctx.cancel, Cancel) else ROOT
    run = Run(record, prompt, parent_cancel.child(track=True), background=background)
    with _runs_lock:
        RUNS[run.id] = run
    _write_marker(vault, run)

    def on_tool(name, data):
        run.progress.append(name)

    def work():
        try:
            result = run_turn(
                vault, provider, run.session, prompt, clock(),
                settings=settings, cancel=run.cancel, depth=record.depth, readonly=readonly,
                prefix_messages=prefix, on_tool=on_tool,
                kind="agent", scope=run.id,
                extra_trailers={"Run": run.id, "Parent": record.parent, "Depth": str(record.depth)},
                line_extra={"run": asdict(record)})
            run.reply, run.sha, run.error = result.reply, result.sha, result.error
            run.status = ("interrupted" if result.interrupted
                          else "failed" if result.error else "done")
        except BaseException as e:  # noqa: BLE001 - a bug must not vanish with the thread
            run.status, run.error = "failed", f"{type(e).__name__}: {e}"
        finally:
            run.ended = time.monotonic()
            try:
                _marker(vault, run.id).unlink()
            except OSError:
                pass
            run.done.set()
            run.cancel.finished.set()
    run.thread = threading.Thread(target=work, name=f"agent-{run.id}", daemon=True)
    run.thread.start()
    return run


def settle(run_ids: list[str], timeout: float = 3.0) -> list[str]:
    """Wait (bounded) until the runs named have saved; the ids still running after it."""
    deadline = time.monotonic() + timeout
    left = []
    for rid in run_ids:
        run = RUNS.get(rid)
        if run is None:
            continue
        if not run.done.wait(max(0.0, deadline - time.monotonic())):
            left.append(rid)
    return left


def wait_background(timeout: float | None = None) -> list[Run]:
    """Wait for every run of this process to end (Ctrl-C raises as usual)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        running = running_here()
        if not running:
            return []
        if deadline is not None and time.monotonic() >= deadline:
            return running
        running[0].done.wait(0.1)


def cancel_all() -> None:
    """Cancel every run of this process (and the turns they belong to)."""
    for run in running_here():
        run.cancel.set()


# ---- the parent's context for a run ---------------------------------------------------


def full_prefix(messages: list[Message] | None) -> list[Message]:
    """The parent's window without its reply in progress (its last assistant message
    holds the spawn_agent call, still unanswered), ending with a user message."""
    msgs = [Message(m.role, m.content if isinstance(m.content, str) else list(m.content))
            for m in (messages or [])]
    while msgs and msgs[-1].role == "assistant":
        msgs.pop()
    # A trailing user message of tool results answers an assistant call we dropped.
    while msgs and msgs[-1].role == "user" and _only_tool_results(msgs[-1]):
        msgs.pop()
        while msgs and msgs[-1].role == "assistant":
            msgs.pop()
    if msgs:
        msgs[-1].content = list(msgs[-1].blocks) + [Text(FULL_NOTE)]
    return msgs


FULL_NOTE = ("(The conversation above is your parent agent's. You are a sub-agent; your task "
             "follows.)")


def summary_prefix(summary: str) -> list[Message]:
    return [Message("user", [Text(
        f"Context from the conversation that started you (a summary):\n{summary}\n\n"
        f"You are a sub-agent; your task follows.")])]


def _only_tool_results(m: Message) -> bool:
    c = m.content
    return isinstance(c, list) and bool(c) and all(isinstance(b, ToolResult) for b in c)


def transcript_text(messages: list[Message], limit: int = 60_000) -> str:
    """The conversation as plain text for the summariser (tool calls named, results cut)."""
    out = []
    for m in messages or []:
        if isinstance(m.content, str):
            out.append(f"{m.role}: {m.content}")
            continue
        for b in m.content:
            if isinstance(b, Text) and b.text:
                out.append(f"{m.role}: {b.text}")
            elif isinstance(b, ToolCall):
                out.append(f"{m.role} called {b.name}({json.dumps(b.input)[:300]})")
            elif isinstance(b, ToolResult):
                body = b.content if isinstance(b.content, str) else \
                    json.dumps(sessions.stored(b.content))
                out.append(f"tool result: {body[:500]}")
    text = "\n".join(out)
    return text[-limit:]


SUMMARY_SYSTEM = ("You summarise a conversation for an assistant that will carry out one task "
                  "from it. Write at most 200 words: the user's goal, the facts, names, dates and "
                  "decisions the task may need. No preamble.")


def summarize(provider, messages: list[Message], settings) -> str:
    from agent.llm import models_for

    text = transcript_text(full_prefix(messages))
    if not text.strip():
        return ""
    return provider.create(models_for(None, settings),
                           Request([Message("user", text)], 600, system=SUMMARY_SYSTEM)
                           ).text.strip()


# ---- what `agent agents` shows ------------------------------------------------------------


@dataclass
class RunInfo:
    id: str
    status: str
    parent: str
    depth: int
    started: str
    prompt: str
    reply: str = ""
    error: str | None = None
    session_files: list[str] = field(default_factory=list)
    lines: list[dict] = field(default_factory=list)


def list_runs(vault: Vault) -> list[RunInfo]:
    """Every run of the vault: from session files under sessions/agent/, and the
    markers of runs still going (their pid alive), newest first."""
    from agent.stores import sessions

    found: dict[str, RunInfo] = {}
    base = vault.root / sessions.SESSIONS / AGENT_CHANNEL
    if base.is_dir():
        for d in sorted(base.iterdir()):
            if not d.is_dir():
                continue
            info = _from_session(vault, d.name)
            if info is not None:
                found[info.id] = info
    folder = vault.state / RUNS_DIR
    if folder.is_dir():
        for path in folder.glob("*.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            alive = _alive(int(data.get("pid", 0)))
            rid = str(data.get("id", path.stem))
            if rid in found and found[rid].status != "running":
                continue
            found[rid] = RunInfo(rid, "running" if alive else "interrupted",
                                 str(data.get("parent", "")), int(data.get("depth", 1)),
                                 str(data.get("started", "")), str(data.get("prompt", "")),
                                 error=None if alive else "its process ended before it saved")
    return sorted(found.values(), key=lambda r: (r.started, r.id), reverse=True)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _from_session(vault: Vault, run_id: str) -> RunInfo | None:
    from agent.stores import sessions

    key = f"{AGENT_CHANNEL}/{run_id}"
    try:
        lines = sessions.Session(vault.root, key).lines()
    except (OSError, UserError):        # a session file that is gone or damaged: no such run
        return None
    if not lines:
        return None
    first = lines[0]
    rec = first.get("run") or {}
    last_turn = [m for m in lines if m.get("turn") == first.get("turn")]
    status = "done"
    if any(m.get("interrupted") for m in last_turn):
        status = "interrupted"
    elif first.get("error"):
        status = "failed"
    reply = ""
    for m in reversed(last_turn):
        if m.get("role") == "assistant":
            c = m.get("content")
            reply = sessions.message_text(c, sep="")
            if reply:
                break
    content = first.get("content")
    prompt = content if isinstance(content, str) else ""
    return RunInfo(run_id, status, str(rec.get("parent", "")), int(rec.get("depth", 1)),
                   str(rec.get("started", first.get("ts", ""))), prompt, reply,
                   first.get("error"), lines=lines)


def find_run(vault: Vault, run_id: str) -> RunInfo | None:
    for info in list_runs(vault):
        if info.id == run_id:
            return info
    return None


def named_run(vault: Vault, run_id: str) -> RunInfo:
    """The run a person names (`agent agents show RUN`); a UserError naming the recent
    runs when there is none."""
    info = find_run(vault, run_id.strip())
    if info is None:
        known = [r.id for r in list_runs(vault)[:5]]
        hint = f" Recent runs: {', '.join(known)}." if known else ""
        raise UserError(f"No sub-agent run {run_id} in {vault.root}.{hint}")
    return info
