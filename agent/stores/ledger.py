"""The dream ledger, `.dream_ledger.jsonl`: which findings and archive entries produced
each edit a dream made to MEMORY.md and USER.md.

One JSON object per applied operation, appended in the dream's own commit (so the
commit that wrote a fact and the record of why are the same commit), never rewritten:

    {"run": "40..52", "at": "2026-11-21T03:00:12+01:00", "op": "update",
     "file": "MEMORY.md", "line": "- The Kyoto trip is on 2027-04-10",
     "old": "- The Kyoto trip is on 2027-04-03", "reason": "moved (archive:44)",
     "archive": [44], "exact": true,
     "findings": [{"kind": "update", "statement": "...", "evidence": ["archive:44"]}]}

`run` is the dream's id, its first and last archive id (as in its subject and `Run:`
trailer), `archive` the entries the edit stands on; `exact` is false when they could not
be told apart from the whole run's.

An edit that waits for review (`[dream] review`) is recorded the same way with
`"status": "proposed"` and its number in the run (`"n": 2`); the person's decision on
it is a later record `{"run": ..., "n": 2, "decision": "accepted" | "rejected", "by":
..., "at": ..., "line": <the text applied>}`, appended in the review's commit. A
proposal without a decision is pending, on every clone the ledger reaches.
It is kept out of MEMORY.md's own history, so `git log -p MEMORY.md` shows facts only.
Merged by union across clones (each line stands alone).
"""

from __future__ import annotations

import json
from agent.fs import boundedjson
from pathlib import Path

LEDGER = ".dream_ledger.jsonl"
LEDGER_BYTES = 256 * 1024 * 1024     # years of dreams, read whole
PROPOSED = "proposed"


def dumps(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def loads(line: str) -> dict | None:
    """One record of a ledger line; None for a blank, torn or hand-mangled one."""
    try:
        obj = boundedjson.loads(line)
    except ValueError:          # blank lines too: JSON has no empty document
        return None
    return obj if isinstance(obj, dict) else None


def read(root: Path) -> list[dict]:
    """Every record; a line that is not JSON (a torn or hand-mangled one) is skipped."""
    return _read(root)


def waiting(root: Path) -> list[dict]:
    """The proposals that wait for a decision (as `proposals(read(root))`), parsing only
    the lines that can be a proposal or a decision: the ledger gains a record for every
    edit a dream makes, and a dream that parsed them all to find what waits cost more
    the more it had dreamed before."""
    return proposals(_read(root, _MAYBE_WAITING))


# The words a proposal or a decision has to hold ("status": "proposed", "decision"),
# unless written with escapes: a line with a backslash is always parsed.
_MAYBE_WAITING = (PROPOSED, "decision", "\\")


def _read(root: Path, holding: tuple[str, ...] | None = None) -> list[dict]:
    """The records of the lines holding one of `holding` (None: every line)."""
    from agent.fs import safe
    out = []
    text = safe.read_text(root, LEDGER, limit=LEDGER_BYTES, errors="replace") or ""
    # Records end at "\n" only: JSON keeps U+2028, U+0085 and the like raw inside a
    # string, and splitlines() would cut a fact holding one into two broken records.
    for line in text.split("\n"):
        line = line.strip()
        if not line or (holding is not None and not any(w in line for w in holding)):
            continue
        try:
            obj = boundedjson.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def is_proposal(rec: dict) -> bool:
    return rec.get("status") == PROPOSED and "decision" not in rec


def is_decision(rec: dict) -> bool:
    return rec.get("decision") in ("accepted", "rejected")


def for_line(root: Path, run: str | None, file: str, line: str,
             records: list[dict] | None = None) -> dict | None:
    """The newest record of an edit dream `run` (any run when None) made, writing
    `line` to `file` (proposals and decisions are not edits a dream made)."""
    want = line.strip()
    for rec in reversed(read(root) if records is None else records):
        if run is not None and rec.get("run") != run:
            continue
        if is_proposal(rec) or "decision" in rec:
            continue
        if rec.get("file") == file and str(rec.get("line", "")).strip() == want:
            return rec
    return None


def _key(rec: dict) -> tuple[str, int] | None:
    """(run, n) of a proposal or decision; None for a mangled one (a list for a number)."""
    run, n = rec.get("run"), rec.get("n")
    return (run, n) if isinstance(run, str) and isinstance(n, int) else None


def proposals(records: list[dict]) -> list[dict]:
    """The proposals that wait for a decision, oldest first (a proposal recorded twice,
    as a union merge of two clones may leave it, counts once)."""
    decided = {_key(r) for r in records if is_decision(r)}
    out, seen = [], set()
    for r in records:
        key = _key(r)
        if key is not None and is_proposal(r) and key not in decided and key not in seen:
            seen.add(key)
            out.append(r)
    return out


def proposal(records: list[dict], run: str | None, n: object) -> dict | None:
    return next((r for r in records if is_proposal(r) and r.get("run") == run
                 and r.get("n") == n), None)


def decision(records: list[dict], run: str, n: int) -> dict | None:
    return next((r for r in reversed(records) if is_decision(r) and r.get("run") == run
                 and r.get("n") == n), None)
