"""A dream's edits applied: the editor's operations screened (rejected before, waiting
for review, held in memory already, not asked for), split between main and the review
branch, and committed with the advanced cursor in one commit, under the vault lock."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import agent.dream.state as runstate
from agent.dream import duplicates, learning, proposals, reading
from agent.dream.context import DreamOutcome, RunContext
from agent.oneline import plural
from agent.dream.edits import FILES, Applied, OpResult, conflict_lines
from agent.dream.provenance import proposal_records, records
from agent.dream.state import RunState
from agent.fs import safe
from agent.stores import archive, arrivals, ledger, rejections
from agent.vault import branches, gitcmd
from agent.vault.change import (BATCH, CURSOR, DUPLICATES, FACTS_ADDED, FACTS_REMOVED,
                                FACTS_UPDATED, MODEL, PROPOSED, RUN, TOKENS, Change, tokens)


def apply(run: RunContext, state: RunState) -> DreamOutcome:
    """Commit the run's edits and cursor (a dry run shows them and keeps the record)."""
    first, through = state.first, state.through
    if run.dry_run:
        # Read without the lock: taking it would commit pending hand edits.
        texts = run.read_memory()
        applied = edits(run, state, texts).main
        state.previewed = True
        runstate.save(run.vault, state)
        return run.outcome("dry_run", f"Dry run over archive {first}..{through}: nothing "
                           f"was changed. `agent dream` applies this result, `agent dream "
                           f"--cancel` discards it.", state, report=applied,
                           diff=applied.diff())
    vault = run.vault
    with vault.locked():
        # Another dream (here, or on another machine and brought in by a sync) may
        # have consolidated entries meanwhile: the ops still apply against the files
        # as they are now (an op whose line changed is skipped), and the record is a
        # set, so only a run whose entries are all consolidated already is moot.
        done = archive.read_consolidated(vault.root)
        if state.ids and all(i in done for i in state.ids):
            runstate.clear(vault)
            return run.outcome("nothing", f"The dream over archive {first}..{through} was "
                               f"committed already.", state)
        texts = run.read_memory()
        sp = edits(run, state, texts)
        applied = sp.main
        for name in applied.changed:
            vault.write_text(name, applied.texts[name])
        at = run.clock().isoformat(timespec="seconds")
        # Which findings and archive entries produced each edit, for `agent why`, and
        # what waits for review, for `agent review` (and so no later run proposes it
        # again while it waits).
        recs = records(state, applied, at) + proposal_records(state, sp.proposed, at)
        if recs:
            # Noted first: a proposal of this machine's own is never taken for one
            # that came from elsewhere (agent.stores.arrivals).
            arrivals.made_here(vault.state, recs)
            vault.append_lines(ledger.LEDGER, [ledger.dumps(r) for r in recs])
        vault.write_text(archive.CURSOR, done.add(state.ids).render())
        out = run.outcome("committed" if applied.changed or sp.proposed else "no_changes",
                          "", state, report=applied)
        t = trailers(state, out)
        if sp.duplicates:
            t[DUPLICATES] = str(sp.duplicates)
        out.duplicates = sp.duplicates
        change = commit_change(state, applied, t)
        sha = out.sha = vault.commit(change)
        # The cursor moved, so there is a commit for the review branch to start from.
        if sp.proposed and sha is not None:
            out.branch = proposals.branch_of(state.run)
            branches.commit_files(
                vault, out.branch, sha,
                {n: sp.branch[n] for n in FILES if sp.branch[n] != applied.texts[n]},
                Change("dream", f"propose {plural(len(sp.proposed), 'edit')} for review "
                                f"({state.span})",
                       body="\n".join(applied.describe()), trailers={RUN: state.run}))
    runstate.clear(vault)
    run.clear_failure()
    out.message = change.head
    return out


def edits(run: RunContext, state: RunState, texts: dict[str, str]) -> proposals.Split:
    """The run's edits against `texts`: what lands on main, what waits for review
    (`[dream] review`), and (in the report) what was dropped before either."""
    root = run.vault.root
    ops, dropped = proposals.screen(state.ops or [], rejections.read(root),
                                    ledger.waiting(root))
    ops, more = screen_learning(run, state, texts, ops)
    dropped += more
    # What another assistant's export brought in is a person's history told by a
    # third party: every edit it leads to waits for review, whatever the setting.
    mode = "all" if imported(root, run.run_entries(state)) else run.settings.dream_review
    sp = proposals.split(texts, ops, mode,
                         allow_shrink=run.allow_shrink,
                         max_lines=run.settings.memory_max_lines,
                         **guard_input(run, state, texts, ops))
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


