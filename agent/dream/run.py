"""Running a dream: the archive entries after the cursor go through the analyst and the
editor (as Message Batches, or plain calls), and the edits are committed with the
advanced cursor in one commit.

A run is a small state machine (agent.dream.state.RunState) saved in `.agent/dream.json`
before every wait, so an interrupted dream (Ctrl-C, kill -9, a reboot) picks up the same
batch instead of paying for another:

    analyst --ended--> analyst_done --editor submitted--> editor --ended--> editor_done --> commit

The vault lock is held only to apply and commit, never while waiting for the model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agent import redact
from agent.errors import UserError
from agent.fs import safe
from agent.stores import archive, arrivals, ledger
from agent.config import load_settings
import agent.dream.prompts as prompts
from agent.dream.cost import estimate
from agent.dream.edits import Applied, FILES, OpResult, conflict_lines
import agent.dream.proposals as proposals
from agent.dream import duplicates, learning
import agent.dream.state as runstate
from agent.dream.state import PHASES, DreamError, RunState, Step
from agent.llm import (Batching, BatchRequest, BatchResult, NotFound, Provider, ProviderError,
                       add_usage, zero_usage)
from agent.dream.provenance import proposal_records, records
from agent.stores import rejections
from agent.vault import branches
from agent.stores.memory import MEMORY, USER
from agent.fs import atomic
from agent.fs.pidlock import PidLock
from agent.vault.change import (BATCH, CURSOR, DUPLICATES, FACTS_ADDED, FACTS_REMOVED,
                                FACTS_UPDATED, MODEL, PROPOSED, RUN, TOKENS, Change, tokens)
from agent.vault import gitcmd
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

REPLIES_OF = prompts.REPLIES
LAST_FAILURE = "dream-failure.json"
LOCK = "dream.lock"


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
    usage: dict[str, dict] = field(default_factory=dict)   # phase -> token counts
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


# ---- local state ----------------------------------------------------------------------

load_state = runstate.load
save_state = runstate.save
clear_state = runstate.clear


@contextlib.contextmanager
def _dream_lock(vault: Vault):
    """Yields None when this process holds the dream lock, else the holder's pid."""
    lock = PidLock(vault.state / LOCK)
    if not lock.acquire():
        yield lock.holder or "?"
        return
    try:
        yield None
    finally:
        lock.release()


