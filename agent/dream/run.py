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
import json
from datetime import datetime
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import agent.dream.state as runstate
from agent.dream import learning, prompts, reading
from agent.dream.apply import apply, counts, passed_over
from agent.dream.collect import collect, take_results
from agent.dream.context import LAST_FAILURE, DreamOutcome, RunContext
from agent.oneline import plural
from agent.dream.edits import FILES
from agent.dream.state import PHASES, DreamError, RunState
from agent.dream.submit import REPLIES_OF, send_sync, submit
from agent.errors import UserError
from agent.fs import safe
from agent.fs.pidlock import PidLock
from agent.llm import BatchRequest, NotFound, Provider
from agent.stores import archive, ledger, rejections
from agent.stores.memory import MEMORY, USER
from agent.vault.change import CURSOR, RUN, Change

if TYPE_CHECKING:
    from agent.vault.repo import Vault

__all__ = ["DreamError", "DreamOutcome", "LAST_FAILURE", "REPLIES_OF", "cancel_dream",
           "dream_status", "load_state", "run_dream"]

LOCK = "dream.lock"

# The most archive entries one run consolidates: the editor reads every finding of the
# run in one request, which a run over a ten-year export (10,000 entries and more) would
# take past the model's context window. `agent dream` runs again until none wait.
RUN_ENTRIES = 1000


# ---- local state ----------------------------------------------------------------------

load_state = runstate.load
save_state = runstate.save
clear_state = runstate.clear


@contextlib.contextmanager
def _dream_lock(vault: Vault) -> Iterator[str | None]:
    """Yields None when this process holds the dream lock, else the holder's pid."""
    lock = PidLock(vault.state / LOCK)
    if not lock.acquire():
        yield lock.holder or "?"
        return
    try:
        yield None
    finally:
        lock.release()


