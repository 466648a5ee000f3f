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
    # Numbers count at any length: "step 7" and "step 8" are two facts.
    return {w for w in re.findall(r"\w+", normalise(text or "")) if len(w) > 2 or w.isdigit()}


LINKED = 3          # findings a ledger record names at most (the closest)
CLOSE = 0.1         # how far below the closest finding another still counts
RARE = 64           # a word more findings share than this does not pick candidates


class Findings:
    """A run's findings indexed once (their words and cited ids, by file), so linking an
    edit scores only the findings that share a rare word or a cited id with it: the cost
    per edit stays flat however many entries the run consolidates."""

    def __init__(self, findings: list[dict]):
        self.items = [(f, _words(str(f.get("statement", ""))),
                       {i for e in f.get("evidence", []) for i in cited_ids(str(e))})
                      for f in findings]
        self.by_word: dict[tuple, list[int]] = {}
        self.by_id: dict[tuple, list[int]] = {}
        for n, (f, words, evidence) in enumerate(self.items):
            for w in words:
                self.by_word.setdefault((f.get("file"), w), []).append(n)
            for i in evidence:
                self.by_id.setdefault((f.get("file"), i), []).append(n)

    def candidates(self, file, words: set[str], ids: set[int]) -> set[int]:
        lists = sorted((self.by_word.get((file, w), []) for w in words), key=len)
        out: set[int] = set()
        for posting in lists:
            if len(posting) > RARE and out:
                break
            out.update(posting[:RARE * 4])
        for i in ids:
            out.update(self.by_id.get((file, i), []))
        return out


def link(result, findings: list[dict] | Findings, entries: list[int]) -> dict:
    """The ledger fields of one applied operation: findings (the closest few), archive
    ids, exact. Without an exact link the ids are left to the run (`agent why` reads
    the run's range), so no record grows with the run."""
    index = findings if isinstance(findings, Findings) else Findings(findings)
    run_ids = set(entries)
    reason_ids = {i for i in cited_ids(result.reason) if i in run_ids}
    target = result.new if result.op != "delete" else result.old
    words = _words(target) | (_words(result.old) if result.op != "add" and result.old else set())
    scored = []
    for n in index.candidates(result.file, words, reason_ids):
        f, fwords, evidence = index.items[n]
        score = _overlap(fwords, _words(target))
        if result.op != "add" and result.old:
            score = max(score, _overlap(fwords, _words(result.old)))
        if evidence & reason_ids:
            score += 0.5
        scored.append((score, n, f, evidence))
    scored.sort(key=lambda t: (-t[0], t[1]))
    best = scored[0][0] if scored else 0.0
    picked = [t for t in scored if t[0] >= max(0.5, best - CLOSE)][:LINKED]
    if not picked and scored and scored[0][0] >= 0.2:
        picked = scored[:1]
    ids = set(reason_ids)
    for _, _, _, evidence in picked:
        ids.update(i for i in evidence if i in run_ids)
    return {"findings": [{k: f.get(k) for k in ("kind", "statement", "evidence", "date")}
                         for _, _, f, _ in picked],
            "archive": sorted(ids), "exact": bool(ids)}


def _overlap(wa: set[str], wb: set[str]) -> float:
    return len(wa & wb) / min(len(wa), len(wb)) if wa and wb else 0.0


def records(state, applied, at: str) -> list[dict]:
    """One ledger record per applied operation of a dream run (`state`: its RunState)."""
    run = state.run
    findings = Findings(state.findings or [])
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
    findings, entries = Findings(state.findings or []), state.entries or []
    out = []
    for n, r in enumerate(proposed, 1):
        rec = {"run": state.run, "at": at, "status": "proposed", "n": n, "op": r.op,
               "file": r.file, "section": r.section,
               "line": r.new if r.op != "delete" else "", "old": r.old, "reason": r.reason}
        rec.update(link(r, findings, entries))
        out.append(rec)
    return out
