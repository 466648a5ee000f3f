"""The proposals a sync or a clone brings in, noted as from elsewhere (the record itself:
agent.stores.arrivals): the ledger lines that the incoming commits add, each with the
commit that added it and the machine (Host trailer) and author that commit names."""

from __future__ import annotations

from collections import Counter

from agent.stores import ledger
from agent.fs import boundedjson
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.sync.arrived import Arrived
    from agent.vault.repo import Vault


def note(vault: Vault, ours: str | None, theirs: str, source: str,
         arrived: Arrived | None = None) -> int:
    """Note the proposals that the commits of `theirs` (and not `ours`) add to the ledger,
    as from `source`; how many were new. One `git log`: its length follows what came in;
    none when a sync read those commits already (`arrived`)."""
    if arrived is not None:
        found = _added(arrived)
        return _came(vault, found, source)
    spec = [theirs] + (["--not", ours] if ours else [])
    # -m: a merge commit's own changes count too (a line no parent had is shown).
    out = vault.git("log", "-p", "-m", "-U0", "--reverse", "--no-color", "--no-renames",
                    "--no-ext-diff", "--format=%x01%H%x00%an <%ae>%x00%(trailers:key=Host,"
                    "valueonly,separator=%x2C)", *spec, "--", ledger.LEDGER)
    found = []
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
            record = boundedjson.loads(line[1:])
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append((record, commit, by))
    return _came(vault, found, source)


def _came(vault: Vault, found: list[tuple[dict, str, str]], source: str) -> int:
    if not found:
        return 0
    from agent.stores import arrivals     # its record's keys are digests: OpenSSL, loaded
    return arrivals.came(vault.state, found, source)   # only when a proposal came


def _added(arrived: Arrived) -> list[tuple[dict, str, str]]:
    """(record, commit, who it names) of each ledger line an arrived commit added against
    one of its parents, oldest commit first: the lines of its version beyond those its
    parent's had (a line no parent had shows once for each)."""
    entries: dict[str, list] = {}
    for e in arrived.entries:
        if e.path == ledger.LEDGER and e.oid != "0" * 40:
            entries.setdefault(e.commit, []).append(e)
    found = []
    for c in reversed(arrived.commits):
        for e in entries.get(c.sha, []):
            old = Counter(arrived.read_blob(e.old_oid).decode("utf-8", "replace").splitlines())
            for line in arrived.read_blob(e.oid).decode("utf-8", "replace").splitlines():
                if old[line] > 0:
                    old[line] -= 1
                    continue
                if not line.startswith("{"):
                    continue
                try:
                    record = boundedjson.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    found.append((record, c.sha, c.by()))
    return found