def guard_input(run: RunContext, state: RunState, texts: dict[str, str],
                ops: list[dict[str, Any]]) -> dict[str, Any]:
    """What the dream's guard needs (see apply_ops): the lines of each memory file a
    person wrote (git blame: any author but the agent), and the text of the run's
    archive entries, the only evidence that may quote such a line. The guard looks at
    them only for an update or a delete: a run of adds alone needs neither (a blame of
    the whole file, and every entry rendered again, a run's cost growing with memory)."""
    if not any(op.get("op") in ("update", "delete") for op in ops):
        return {}
    agent_email = run.vault.agent_identity().email
    hand: dict[str, set[str]] = {}
    for name in FILES:
        lines = texts.get(name, "").splitlines()
        authors = gitcmd.line_authors(run.vault, name) if lines else []
        if authors is None or len(authors) != len(lines):
            hand[name] = set(lines)          # unknown: every line counts as the person's
        else:
            hand[name] = {line for line, who in zip(lines, authors) if who != agent_email}
    cache = run.session_cache()
    evidence = [reading.render_entry(e, cache, run.settings.dream_raw_tokens)
                for e in run.run_entries(state)]
    return {"hand": hand, "evidence": "\n".join(evidence)}


def recalled(run: RunContext, state: RunState) -> list[str]:
    """The lines the run's conversations read back from memory (tool results)."""
    cache = run.session_cache()
    out: list[str] = []
    for e in run.run_entries(state):
        sources = [s for s in e.sources() if cache.may_recall(str(s[0] or ""))]
        out.extend(reading.recalled([o for _, o in reading.covered_lines(cache, sources)]))
    return out


def screen_learning(run: RunContext, state: RunState, texts: dict[str, str],
                    ops: list[dict[str, Any]]
                    ) -> tuple[list[dict[str, Any]], list[proposals.Dropped]]:
    """The ops worth keeping: under explicit learning only what the person asked to
    keep, and never a fact memory or a recalled memory holds already."""
    held = duplicates.Held(duplicates.memory_lines(texts))
    was_recalled = duplicates.Held(recalled(run, state))
    asked = learning.asked_words(state.asks) if state.asks is not None else None
    # Each file's conflict blocks are read once, not once an operation.
    blocks = {name: conflict_lines(text) for name, text in texts.items()}
    kept: list[dict[str, Any]] = []
    dropped: list[proposals.Dropped] = []
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
            was = was_recalled.restated(new)
            if was is not None:
                dropped.append(proposals.Dropped(
                    op, f"recalled from memory in the conversation: {was.strip()}",
                    "duplicate"))
                continue
        kept.append(op)
    return kept, dropped


def imported(root: Path, entries: list[archive.Entry]) -> bool:
    """Whether any of the archive entries comes from an imported conversation (agent
    import: sessions under `import/`, or lines a JSONL import brought into any session,
    which the entry's `imported: true` says); only each entry's head is read."""
    for rel in (e.path for e in entries):
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
    return (f"Passed over {plural(n, 'entry', 'entries')}: nobody asked to remember "
            f"anything in {'them' if n != 1 else 'it'} ([memory] learn = explicit).")


def _in_conflict(blocks: dict[str, set[str]], op: dict[str, Any]) -> bool:
    """Whether `op` quotes a line inside a sync-conflict block of its file (`blocks`:
    each file's conflict_lines)."""
    old = str(op.get("old", "")).rstrip()
    return bool(old) and old in blocks.get(str(op.get("file", "")), ())


def commit_change(state: RunState, applied: Applied, trailers: dict[str, str]) -> Change:
    """The dream's commit: what changed in memory (the subject), why (the body)."""
    span = state.span
    settled = f", {plural(applied.settled, 'sync conflict')} settled" if applied.settled else ""
    if applied.proposed:
        settled += f", {applied.proposed} proposed"
    if applied.changed and not state.ids:
        subject = f"settle {plural(applied.settled, 'sync conflict')} in memory"
    elif applied.changed or applied.proposed:
        subject = (f"+{plural(applied.added, 'fact')}, {applied.updated} updated, "
                   f"{applied.removed} removed{settled} ({span})")
    else:
        subject = f"no changes ({span})"
    lines = applied.describe()
    if not applied.changed and not applied.proposed:
        found = len(state.findings or [])
        lines.insert(0, f"Nothing to change in memory ({plural(found, 'finding')}, "
                        f"{plural(len(state.ops or []), 'operation')}); the cursor moves "
                        f"to {state.through}.")
    said = ((state.skipped, "Set aside (heartbeat/dream sessions, or messages other entries "
                            f"cover): {', '.join(str(i) for i in state.skipped)}"),
            (applied.proposed, f"{plural(applied.proposed, 'edit')} wait for review on "
                               f"branch {proposals.branch_of(state.run)}: `agent review` "
                               "lists them."),
            (applied.dropped, f"Dropped before review: {applied.dropped} (rejected before, "
                              "waiting already, held in memory already, or not asked for)."))
    lines += [text for when, text in said if when]
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