def dream_status(vault: Vault) -> dict[str, Any]:
    """Where the dream stands: cursor, newest archive id, entries waiting, what is in
    flight (or None) and the last failure (or None). Reads local files only."""
    root = vault.root
    done, cursor_problem = archive.read_what_parses(root)
    cursor = done.high
    ids = [i for i, _ in archive.entry_ids(root)]
    flight: dict[str, Any] | None
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
        failure: Any = json.loads((vault.state / LAST_FAILURE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        failure = None
    texts = []
    for name in FILES:
        try:
            texts.append(safe.read_text(root, name, errors="replace") or "")
        except UserError:
            texts.append("")
    return {"cursor": cursor, "newest": ids[-1] if ids else 0,
            "waiting": sum(1 for i in ids if i not in done), "in_flight": flight,
            "review": len(ledger.waiting(root)),
            "last_failure": failure, "conflicts": prompts.conflicts(*texts),
            "cursor_problem": cursor_problem}


# ---- running --------------------------------------------------------------------------

def run_dream(vault: Vault, provider: Provider, now: datetime, *, wait: bool = True, sync: bool = False,
              dry_run: bool = False, max_entries: int | None = None, allow_shrink: bool = False,
              progress: Callable[[str], None] | None = None, poll_interval: float = 5.0) -> DreamOutcome:
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


class _Run(RunContext):
    """The state machine of one run: start (select the entries, submit the analyst),
    then advance phase by phase until the run waits, fails or is applied."""
    # -- the state machine

    def go(self) -> DreamOutcome:
        with _dream_lock(self.vault) as holder:
            if holder is not None:
                return self.outcome("waiting", f"Another `agent dream` (pid {holder}) is working "
                                    f"on this vault; it will finish the dream.")
            state = load_state(self.vault)
            if state is None:
                started = self.start()
                if isinstance(started, DreamOutcome):
                    return started
                state = started
                if not self.wait and state.phase == "analyst":
                    return self.submitted(state, "analyst")
            return self.advance(state)

    def start(self) -> RunState | DreamOutcome:
        root = self.vault.root
        done = archive.read_consolidated(root)
        cache = reading.SessionCache(root)
        sel = reading.select(root, done, self.max_entries or RUN_ENTRIES, cache)
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
        asked = self.asked(sel, cache) if self.explicit else None
        if asked is not None:
            sel.passed = [e for e in sel.entries if not asked[e.id]]
            sel.entries = [e for e in sel.entries if asked[e.id]]
            if not sel.entries:
                return self.skip_only(sel)
        passed = [e.id for e in sel.passed]
        rendered = [(e.id, reading.render_entry(e, cache, raw_tokens,
                                                asked[e.id] if asked is not None else None))
                    for e in sel.entries]
        chunks = reading.chunk(rendered, self.settings.dream_chunk_tokens)
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
        memory = prompts.memory_block(state.memory_text, state.user_text)
        rejected = rejections.read(root)
        requests = [BatchRequest(c.custom_id, state.model,
                                 prompts.analyst_request(memory, c, state.today,
                                                         state.max_tokens, rejected,
                                                         explicit=asked is not None))
                    for c in chunks]
        skipped = f", {len(sel.skipped)} from heartbeat/dream sessions set aside" if sel.skipped else ""
        if passed:
            skipped += f", {plural(len(passed), 'entry', 'entries')} passed over (nothing " \
                       f"asked to be remembered)"
        self.say(f"Dreaming over archive {sel.first}..{sel.through}: "
                 f"{plural(len(sel.entries), 'entry', 'entries')} in "
                 f"{plural(len(requests), 'analyst request')}{skipped}.")
        return submit(self, state, "analyst", requests)

    def settle_only(self, sel: reading.Selection, texts: dict[str, str]) -> RunState | DreamOutcome:
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
        self.say(f"No archive entries wait; settling {plural(n, 'sync conflict')} in memory.")
        return state

    def advance(self, state: RunState) -> DreamOutcome:
        while True:
            phase = state.phase
            if phase in PHASES and state.mode == "sync":
                sent = send_sync(self, state, phase)
                if isinstance(sent, DreamOutcome):
                    return sent
                continue
            if phase in PHASES:
                collected = collect(self, state, phase)
                if isinstance(collected, DreamOutcome):
                    return collected
                if collected is None:
                    return self.waiting(state, phase)
                failure = take_results(self, state, phase, collected)
                if failure:
                    return self.fail(state, failure)
            elif phase == "analyst_done":
                clashes = prompts.conflicts(state.memory_text, state.user_text)
                if not state.findings and not clashes:
                    state.phase, state.ops = "editor_done", []
                    save_state(self.vault, state)
                    continue
                memory = prompts.memory_block(state.memory_text, state.user_text)
                first, last = (state.entries[0], state.entries[-1]) if state.entries else \
                    (state.cursor, state.cursor)
                request = prompts.editor_request(
                    memory, state.findings or [], first, last, state.today,
                    self.settings.memory_max_lines, len(state.memory_text.splitlines()),
                    state.max_tokens, conflicts=clashes)
                cid = f"editor-{first}-{last}" if state.entries else "editor-conflicts"
                sent = submit(self, state, "editor", [BatchRequest(cid, state.model, request)])
                if isinstance(sent, DreamOutcome):
                    return sent
                state = sent
                if state.phase == "editor" and not self.wait:
                    return self.submitted(state, "editor")
            elif phase == "editor_done":
                return apply(self, state)

    def submitted(self, state: RunState, phase: str) -> DreamOutcome:
        batch = state.sent(phase).batch
        return self.outcome("submitted", f"Submitted the {phase} batch {batch} for "
                            f"{state.span}; the next `agent dream` (or `agent serve`) picks "
                            f"it up.", state)

    def waiting(self, state: RunState, phase: str) -> DreamOutcome:
        return self.outcome("waiting", f"The {phase} batch {state.sent(phase).batch} for "
                            f"{state.span} is still running.", state)

    def skip_only(self, sel: reading.Selection) -> DreamOutcome:
        """Only heartbeat/dream entries wait, or (explicit learning) entries in which
        nobody asked to remember anything: the cursor moves past them, no model call."""
        why = (f"The {len(sel.skipped)} entr{'ies' if len(sel.skipped) != 1 else 'y'} after the "
               f"cursor come from heartbeat or dream sessions, or cover messages other "
               f"entries cover already: they are not dream input.") if sel.skipped else ""
        if sel.passed:
            why = (why + " " + passed_over(len(sel.passed))).strip()
        if self.dry_run:
            return self.outcome("dry_run", f"{why} A run would move the cursor to "
                                f"{sel.through}; nothing else.", cursor=sel.cursor,
                                first=sel.first, through=sel.through)
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
        self.clear_failure()
        return self.outcome("no_changes", f"{why} The cursor moves to {sel.through}.", sha=sha,
                            cursor=sel.cursor, first=sel.first, through=sel.through)

    @property
    def explicit(self) -> bool:
        return self.settings.memory_learn == "explicit"

    def asked(self, sel: reading.Selection, cache: reading.SessionCache) -> dict[int, list[str]]:
        """What the person asked to remember in each of the selected entries."""
        return {e.id: learning.requests((o for _, o in reading.covered_lines(cache, e.sources())),
                                        e.session)
                for e in sel.entries}