def dream_status(vault: Vault) -> dict:
    """Where the dream stands: cursor, newest archive id, entries waiting, what is in
    flight (or None) and the last failure (or None). Reads local files only."""
    root = vault.root
    done, cursor_problem = archive.read_what_parses(root)
    cursor = done.high
    ids = [i for i, _ in archive.entry_ids(root)]
    try:
        state = load_state(vault)
    except DreamError as e:
        flight = {"phase": "unknown", "problem": str(e)}
    else:
        flight = None
        if state is not None:
            step = state.current
            flight = {"phase": state.phase, "mode": state.mode, "first": state.first,
                      "through": state.through, "entries": len(state.entries),
                      "started": state.started, "model": state.model,
                      "batches": state.batch_ids(), "batch": step.batch if step else None,
                      "requests": len(step.requests) if step else 0,
                      "previewed": state.previewed}
    try:
        failure = json.loads((vault.state / LAST_FAILURE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        failure = None
    from agent.fs import safe
    texts = []
    for name in FILES:
        try:
            texts.append(safe.read_text(root, name, errors="replace") or "")
        except UserError:
            texts.append("")
    return {"cursor": cursor, "newest": ids[-1] if ids else 0,
            "waiting": sum(1 for i in ids if i not in done), "in_flight": flight,
            "review": len(ledger.proposals(ledger.read(root))),
            "last_failure": failure, "conflicts": prompts.conflicts(*texts),
            "cursor_problem": cursor_problem}


# ---- running --------------------------------------------------------------------------

def run_dream(vault: Vault, provider: Provider, now: datetime, *, wait: bool = True, sync: bool = False,
              dry_run: bool = False, max_entries: int | None = None, allow_shrink: bool = False,
              progress=None, poll_interval: float = 5.0) -> DreamOutcome:
    """Consolidate the archive entries after the cursor into MEMORY.md and USER.md.

    `provider` is called only when a model is needed (made with `make_provider(lazy=True)`,
    runs that need none need no key). wait=False submits, or checks the batch in flight
    once and moves it on (analyst ended -> submit the editor; editor ended -> apply and commit),
    and returns. dry_run computes the edits and commits nothing; the finished result
    stays in flight, so the next run applies it without calling the model again.
    """
    return _Run(vault, provider, now, wait=wait, sync=sync, dry_run=dry_run,
                max_entries=max_entries, allow_shrink=allow_shrink, progress=progress,
                poll_interval=poll_interval).go()


def cancel_dream(vault: Vault, provider: Provider) -> DreamOutcome:
    """Cancel the dream in flight: its batch is canceled, memory and cursor stay as they are."""
    try:
        state = load_state(vault)
    except DreamError:
        clear_state(vault)
        return DreamOutcome("canceled", "Discarded an unreadable record of a dream in flight.")
    if state is None:
        return DreamOutcome("nothing", "No dream in flight.")
    phase = state.phase
    batch = state.current.batch if state.current else None
    note = ""
    if batch:
        try:
            batches = provider.batching(state.model)
            if batches is None:
                raise NotFound(f"No batch API for {state.model}")
            batches.batch_cancel(batch)
            note = f" Canceled batch {batch}."
        except NotFound:
            note = f" Batch {batch} is gone already."
    clear_state(vault)
    return DreamOutcome("canceled", f"Canceled the dream over {state.span} ({phase}).{note} "
                        f"Memory and cursor are unchanged.", cursor=state.cursor,
                        through=state.through, batches=state.batch_ids())


class _Run:
    def __init__(self, vault: Vault, provider: Provider, now, *, wait, sync, dry_run, max_entries,
                 allow_shrink, progress, poll_interval):
        self.vault = vault
        self.provider = provider
        self.now = now
        self.wait = wait
        self.sync = sync
        self.dry_run = dry_run
        self.max_entries = max_entries
        self.allow_shrink = allow_shrink
        self.say = progress or (lambda line: None)
        self.poll_interval = poll_interval
        self.settings = load_settings(vault.root)
        self.waited = 0.0
        self._t0 = time.monotonic()
        self._sessions: prompts.SessionCache | None = None
        self._entries: list[archive.Entry] | None = None

    # -- helpers

    def clock(self) -> datetime:
        """`now` moved on by the time this run has taken (for elapsed times)."""
        return self.now + timedelta(seconds=time.monotonic() - self._t0)

    def outcome(self, kind: str, message: str, state: RunState | None = None,
                **kw) -> DreamOutcome:
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
            out.cost = None if any(c is None for c in costs) or not costs else sum(costs)
        return out

    def on_this_machine(self, model: str) -> bool:
        """Whether `model`'s provider answers on this machine (its tokens cost nothing)."""
        from agent.llm.spec import specs, split

        spec = specs(self.settings).get(split(model)[0])
        return spec is not None and spec.local

    # -- the state machine

    def go(self) -> DreamOutcome:
        with _dream_lock(self.vault) as holder:
            if holder is not None:
                return self.outcome("waiting", f"Another `agent dream` (pid {holder}) is working "
                                    f"on this vault; it will finish the dream.")
            state = load_state(self.vault)
            if state is None:
                state = self.start()
                if isinstance(state, DreamOutcome):
                    return state
                if not self.wait and state.phase == "analyst":
                    return self.submitted(state, "analyst")
            return self.advance(state)

    def start(self) -> RunState | DreamOutcome:
        root = self.vault.root
        done = archive.read_consolidated(root)
        sel = prompts.select(root, done, self.max_entries or RUN_ENTRIES)
        cursor = sel.cursor
        if sel.empty:
            texts = self.read_memory()
            if prompts.conflicts(texts[MEMORY], texts[USER]):
                return self.settle_only(sel, texts)
            return self.outcome("nothing", f"Nothing to dream: no archive entries after the "
                                f"cursor ({cursor}).", cursor=cursor, through=cursor)
        if not sel.entries:
            return self.skip_only(sel)
        raw_tokens = self.settings.dream_raw_tokens
        cache = prompts.SessionCache(root)
        asked = self.asked(sel, cache) if self.explicit else None
        if asked is not None:
            sel.passed = [e for e in sel.entries if not asked[e.id]]
            sel.entries = [e for e in sel.entries if asked[e.id]]
            if not sel.entries:
                return self.skip_only(sel)
        passed = [e.id for e in sel.passed]
        rendered = [(e.id, prompts.render_entry(e, cache, raw_tokens,
                                                asked[e.id] if asked is not None else None))
                    for e in sel.entries]
        chunks = prompts.chunk(rendered, self.settings.dream_chunk_tokens)
        texts = self.read_memory()
        state = RunState(
            phase="analyst", cursor=sel.cursor, through=sel.through,
            model=self.settings.dream_model, started=self.now.isoformat(),
            today=prompts.today_of(self.now),
            max_tokens=self.settings.dream_max_tokens,
            entries=[e.id for e in sel.entries], skipped=[e.id for e in sel.skipped],
            passed=passed,
            asks=[a for e in sel.entries for a in asked[e.id]] if asked is not None else None,
            memory_text=texts[MEMORY], user_text=texts[USER],
            mode="sync" if self.sync else "batch")
        memory = self.memory_prompt(state)
        rejected = rejections.read(root)
        requests = [BatchRequest(c.custom_id, state.model,
                                 prompts.analyst_request(memory, c, state.today,
                                                         state.max_tokens, rejected,
                                                         explicit=asked is not None))
                    for c in chunks]
        skipped = f", {len(sel.skipped)} from heartbeat/dream sessions set aside" if sel.skipped else ""
        if passed:
            skipped += f", {_plural(len(passed), 'entry', 'entries')} passed over (nothing " \
                       f"asked to be remembered)"
        self.say(f"Dreaming over archive {sel.first}..{sel.through}: "
                 f"{_plural(len(sel.entries), 'entry', 'entries')} in "
                 f"{_plural(len(requests), 'analyst request')}{skipped}.")
        return self.submit(state, "analyst", requests)

    def settle_only(self, sel, texts: dict[str, str]) -> RunState | DreamOutcome:
        """No archive entry waits, but the memory files hold sync-conflict blocks: only
        the editor runs, asked to settle them."""
        n = prompts.conflicts(texts[MEMORY], texts[USER])
        state = RunState(
            phase="analyst_done", cursor=sel.cursor, through=sel.cursor,
            model=self.settings.dream_model, started=self.now.isoformat(),
            today=prompts.today_of(self.now),
            max_tokens=self.settings.dream_max_tokens,
            memory_text=texts[MEMORY], user_text=texts[USER], findings=[],
            mode="sync" if self.sync else "batch")
        self.say(f"No archive entries wait; settling {_plural(n, 'sync conflict')} in memory.")
        return state

    def advance(self, state: RunState) -> DreamOutcome:
        while True:
            phase = state.phase
            if phase in PHASES and state.mode == "sync":
                sent = self.send_sync(state, phase)
                if isinstance(sent, DreamOutcome):
                    return sent
                continue
            if phase in PHASES:
                collected = self.collect(state, phase)
                if isinstance(collected, DreamOutcome):
                    return collected
                if collected is None:
                    return self.waiting(state, phase)
                failure = self.take_results(state, phase, collected)
                if failure:
                    return self.fail(state, failure)
            elif phase == "analyst_done":
                clashes = prompts.conflicts(state.memory_text, state.user_text)
                if not state.findings and not clashes:
                    state.phase, state.ops = "editor_done", []
                    save_state(self.vault, state)
                    continue
                memory = self.memory_prompt(state)
                first, last = (state.entries[0], state.entries[-1]) if state.entries else \
                    (state.cursor, state.cursor)
                request = prompts.editor_request(
                    memory, state.findings or [], first, last, state.today,
                    self.settings.memory_max_lines, len(state.memory_text.splitlines()),
                    state.max_tokens, conflicts=clashes)
                cid = f"editor-{first}-{last}" if state.entries else "editor-conflicts"
                state = self.submit(state, "editor", [BatchRequest(cid, state.model, request)])
                if isinstance(state, DreamOutcome):
                    return state
                if state.phase == "editor" and not self.wait:
                    return self.submitted(state, "editor")
            elif phase == "editor_done":
                return self.apply(state)

    def guard_input(self, state: RunState, texts: dict[str, str]) -> dict:
        """What the dream's guard needs (see apply_ops): the lines of each memory file a
        person wrote (git blame: any author but the agent), and the text of the run's
        archive entries, the only evidence that may quote such a line."""
        agent_email = self.vault.agent_identity().email
        hand: dict[str, set[str]] = {}
        for name in FILES:
            lines = texts.get(name, "").splitlines()
            authors = gitcmd.line_authors(self.vault, name) if lines else []
            if authors is None or len(authors) != len(lines):
                hand[name] = set(lines)          # unknown: every line counts as the person's
            else:
                hand[name] = {line for line, who in zip(lines, authors) if who != agent_email}
        cache = self.session_cache()
        evidence = [prompts.render_entry(e, cache, self.settings.dream_raw_tokens)
                    for e in self.run_entries(state)]
        return {"hand": hand, "evidence": "\n".join(evidence)}

    def session_cache(self) -> prompts.SessionCache:
        """One cache of session files for the run's checks, so each file is read once."""
        if self._sessions is None:
            self._sessions = prompts.SessionCache(self.vault.root)
        return self._sessions

    def run_entries(self, state: RunState) -> list[archive.Entry]:
        """The archive entries the run sent to the model, loaded once."""
        if self._entries is None:
            wanted = set(state.entries or [])
            self._entries = [archive.load(self.vault.root, rel)
                             for entry_id, rel in archive.entry_ids(self.vault.root)
                             if entry_id in wanted]
        return self._entries

    def memory_prompt(self, state: RunState) -> str:
        return prompts.memory_block(state.memory_text, state.user_text)

    def read_memory(self) -> dict[str, str]:
        """MEMORY.md and USER.md as the dream edits them: read strictly (a bad byte is
        refused, naming the file and line, rather than rewritten as U+FFFD)."""
        from agent.fs import safe
        return {name: safe.read_text(self.vault.root, name) or "" for name in FILES}

    # -- submitting and collecting

    def submit(self, state: RunState, phase: str,
               requests: list[BatchRequest]) -> RunState | DreamOutcome:
        """Send a phase's requests: a batch (state saved at once) where the model's
        provider has a batch API, else plain calls."""
        if redact.enabled(self.vault.root):
            # What the agent wrote passed the filter then; what a person typed into
            # MEMORY.md or a sync brought (a transcript, an entry) did not: it does here.
            requests = [dataclasses.replace(r, request=redact.scrub_value(r.request))
                        for r in requests]
        ids = [r.custom_id for r in requests]
        if state.mode == "batch" and not self.sync:
            batch = None
            try:
                batches = self.provider.batching(state.model)
                if batches is None:
                    from agent.llm.spec import split
                    self.say(f"The provider {split(state.model)[0]} has no Batches API. "
                             f"Sending the requests as plain calls, "
                             f"{self.settings.dream_concurrency} at a time.")
                else:
                    batch = batches.batch_create(requests)
            except NotFound:
                self.say("This endpoint has no Message Batches; using plain Messages "
                         "calls (full price).")
            except ProviderError as e:
                return self.not_sent(state, phase, e.problem())
            if batch is not None:
                state.set_step(phase, Step(ids, batch.id, self.clock().isoformat()))
                state.phase = phase
                save_state(self.vault, state)
                self.say(f"Submitted the {phase} batch {batch.id} ({len(requests)} "
                         f"request{'s' * (len(requests) != 1)}).")
                return state
        state.mode = "sync"
        state.set_step(phase, Step(ids, params={r.custom_id: runstate.request_json(r)
                                               for r in requests}))
        state.phase = phase
        save_state(self.vault, state)      # a kill from here on resumes with what is left
        return self.send_sync(state, phase)

    def send_sync(self, state: RunState, phase: str) -> RunState | DreamOutcome:
        """The phase's requests not answered yet, as plain calls ([dream] concurrency at
        once), each reply saved as it comes; then the phase's results are taken."""
        step = state.step(phase)
        todo = [cid for cid in step.requests if cid not in step.done]
        if todo:
            self.say(f"Sending the {phase} request{'s' * (len(todo) != 1)} ({len(todo)}"
                     f"{f' of {len(step.requests)}' if len(todo) != len(step.requests) else ''})"
                     f" as plain calls.")
        unsent = self.call_sync(state, step, todo, REPLIES_OF[phase])
        if unsent and not step.done:
            # Nothing came back: the record is what it was before this phase was sent.
            if phase == "analyst":
                clear_state(self.vault)
            else:
                state.phase, state.editor = "analyst_done", None
                save_state(self.vault, state)
        if unsent:
            return self.not_sent(state, phase, "; ".join(f"{cid}: {problem}"
                                                         for cid, problem in unsent.items()))
        results = {cid: BatchResult("succeeded", message=runstate.reply_of(m))
                   for cid, m in step.done.items()}
        failure = self.take_results(state, phase, results)
        if failure:
            return self.fail(state, failure)
        return state

    def call_sync(self, state: RunState, step: Step, todo: list[str],
                  parse) -> dict[str, str]:
        """Send `todo` (custom ids of the step), a few at a time; each reply is saved in
        the state as it arrives. Returns custom_id -> why the API refused it (a refused
        call did nothing, so it is sent again by the next run)."""
        lock = threading.Lock()

        def one(cid: str) -> tuple[str, str | None]:
            model, request = runstate.request_of(step.params[cid])
            try:
                msg = self.provider.create(model, request, parse=parse)
            except ProviderError as e:
                return cid, e.problem()
            with lock:
                step.done[cid] = runstate.reply_json(msg)
                save_state(self.vault, state)
            return cid, None

        workers = max(1, min(self.settings.dream_concurrency, len(todo)))
        if workers == 1:
            answers = [one(cid) for cid in todo]
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                answers = list(pool.map(one, todo))
        return {cid: problem for cid, problem in answers if problem is not None}

    def collect(self, state: RunState,
                phase: str) -> dict[str, BatchResult] | None | DreamOutcome:
        """The results of the phase's batch once it ended (polling while `wait`), else None."""
        step = state.step(phase)
        batch_id = step.batch
        submitted = datetime.fromisoformat(step.submitted) if step.submitted else self.now
        while True:
            try:
                batches = self.batches(state)
                batch = batches.batch_retrieve(batch_id)
            except NotFound:
                return self.fail(state, f"the {phase} batch {batch_id} is not known to the API "
                                        f"(deleted, or made with another key)")
            except ProviderError as e:
                return self.unreachable(state, phase, e.problem())
            elapsed = str(self.clock() - submitted).split(".")[0]
            self.say(f"{phase} batch {batch_id}: {batch.describe().replace(':', ';', 1)} "
                     f"[{elapsed} elapsed]")
            if batch.ended:
                break
            if not self.wait:
                return None
            time.sleep(self.poll_interval)
            self.waited += self.poll_interval
        try:
            return batches.batch_results(batch_id)
        except ProviderError as e:
            return self.unreachable(state, phase, e.problem())

    def batches(self, state: RunState) -> Batching:
        """The batch API the run's batch went to (NotFound when the model's provider
        has none now)."""
        batches = self.provider.batching(state.model)
        if batches is None:
            raise NotFound(f"No batch API for {state.model}")
        return batches

    def unreachable(self, state: RunState, phase: str, problem: str) -> DreamOutcome:
        """The batch could not be checked this time; it stays saved for the next run."""
        batch_id = state.step(phase).batch
        if not self.wait:
            return self.outcome("waiting", f"Could not check the {phase} batch {batch_id} "
                                f"({problem}); it is saved and will be checked again.", state)
        raise DreamError(f"Could not check the {phase} batch {batch_id} ({problem}). It is "
                         f"saved: run `agent dream` again to pick it up.")

    def take_results(self, state: RunState, phase: str,
                     results: dict[str, BatchResult]) -> str | None:
        """Record a phase's parsed results in the state (saved), or say what went wrong."""
        reply_model = REPLIES_OF[phase]
        usage = zero_usage()
        parsed, problems = [], []
        for cid in state.step(phase).requests:
            result = results.get(cid)
            kind = result.type if result is not None else "missing"
            if kind != "succeeded" or result.message is None:
                detail = {"missing": "no result came back", "expired": "expired before it ran "
                          "(a batch has 24 hours)", "canceled": "was canceled"}.get(kind)
                if detail is None:
                    detail = f"errored: {result.error}"
                problems.append(f"{cid} {detail}")
                continue
            message = result.message
            add_usage(usage, message.usage)
            try:
                parsed.append(prompts.parse_reply(message, reply_model))
            except prompts.ReplyError as e:
                problems.append(f"{cid}: {e}")
        state.usage[phase] = usage
        if problems:
            return "; ".join(problems)
        step = state.step(phase)
        step.params, step.done = {}, {}      # taken: the file need not carry them on
        if phase == "analyst":
            state.findings = prompts.clean_findings([f for obj in parsed for f in obj["findings"]])
            if state.asks is not None:
                # Explicit-only learning: what the asks do not state never reaches the editor.
                state.findings, _ = learning.keep_findings(state.findings, state.asks)
            state.phase = "analyst_done"
        else:
            state.ops = parsed[0]["ops"]
            state.phase = "editor_done"
        save_state(self.vault, state)
        return None

    # -- outcomes

    def submitted(self, state: RunState, phase: str) -> DreamOutcome:
        batch = state.step(phase).batch
        return self.outcome("submitted", f"Submitted the {phase} batch {batch} for "
                            f"{state.span}; the next `agent dream` (or `agent serve`) picks "
                            f"it up.", state)

    def waiting(self, state: RunState, phase: str) -> DreamOutcome:
        return self.outcome("waiting", f"The {phase} batch {state.step(phase).batch} for "
                            f"{state.span} is still running.", state)

    def not_sent(self, state: RunState, phase: str, problem: str) -> DreamOutcome:
        """Nothing was accepted by the API: what is saved stays (the analyst's findings,
        if any), so the next run retries just this step."""
        self._record_failure(state, f"could not send the {phase} requests: {problem}")
        return self.outcome("failed", f"Could not send the {phase} request(s) for "
                            f"{state.span}: {problem}. Memory and cursor are unchanged; the "
                            f"next `agent dream` tries again.", state)

    def fail(self, state: RunState, why: str) -> DreamOutcome:
        """A finished batch's results are final, so the record goes: the next run starts over."""
        out = self.outcome("failed", f"The dream over {state.span} failed: {why}. Memory and "
                           f"cursor are unchanged; the next `agent dream` starts over from "
                           f"archive {state.first}.", state)
        clear_state(self.vault)
        self._record_failure(state, why)
        return out

    def _record_failure(self, state: RunState, message: str) -> None:
        atomic.write_json(self.vault.state / LAST_FAILURE,
                          {"at": self.clock().isoformat(), "cursor": state.cursor,
                           "first": state.first, "through": state.through, "batches": state.batch_ids(),
                           "message": message})

    def skip_only(self, sel) -> DreamOutcome:
        """Only heartbeat/dream entries wait, or (explicit learning) entries in which
        nobody asked to remember anything: the cursor moves past them, no model call."""
        span = {"cursor": sel.cursor, "first": sel.first, "through": sel.through}
        why = (f"The {len(sel.skipped)} entr{'ies' if len(sel.skipped) != 1 else 'y'} after the "
               f"cursor come from heartbeat or dream sessions, or cover messages other "
               f"entries cover already: they are not dream input.") if sel.skipped else ""
        if sel.passed:
            why = (why + " " + passed_over(len(sel.passed))).strip()
        if self.dry_run:
            return self.outcome("dry_run", f"{why} A run would move the cursor to "
                                f"{sel.through}; nothing else.", **span)
        with self.vault.locked():
            done = archive.read_consolidated(self.vault.root)
            if all(i in done for i in sel.ids):
                return self.outcome("nothing", "The cursor moved meanwhile; nothing to do.")
            self.vault.write_text(archive.CURSOR, done.add(sel.ids).render())
            sha = self.vault.commit(Change("dream", f"no changes (archive {sel.first}..{sel.through})",
                                           body=why,
                                           trailers={RUN: f"{sel.first}..{sel.through}",
                                                     CURSOR: f"{sel.cursor} -> {sel.through}",
                                                     **counts(0, 0, 0, 0)}))
        self._clear_failure()
        return self.outcome("no_changes", f"{why} The cursor moves to {sel.through}.", sha=sha,
                            **span)

    def edits(self, state: RunState, texts: dict[str, str]) -> proposals.Split:
        """The run's edits against `texts`: what lands on main, what waits for review
        (`[dream] review`), and (in the report) what was dropped before either."""
        root = self.vault.root
        ops, dropped = proposals.screen(state.ops or [], rejections.read(root),
                                        ledger.proposals(ledger.read(root)))
        ops, more = self.screen_learning(state, texts, ops)
        dropped += more
        # What another assistant's export brought in is a person's history told by a
        # third party: every edit it leads to waits for review, whatever the setting.
        mode = "all" if imported(root, state.entries) else self.settings.dream_review
        sp = proposals.split(texts, ops, mode,
                             allow_shrink=self.allow_shrink,
                             max_lines=self.settings.memory_max_lines,
                             **self.guard_input(state, texts))
        sp.duplicates = sum(1 for d in dropped if d.kind == "duplicate")
        sp.unasked = sum(1 for d in dropped if d.kind == "unasked")
        if state.passed:
            sp.main.notes.insert(0, passed_over(len(state.passed)))
        sp.main.results.extend(sp.proposed)
        sp.main.results.extend(OpResult(str(d.op.get("op", "")), str(d.op.get("file", "")),
                                        str(d.op.get("section", "")), str(d.op.get("old", "")),
                                        str(d.op.get("new", "")), str(d.op.get("reason", "")),
                                        status="dropped", why=d.why) for d in dropped)
        return sp

    @property
    def explicit(self) -> bool:
        return self.settings.memory_learn == "explicit"

    def asked(self, sel, cache: prompts.SessionCache) -> dict[int, list[str]]:
        """What the person asked to remember in each of the selected entries."""
        return {e.id: learning.requests((o for _, o in prompts.covered_lines(cache, e.sources())),
                                        e.session)
                for e in sel.entries}

    def recalled(self, state: RunState) -> list[str]:
        """The lines the run's conversations read back from memory (tool results)."""
        cache = self.session_cache()
        out: list[str] = []
        for e in self.run_entries(state):
            out.extend(prompts.recalled([o for _, o in prompts.covered_lines(cache, e.sources())]))
        return out

    def screen_learning(self, state: RunState, texts: dict[str, str],
                        ops: list[dict]) -> tuple[list[dict], list[proposals.Dropped]]:
        """The ops worth keeping: under explicit learning only what the person asked to
        keep, and never a fact memory or a recalled memory holds already."""
        held = duplicates.Held(duplicates.memory_lines(texts))
        recalled = duplicates.Held(self.recalled(state))
        asked = learning.asked_words(state.asks) if state.asks is not None else None
        # Each file's conflict blocks are read once, not once an operation.
        blocks = {name: conflict_lines(text) for name, text in texts.items()}
        kept, dropped = [], []
        for op in ops:
            kind, new = str(op.get("op", "")), str(op.get("new", ""))
            if asked is not None:
                why = learning.unasked(op, asked, _in_conflict(blocks, op))
                if why:
                    dropped.append(proposals.Dropped(op, why, "unasked"))
                    continue
            # Settling a sync-conflict block keeps one of its versions: a line it holds.
            if kind in ("add", "update") and new.strip() and not _in_conflict(blocks, op):
                same = held.restated(new)
                if same is not None:
                    dropped.append(proposals.Dropped(
                        op, f"memory holds it already: {same.strip()}", "duplicate"))
                    continue
                was = recalled.restated(new)
                if was is not None:
                    dropped.append(proposals.Dropped(
                        op, f"recalled from memory in the conversation: {was.strip()}",
                        "duplicate"))
                    continue
            kept.append(op)
        return kept, dropped

    def apply(self, state: RunState) -> DreamOutcome:
        first, through = state.first, state.through
        if self.dry_run:
            # Read without the lock: taking it would commit pending hand edits.
            texts = self.read_memory()
            applied = self.edits(state, texts).main
            state.previewed = True
            save_state(self.vault, state)
            return self.outcome("dry_run", f"Dry run over archive {first}..{through}: nothing "
                                f"was changed. `agent dream` applies this result, `agent dream "
                                f"--cancel` discards it.", state, report=applied,
                                diff=applied.diff())
        with self.vault.locked():
            # Another dream (here, or on another machine and brought in by a sync) may
            # have consolidated entries meanwhile: the ops still apply against the files
            # as they are now (an op whose line changed is skipped), and the record is a
            # set, so only a run whose entries are all consolidated already is moot.
            done = archive.read_consolidated(self.vault.root)
            if state.ids and all(i in done for i in state.ids):
                clear_state(self.vault)
                return self.outcome("nothing", f"The dream over archive {first}..{through} was "
                                    f"committed already.", state)
            texts = self.read_memory()
            sp = self.edits(state, texts)
            applied = sp.main
            for name in applied.changed:
                self.vault.write_text(name, applied.texts[name])
            at = self.clock().isoformat(timespec="seconds")
            # Which findings and archive entries produced each edit, for `agent why`, and
            # what waits for review, for `agent review` (and so no later run proposes it
            # again while it waits).
            recs = records(state, applied, at) + proposal_records(state, sp.proposed, at)
            if recs:
                # Noted first: a proposal of this machine's own is never taken for one
                # that came from elsewhere (agent.stores.arrivals).
                arrivals.made_here(self.vault.state, recs)
                self.vault.append_lines(ledger.LEDGER, [ledger.dumps(r) for r in recs])
            self.vault.write_text(archive.CURSOR, done.add(state.ids).render())
            out = self.outcome("committed" if applied.changed or sp.proposed else "no_changes",
                               "", state, report=applied)
            t = trailers(state, out)
            if sp.duplicates:
                t[DUPLICATES] = str(sp.duplicates)
            out.duplicates = sp.duplicates
            change = commit_change(state, applied, t)
            out.sha = self.vault.commit(change)
            if sp.proposed:
                out.branch = proposals.branch_of(state.run)
                branches.commit_files(
                    self.vault, out.branch, out.sha,
                    {n: sp.branch[n] for n in FILES if sp.branch[n] != applied.texts[n]},
                    Change("dream", f"propose {_plural(len(sp.proposed), 'edit')} for review "
                                    f"({state.span})",
                           body="\n".join(applied.describe()), trailers={RUN: state.run}))
        clear_state(self.vault)
        self._clear_failure()
        out.message = change.head
        return out

    def _clear_failure(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.vault.state / LAST_FAILURE).unlink()


# The most archive entries one run consolidates: the editor reads every finding of the
# run in one request, which a run over a ten-year export (10,000 entries and more) would
# take past the model's context window. `agent dream` runs again until none wait.
RUN_ENTRIES = 1000


def imported(root, ids: list[int]) -> bool:
    """Whether any of the archive entries `ids` comes from an imported conversation
    (agent import: sessions under `import/`, or lines a JSONL import brought into any
    session, which the entry's `imported: true` says); only each entry's head is read."""
    want = set(ids)
    for entry_id, rel in archive.entry_ids(root):
        if entry_id not in want:
            continue
        try:
            fd, _ = safe.open_file(root, rel)
        except (OSError, safe.UnsafeFile):
            continue
        with os.fdopen(fd, "rb") as f:
            head = f.read(1024)
        if re.search(rb"(?m)^(?:session: ['\"]?import/|imported: true\s*$)", head):
            return True
    return False


def passed_over(n: int) -> str:
    return (f"Passed over {_plural(n, 'entry', 'entries')}: nobody asked to remember "
            f"anything in {'them' if n != 1 else 'it'} ([memory] learn = explicit).")


def _in_conflict(blocks: dict[str, set[str]], op: dict) -> bool:
    """Whether `op` quotes a line inside a sync-conflict block of its file (`blocks`:
    each file's conflict_lines)."""
    old = str(op.get("old", "")).rstrip()
    return bool(old) and old in blocks.get(str(op.get("file", "")), ())


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else words or word + 's'}"


def commit_change(state: RunState, applied: Applied, trailers: dict[str, str]) -> Change:
    """The dream's commit: what changed in memory (the subject), why (the body)."""
    span = state.span
    settled = f", {_plural(applied.settled, 'sync conflict')} settled" if applied.settled else ""
    if applied.proposed:
        settled += f", {applied.proposed} proposed"
    if applied.changed and not state.ids:
        subject = f"settle {_plural(applied.settled, 'sync conflict')} in memory"
    elif applied.changed or applied.proposed:
        subject = (f"+{_plural(applied.added, 'fact')}, {applied.updated} updated, "
                   f"{applied.removed} removed{settled} ({span})")
    else:
        subject = f"no changes ({span})"
    lines = applied.describe()
    if not applied.changed and not applied.proposed:
        found = len(state.findings or [])
        lines.insert(0, f"Nothing to change in memory ({_plural(found, 'finding')}, "
                        f"{_plural(len(state.ops or []), 'operation')}); the cursor moves "
                        f"to {state.through}.")
    if state.skipped:
        lines.append(f"Set aside (heartbeat/dream sessions, or messages other entries cover): "
                     f"{', '.join(str(i) for i in state.skipped)}")
    if applied.proposed:
        lines.append(f"{_plural(applied.proposed, 'edit')} wait for review on branch "
                     f"{proposals.branch_of(state.run)}: `agent review` lists them.")
    if applied.dropped:
        lines.append(f"Dropped before review: {applied.dropped} (rejected before, waiting "
                     f"already, held in memory already, or not asked for).")
    lines.extend(applied.notes)
    return Change("dream", subject, body="\n".join(lines),
                  trailers={**trailers, **counts(applied.added, applied.updated,
                                                 applied.removed, applied.proposed)})


def counts(added: int, updated: int, removed: int, proposed: int) -> dict[str, str]:
    """The trailers that count a dream's edits (agent stats reads them)."""
    return {FACTS_ADDED: str(added), FACTS_UPDATED: str(updated),
            FACTS_REMOVED: str(removed), PROPOSED: str(proposed)}


def trailers(state: RunState, out: DreamOutcome) -> dict[str, str]:
    t = {RUN: state.run, CURSOR: f"{state.cursor} -> {state.through}",
         BATCH: ", ".join(out.batches) if out.batches else "none (plain Messages calls)",
         MODEL: state.model}
    if out.usage:
        t[TOKENS] = tokens(out.usage)
    return t
