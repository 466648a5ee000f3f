"""`.agent/arrivals.json`: which of the dream's proposals were made on this machine, and
which came in from elsewhere (where from, and who their commits name).

The ledger (agent.stores.ledger) is one file every clone merges, so a proposal looks
the same whether this machine's dream made it or a remote's commit added it. What a
commit claims about itself (its author, its Host trailer) is the remote's word; what
this machine knows for itself is what its own dream recorded and which ledger lines
came in through a sync or a clone (agent.sync.arrivals notes those). Both are kept
here, this machine's own state, never in git. A proposal noted as neither (say `.agent/`
was deleted) counts as from elsewhere, where from unknown: the safe side. `agent
review` marks every proposal not made here, and `agent review accept --all` leaves
them for the person to accept one by one.

A record is known by its whole content (a hash of it), not by its run and number, so
a remote that reuses a local proposal's number with another text is still marked.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from agent.fs import atomic
from agent.stores import ledger

STATE_FILE = "arrivals.json"
UNKNOWN = "elsewhere"      # the source of a proposal neither made here nor seen arriving


def key(record: dict) -> str:
    """What a ledger record is known by: a hash of its whole content."""
    text = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def load(state: Path) -> dict:
    """{"came": key -> {"source", "by", "commit", "run", "n"}, "here": [key, ...]} from
    the state folder `state` (.agent/)."""
    data = atomic.read_json(Path(state) / STATE_FILE)
    data = data if isinstance(data, dict) else {}
    came, here = data.get("came"), data.get("here")
    return {"came": came if isinstance(came, dict) else {},
            "here": here if isinstance(here, list) else []}


def save(state: Path, data: dict) -> None:
    Path(state).mkdir(exist_ok=True)
    atomic.write_json(Path(state) / STATE_FILE, data)


def origin(data: dict, record: dict) -> tuple[str, str]:
    """(where a proposal came from, who its commit names) for a waiting ledger record,
    with `data` as load() gives it; ("", "") when this machine's dream made it."""
    k = key(record)
    mark = data["came"].get(k)
    if isinstance(mark, dict):
        return str(mark.get("source") or UNKNOWN), str(mark.get("by") or "")
    if k in set(data["here"]):
        return "", ""
    return UNKNOWN, ""


def made_here(state: Path, records: list[dict]) -> None:
    """Note the proposal records this machine's dream is about to write to the ledger."""
    keys = [key(r) for r in records if ledger.is_proposal(r)]
    if not keys:
        return
    data = load(state)
    data["here"] = list(dict.fromkeys(data["here"] + keys))
    save(state, data)


def came(state: Path, records: list[tuple[dict, str, str]], source: str) -> int:
    """Note proposal records that came in from `source`, each with its commit and who
    that commit names (record, commit, by); how many were new."""
    data = load(state)
    marks = data["came"]
    fresh = 0
    for record, commit, by in records:
        if not ledger.is_proposal(record):
            continue
        k = key(record)
        if k not in marks:
            marks[k] = {"source": source, "by": by, "commit": commit,
                        "run": str(record.get("run", "")), "n": record.get("n")}
            fresh += 1
    if fresh:
        save(state, data)
    return fresh
