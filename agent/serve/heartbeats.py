"""Heartbeats in serve: the part of the scheduler that runs the due ones (running one and
recording it in `.agent/heartbeat-state.json` is agent/ops/runs.py).

Only serve and `agent heartbeat run` write that derived state, and only after a run
(under the vault lock); a pass that finds nothing due takes no lock.
"""

from __future__ import annotations

import json
from datetime import datetime

from agent.errors import UserError
from agent.ops.runs import execute_heartbeat, record_heartbeat
from agent.serve.turns import log, log_outcome
from agent.serve.watch import Watch
from agent.stores import heartbeatfile
from agent.fs import atomic
from agent.vault.change import Change
from agent.vault.repo import Vault
from agent.vault import gitcmd


class Heartbeats:
    """The scheduler's heartbeat part: heartbeat/ as last read, and its due beats run."""

    def __init__(self, server):
        self.server = server
        self.vault: Vault = server.vault
        self.beats: list[heartbeatfile.Heartbeat] = []
        self.problems: list[str] = []
        self.state: dict = {}
        self.watch = Watch(lambda: heartbeatfile.fingerprint(self.vault.root), seen=None)

    def reload(self, now: datetime, *, first: bool = False) -> None:
        """Re-read heartbeat/ when a file in it was added, removed or edited."""
        if not self.watch.changed():
            return
        beats, problems = heartbeatfile.load_all(self.vault.root)
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
        if not gitcmd.has_remote(self.vault):
            return
        names = []
        try:
            with self.vault.locked():
                beats, _ = heartbeatfile.load_all(self.vault.root)
                for hb in beats:
                    if hb.enabled and hb.host is None:
                        text = heartbeatfile.with_field(self.vault.read_text(hb.path), "host", here,
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
        self.beats, _ = heartbeatfile.load_all(self.vault.root)
        self.watch.mark()

    def run(self, now: datetime) -> None:
        """Run every heartbeat due at `now` (inside its active hours)."""
        if not self.beats:
            return
        server = self.server
        state = heartbeatfile.read_state(self.vault.state)
        before = json.dumps(state, sort_keys=True)
        due = []
        here = self.vault.host()
        for hb in self.beats:
            if not hb.enabled or not hb.runs_on(here):
                continue
            e = heartbeatfile.entry(state, hb, now)
            if heartbeatfile.is_due(hb, heartbeatfile.due_time(e), now):
                due.append(hb)
        if json.dumps(state, sort_keys=True) != before:
            with self.vault.locked():
                atomic.write_json(self.vault.state / heartbeatfile.STATE_FILE, state)
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
                due = heartbeatfile.due_time(self.state[hb.name])
                if due is not None:
                    times.append(max(due, heartbeatfile.next_active(hb, max(due, now))))
        return times
