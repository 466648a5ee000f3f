"""Heartbeats in serve: running one, recording it in `.agent/heartbeat-state.json`, and
the part of the scheduler that runs the due ones.

Only serve and `agent heartbeat run` write that derived state, and only after a run
(under the vault lock); a pass that finds nothing due takes no lock.
"""

from __future__ import annotations

import json
from datetime import datetime

from agent import schedule as sched
from agent.config import load_settings
from agent.errors import UserError
from agent.llm import Provider
from agent.serve.delivery import pending_for
from agent.serve.turns import Outcome, log, log_outcome, run_turn
from agent.serve.watch import Watch
from agent.stores import heartbeat as hbmod
from agent.fs import atomic
from agent.vault.change import Change
from agent.vault.repo import Vault


def execute_heartbeat(vault: Vault, provider: Provider, hb: hbmod.Heartbeat, now: datetime, *,
                      settings=None, on_text=None) -> Outcome:
    """Run a heartbeat's prompt; a reply of HEARTBEAT_OK with no change leaves no trace."""
    result, failure = run_turn(vault, provider, hb.session, hb.message(), now, kind="heartbeat",
                               settings=settings, on_text=on_text, discard_reply=hbmod.OK)
    if result is None:
        return Outcome("interrupted" if failure == "interrupted" else "error", None, failure)
    if getattr(result, "interrupted", False):
        return Outcome("interrupted", result.sha, "stopped before the reply was complete")
    if getattr(result, "error", None):
        return Outcome("error", result.sha, str(result.error))
    reply = (result.reply or "").strip()
    if result.sha is None and reply == hbmod.OK:
        return Outcome("quiet", None, None, reply)
    return Outcome("ok", result.sha, None, reply)


def record_heartbeat(vault: Vault, hb: hbmod.Heartbeat, now: datetime, outcome: Outcome,
                     *, advance: bool = True) -> None:
    with vault.locked():
        state = hbmod.read_state(vault.state)
        e = hbmod.entry(state, hb, now)
        e["last_run"] = sched.iso(now)
        e["last_status"] = outcome.status
        e["last_error"] = outcome.error
        if hb.deliver:
            record = pending_for(hb.deliver, now, outcome.status, outcome.reply)
            if record is not None:
                e["delivery"] = record
        if advance:
            e["next_run"] = sched.iso(hbmod.after_run(hb, now))
        atomic.write_json(vault.state / hbmod.STATE_FILE, state)


def run_heartbeat_now(vault: Vault, provider: Provider, hb: hbmod.Heartbeat, now: datetime, *,
                      on_text=None) -> Outcome:
    """`agent heartbeat run`: run one heartbeat at once; it counts as its run, so serve
    runs it next one interval (or its next cron time) from now."""
    outcome = execute_heartbeat(vault, provider, hb, now, settings=load_settings(vault.root),
                                on_text=on_text)
    record_heartbeat(vault, hb, now, outcome)
    return outcome


class Heartbeats:
    """The scheduler's heartbeat part: heartbeat/ as last read, and its due beats run."""

    def __init__(self, server):
        self.server = server
        self.vault: Vault = server.vault
        self.beats: list[hbmod.Heartbeat] = []
        self.problems: list[str] = []
        self.state: dict = {}
        self.watch = Watch(lambda: hbmod.fingerprint(self.vault.root), seen=None)

    def reload(self, now: datetime, *, first: bool = False) -> None:
        """Re-read heartbeat/ when a file in it was added, removed or edited."""
        if not self.watch.changed():
            return
        beats, problems = hbmod.load_all(self.vault.root)
        for p in problems:
            if p not in self.problems:
                log.error("heartbeat skipped: %s", p)
        self.problems = problems

        def shown(bs):
            return [f"{b.name} ({b.describe()}{'' if b.enabled else ', disabled'})" for b in bs]
        if not first and shown(beats) != shown(self.beats):
            log.info("heartbeat/ changed: %s", ", ".join(shown(beats)) or "none")
        self.beats = beats
        self._claim()

    def _claim(self) -> None:
        """In a vault with a remote (synced between machines), enabled heartbeats that
        name no machine become this machine's (one commit); those of other machines are
        left to them. A vault on one machine only gets no such commit."""
        here = self.vault.host()
        if not any(hb.enabled and hb.host is None for hb in self.beats):
            return
        if not self.vault.has_remote():
            return
        names = []
        try:
            with self.vault.locked():
                beats, _ = hbmod.load_all(self.vault.root)
                for hb in beats:
                    if hb.enabled and hb.host is None:
                        text = hbmod.with_field(self.vault.read_text(hb.path), "host", here,
                                                hb.path)
                        self.vault.write_text(hb.path, text)
                        names.append(hb.name)
                sha = self.vault.commit(Change(
                    "heartbeat", f"run {', '.join(names)} on {here}",
                    body="Enabled heartbeats that named no machine run on this one only "
                         "from now on (their `host:` line says which).")) if names else None
        except UserError as e:
            log.error("heartbeat: could not give %s to %s: %s", ", ".join(names) or "them",
                      here, e)
            return
        if sha:
            log.info("heartbeat: %s now run%s on %s (%s)", ", ".join(names),
                     "s" if len(names) == 1 else "", here, sha[:7])
        self.beats, _ = hbmod.load_all(self.vault.root)
        self.watch.mark()

    def run(self, now: datetime) -> None:
        """Run every heartbeat due at `now` (inside its active hours)."""
        if not self.beats:
            return
        server = self.server
        state = hbmod.read_state(self.vault.state)
        before = json.dumps(state, sort_keys=True)
        due = []
        here = self.vault.host()
        for hb in self.beats:
            if not hb.enabled or not hb.runs_on(here):
                continue
            e = hbmod.entry(state, hb, now)
            if hbmod.is_due(hb, hbmod.due_time(e), now):
                due.append(hb)
        if json.dumps(state, sort_keys=True) != before:
            with self.vault.locked():
                atomic.write_json(self.vault.state / hbmod.STATE_FILE, state)
        self.state = state
        for hb in due:
            if server.stopping:
                return
            t = server.clock_or(now)
            log.info("heartbeat %s: running", hb.name)
            with server.working(hb.session):
                outcome = execute_heartbeat(self.vault, server.provider, hb, t,
                                            settings=server.settings)
            server.runs += 1
            record_heartbeat(self.vault, hb, t, outcome)
            log_outcome(f"heartbeat {hb.name}", outcome)
            if hb.deliver and outcome.status == "ok":
                server.outbox.deliver_heartbeat(hb.name, server.clock_or(t))

    def wake_times(self, now: datetime) -> list[datetime]:
        times = []
        here = self.vault.host()
        for hb in self.beats:
            if hb.enabled and hb.runs_on(here) and isinstance(self.state.get(hb.name), dict):
                due = hbmod.due_time(self.state[hb.name])
                if due is not None:
                    times.append(max(due, hbmod.next_active(hb, max(due, now))))
        return times
