"""Which of a dream's edits wait for a person's review, and what a proposal looks like.

`[dream] review` in agent.toml says what waits:

- "changes" (the default): new facts land on `main` as the dream writes them; updates
  and removals of lines already there wait for review (and an add of the very text a
  waiting update brings is that update: it waits with it, never lands alone);
- "all": every edit waits;
- "off": nothing waits (every edit lands on `main`).

Before anything is applied, an operation that restates something a person rejected
(agent.stores.rejections) or repeats a proposal still waiting is dropped and counted.
Pure functions over text and records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.dream.edits import Applied, OpResult, apply_ops
from agent.stores import rejections
from agent.stores.memory import normalise
from agent.vault.branches import branch_of  # noqa: F401  (a run's branch, named here too)

MODES = ("all", "changes", "off")
DEFAULT = "changes"


def waits(r: OpResult, mode: str) -> bool:
    """Whether an applied edit waits for review under `mode`."""
    if r.status != "applied" or mode == "off":
        return False
    if mode == "all":
        return True
    # Settling a sync-conflict block keeps one of two versions a person had already:
    # it is what the dream is asked to do, not a change of a fact.
    return r.op in ("update", "delete") and not r.settled


@dataclass
class Dropped:
    op: dict
    why: str
    kind: str = ""                   # "duplicate", "unasked", or "" (rejected, waiting)


def screen(ops: list[dict], rejected: list[dict], waiting: list[dict]) -> tuple[list[dict], list[Dropped]]:
    """The operations worth applying or proposing, and those dropped: restating a
    rejected statement, or repeating a proposal still waiting for review."""
    keys = {(p.get("op"), p.get("file"), normalise(str(p.get("line") or p.get("old") or "")))
            for p in waiting}
    kept, dropped = [], []
    for op in ops:
        kind, new, old = str(op.get("op", "")), str(op.get("new", "")), str(op.get("old", ""))
        r = rejections.rejected(rejected, kind, new, old)
        if r is not None:
            because = f": {r['reason']}" if r.get("reason") else ""
            dropped.append(Dropped(op, f"rejected in review of dream {r.get('run')}{because}"))
            continue
        key = (kind, str(op.get("file", "")), normalise(new if kind != "delete" else old))
        if key in keys:
            dropped.append(Dropped(op, "proposed already, waiting for review (agent review)"))
            continue
        kept.append(op)
    return kept, dropped


@dataclass
class Split:
    """A run's edits split into what lands on main and what waits on the branch."""
    main: Applied                    # the edits applied to main (and the fate of every op)
    proposed: list[OpResult] = field(default_factory=list)
    branch: dict[str, str] = field(default_factory=dict)   # the memory files as proposed
    duplicates: int = 0              # dropped: memory or a recalled memory held them already
    unasked: int = 0                 # dropped: not asked for ([memory] learn = explicit)


def as_op(r: OpResult) -> dict:
    return {"op": r.op, "file": r.file, "section": r.section, "old": r.old, "new": r.new,
            "reason": r.reason}


def split(texts: dict[str, str], ops: list[dict], mode: str, **kw) -> Split:
    """Apply `ops` to `texts` (see apply_ops for `kw`), then part them: the edits that
    wait for review under `mode` are left out of `main` and applied on top of it for
    the branch.

    `main` gets only edits that applied in the full run and do not wait: an op that did
    not apply there (an add of a line a waiting edit brings, a second add of the same
    fact) would otherwise apply on main alone and put a proposal's text there unseen;
    and an add of the text a waiting update brings is that update, so it is left out."""
    full = apply_ops(texts, ops, **kw)
    wait = {i for i, r in enumerate(full.results) if waits(r, mode)}
    if not wait:
        return Split(full)
    brought = {(full.results[i].file, normalise(full.results[i].new)) for i in wait
               if full.results[i].op == "update"}
    for i, r in enumerate(full.results):
        if i not in wait and r.op == "add" and r.status == "applied" \
                and (r.file, normalise(r.new)) in brought:
            r.status, r.why = "skipped", "the same text as an update waiting for review"
        elif i in wait and r.op == "add" and (r.file, normalise(r.new)) in brought:
            wait.discard(i)
            r.status, r.why = "skipped", "the same text as an update waiting for review"
    waiting = {(full.results[i].file, normalise(full.results[i].new)) for i in wait}
    for i, r in enumerate(full.results):
        if i not in wait and r.why.startswith("already present") \
                and (r.file, normalise(r.new)) in waiting:
            r.why = "the same text as an edit waiting for review"
    keep = [op for i, op in enumerate(ops)
            if i not in wait and full.results[i].status == "applied"]
    main = apply_ops(texts, keep, **kw)
    main.results.extend(r for i, r in enumerate(full.results)
                        if i not in wait and r.status != "applied")
    proposed = [full.results[i] for i in sorted(wait)]
    on_top = apply_ops(main.texts, [as_op(r) for r in proposed], allow_shrink=True,
                       max_lines=kw.get("max_lines", 200))
    for r, done in zip(proposed, on_top.results):
        r.status, r.why = "proposed", "waits for review (agent review)"
        r.new = done.new if done.status == "applied" else r.new
    return Split(main, proposed, on_top.texts)
