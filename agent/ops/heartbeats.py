"""Heartbeats (heartbeat/<name>.md): add, enable, disable and list them. The one
implementation `agent heartbeat` and the web page call; they only render.

A heartbeat is a file a person edits: enabling one changes its `enabled:` line and
nothing else (agent.stores.heartbeatfile keeps the rest byte for byte). Running one now
(`run_now`) is a turn, recorded as its run (agent.ops.runs, as serve runs them).

    hb, sha = add(vault, "inbox", "check my inbox note", every="2h")
    listing = list_heartbeats(vault)       # each with its next and last run
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, NamedTuple

from agent.errors import did_you_mean
from agent.stores import heartbeatfile
from agent.stores.heartbeatfile import Heartbeat, HeartbeatError
from agent.vault.change import Change
from agent.vault import gitcmd
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.ops.runs import Outcome
    from agent.llm import Provider
    from agent.vault.repo import Vault


class Done(NamedTuple):
    """A heartbeat as a change left it, and the commit (None: nothing needed changing)."""
    heartbeat: Heartbeat
    sha: str | None


@dataclass
class Listed:
    """One heartbeat as `list_heartbeats` shows it."""
    heartbeat: Heartbeat
    next: datetime | None        # its next run, when serve has one for it
    why_not: str | None          # "disabled", or "when serve starts" (new or edited since)
    state: dict[str, Any]                  # serve's record: last_run, last_status, last_error, delivery


@dataclass
class Listing:
    heartbeats: list[Listed] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)    # files skipped, each with why


def _state_of(state: dict[str, Any], name: str) -> dict[str, Any]:
    e = state.get(name)
    return e if isinstance(e, dict) else {}


def list_heartbeats(vault: Vault) -> Listing:
    """Every heartbeat with serve's record of it (.agent/heartbeats.json)."""
    beats, problems = heartbeatfile.load_all(vault.root)
    state = heartbeatfile.read_state(vault.state)
    out = Listing(problems=problems)
    for hb in beats:
        e = _state_of(state, hb.name)
        if not hb.enabled:
            nxt, why = None, "disabled"
        elif e.get("sig") != hb.signature():
            nxt, why = None, "when serve starts"
        else:
            nxt, why = heartbeatfile.due_time(e), None
        out.heartbeats.append(Listed(hb, nxt, why, e))
    return out


def find(vault: Vault, name: str) -> Heartbeat:
    """The heartbeat called `name`; HeartbeatError naming its file's problem, or the
    heartbeats there are."""
    beats, problems = heartbeatfile.load_all(vault.root)
    hb = next((b for b in beats if b.name == name), None)
    if hb is None:
        broken = [p for p in problems if p.startswith(f"{heartbeatfile.FOLDER}/{name}.md")]
        if broken:
            raise HeartbeatError(broken[0])
        known = ", ".join(b.name for b in beats) or "none"
        raise HeartbeatError(f"No heartbeat {name!r} in heartbeat/."
                             f"{did_you_mean(name, [b.name for b in beats])} "
                             f"Heartbeats: {known}")
    return hb


def set_enabled(vault: Vault, name: str, enabled: bool) -> Done:
    """Enable or disable a heartbeat: its `enabled:` line, nothing else. On a vault
    synced between machines, one enabled here runs here only (its `host:`)."""
    with vault.locked():
        hb = find(vault, name)
        if hb.enabled == enabled:
            return Done(hb, None)
        text = heartbeatfile.with_enabled(vault.read_text(hb.path), enabled, hb.path)
        if enabled and hb.host is None and gitcmd.has_remote(vault):
            text = heartbeatfile.with_field(text, "host", vault.host(), hb.path)
        vault.write_text(hb.path, text)
        word = "enable" if enabled else "disable"
        return Done(hb, vault.commit(Change("heartbeat", f'{word} "{hb.name}"')))


def enable(vault: Vault, name: str) -> Done:
    return set_enabled(vault, name, True)


def disable(vault: Vault, name: str) -> Done:
    return set_enabled(vault, name, False)


def add(vault: Vault, name: str, message: str, *, every: str | None = None, cron: str | None = None,
        active_hours: str | None = None, tz: str | None = None, enabled: bool = True,
        deliver: str | None = None) -> Done:
    """Write heartbeat/<name>.md (every interval or on a cron expression) and commit it;
    HeartbeatError when one has that name already."""
    if (every is None) == (cron is None):
        raise HeartbeatError("Give exactly one of --every DURATION or --cron EXPR.")
    rel = f"{heartbeatfile.FOLDER}/{name}.md"
    with vault.locked():
        text = heartbeatfile.new_file(name, message, every=every, cron=cron, active_hours=active_hours,
                              tz=tz, enabled=enabled, deliver=deliver, host=vault.host())
        beats, _ = heartbeatfile.load_all(vault.root)
        if (vault.root / rel).exists() or any(b.name == name for b in beats):
            raise HeartbeatError(f"A heartbeat named {name!r} exists already ({rel}); "
                                 f"choose another name or edit it: agent edit {rel}")
        vault.write_text(rel, text)
        hb = heartbeatfile.parse({"name": name, **({"every": every} if every else {"cron": cron}),
                          "enabled": enabled, "active_hours": active_hours, "tz": tz,
                          "deliver": deliver}, message, rel)
        sha = vault.commit(Change("heartbeat", f'add "{name}" ({hb.describe()})'))
    return Done(hb, sha)


def run_now(vault: Vault, provider: Provider, name: str, now: datetime, *,
            on_text: Callable[[str], None] | None = None) -> Outcome:
    """Run heartbeat `name` at once (even disabled or outside its active hours); it
    counts as its run. The agent.ops.runs.Outcome: "quiet" when it answered
    HEARTBEAT_OK and changed nothing (no commit, no transcript)."""
    from agent.ops import runs

    return runs.run_heartbeat_now(vault, provider, find(vault, name), now, on_text=on_text)
