"""The proposals a sync or a clone brings in, noted as from elsewhere (the record itself:
agent.stores.arrivals): the ledger lines that the incoming commits add, each with the
commit that added it and the machine (Host trailer) and author that commit names."""

from __future__ import annotations

import json

from agent.stores import arrivals, ledger
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault


def note(vault: Vault, ours: str | None, theirs: str, source: str) -> int:
    """Note the proposals that the commits of `theirs` (and not `ours`) add to the ledger,
    as from `source`; how many were new. One `git log`: its length follows what came in."""
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
            record = json.loads(line[1:])
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append((record, commit, by))
    return arrivals.came(vault.state, found, source) if found else 0
