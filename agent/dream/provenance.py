"""Which findings and archive entries produced each of a dream's edits, for the ledger
(`agent.stores.ledger`) that `agent why` reads.

The editor's operations do not point at findings (its schema is a contract with the
model, kept as it is); they are linked here: the archive ids the operation's reason
cites, and the findings about the same file whose statement is closest to the edited
line or whose evidence the reason cites. Pure functions over the run's records.
"""

from __future__ import annotations

import re

from agent.stores.memory import normalise

_IDS = re.compile(r"archive[\s:#]*(\d+)", re.I)


def cited_ids(text: str) -> list[int]:
    """Archive ids a text cites: `archive:42`, `archive 42`, `archive #42`."""
    return sorted({int(m) for m in _IDS.findall(text or "")})


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", normalise(text or "")) if len(w) > 2}


def similarity(a: str, b: str) -> float:
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / min(len(wa), len(wb))


def link(result, findings: list[dict], entries: list[int]) -> dict:
    """The ledger fields of one applied operation: findings, archive ids, exact."""
    run_ids = set(entries)
    reason_ids = {i for i in cited_ids(result.reason) if i in run_ids}
    target = result.new if result.op != "delete" else result.old
    scored = []
    for f in findings:
        if f.get("file") != result.file:
            continue
        evidence = {i for e in f.get("evidence", []) for i in cited_ids(str(e))}
        score = similarity(str(f.get("statement", "")), target)
        if result.op != "add" and result.old:
            score = max(score, similarity(str(f.get("statement", "")), result.old))
        if evidence & reason_ids:
            score += 0.5
        scored.append((score, f, evidence))
    picked = [(s, f, e) for s, f, e in scored if s >= 0.5]
    if not picked and scored:
        best = max(scored, key=lambda t: t[0])
        if best[0] >= 0.2:
            picked = [best]
    ids = set(reason_ids)
    for _, _, evidence in picked:
        ids.update(i for i in evidence if i in run_ids)
    exact = bool(ids)
    if not ids:
        ids = run_ids
    return {"findings": [{k: f.get(k) for k in ("kind", "statement", "evidence", "date")}
                         for _, f, _ in picked],
            "archive": sorted(ids), "exact": exact}


def records(state, applied, at: str) -> list[dict]:
    """One ledger record per applied operation of a dream run (`state`: its RunState)."""
    run = state.run
    findings = state.findings or []
    entries = state.entries or []
    out = []
    for r in applied.results:
        if r.status != "applied":
            continue
        rec = {"run": run, "at": at, "op": r.op, "file": r.file,
               "line": r.new if r.op != "delete" else "", "old": r.old, "reason": r.reason}
        rec.update(link(r, findings, entries))
        out.append(rec)
    return out


def proposal_records(state, proposed, at: str) -> list[dict]:
    """One ledger record per edit of the run that waits for review, numbered from 1."""
    findings, entries = state.findings or [], state.entries or []
    out = []
    for n, r in enumerate(proposed, 1):
        rec = {"run": state.run, "at": at, "status": "proposed", "n": n, "op": r.op,
               "file": r.file, "section": r.section,
               "line": r.new if r.op != "delete" else "", "old": r.old, "reason": r.reason}
        rec.update(link(r, findings, entries))
        out.append(rec)
    return out
