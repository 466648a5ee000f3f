"""Proposals a remote brought: which of the dream's proposals waiting for review were
made on another machine, as far as this one can tell, and by whom.

The ledger (agent.stores.ledger) is one file every clone merges, so a proposal looks
the same whether this machine's dream made it or a remote's commit added it. What a
commit claims about itself (its author, its Host trailer) is the remote's word; what
this machine knows for itself is which ledger lines came in through a sync or a clone.
So when one brings commits in, the proposal records they add to the ledger are noted
in `.agent/arrivals.json` (this machine's own state, never in git), each with where it
came from and the machine or author its commit names; and the proposals this machine's
own dream records are noted there too. A proposal noted as neither (say `.agent/` was
deleted) counts as from elsewhere, where from unknown: the safe side. `agent review`
marks every proposal not made here, and `agent review accept --all` leaves them for
the person to accept one by one.

A record is known by its whole content (a hash of it), not by its run and number, so
a remote that reuses a local proposal's number with another text is still marked.
"""

from __future__ import annotations

import hashlib
import json

from agent.stores import ledger
from agent.vault import atomic

STATE_FILE = "arrivals.json"
UNKNOWN = "elsewhere"      # the source of a proposal neither made here nor seen arriving


def key(record: dict) -> str:
    """What a ledger record is known by: a hash of its whole content."""
    text = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def load(vault) -> dict:
    """{"came": key -> {"source", "by", "commit", "run", "n"}, "here": [key, ...]}."""
    data = atomic.read_json(vault.state / STATE_FILE)
    data = data if isinstance(data, dict) else {}
    came, here = data.get("came"), data.get("here")
    return {"came": came if isinstance(came, dict) else {},
            "here": here if isinstance(here, list) else []}


def _save(vault, data: dict) -> None:
    vault.state.mkdir(exist_ok=True)
    atomic.write_json(vault.state / STATE_FILE, data)


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


def made_here(vault, records: list[dict]) -> None:
    """Note the proposal records this machine's dream is about to write to the ledger."""
    keys = [key(r) for r in records if ledger.is_proposal(r)]
    if not keys:
        return
    data = load(vault)
    data["here"] = list(dict.fromkeys(data["here"] + keys))
    _save(vault, data)


def note(vault, ours: str | None, theirs: str, source: str) -> int:
    """Note the proposals that the commits of `theirs` (and not `ours`) add to the ledger,
    as from `source`; how many were new. One `git log`: its length follows what came in."""
    spec = [theirs] + (["--not", ours] if ours else [])
    # -m: a merge commit's own changes count too (a line no parent had is shown).
    out = vault.git("log", "-p", "-m", "-U0", "--reverse", "--no-color", "--no-renames",
                    "--no-ext-diff", "--format=%x01%H%x00%an <%ae>%x00%(trailers:key=Host,"
                    "valueonly,separator=%x2C)", *spec, "--", ledger.LEDGER)
    if not out:
        return 0
    data = load(vault)
    marks = data["came"]
    fresh = 0
    commit, by = "", ""
    for line in out.splitlines():
        if line.startswith("\x01"):
            commit, author, host = (line[1:].split("\0") + ["", ""])[:3]
            host = host.strip().split(",")[0].strip()
            # The Host trailer is the remote's own word: the author is shown beside it.
            by = f"{host} ({author})" if host else author
            continue
        if not line.startswith("+{"):
            continue
        try:
            record = json.loads(line[1:])
        except ValueError:
            continue
        if not isinstance(record, dict) or not ledger.is_proposal(record):
            continue
        k = key(record)
        if k not in marks:
            marks[k] = {"source": source, "by": by, "commit": commit,
                        "run": str(record.get("run", "")), "n": record.get("n")}
            fresh += 1
    if fresh:
        _save(vault, data)
    return fresh
