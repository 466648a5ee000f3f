"""A model's write that waits for the person: a heartbeat or skill the model writes is
not put on disk (it would run, and deliver, with nobody's yes) but recorded as a held
change in `.agent/held.json`, the same record a sync's held changes use
(agent.sync.held): `agent sync held` shows it, `agent sync accept FILE` takes it in
one commit, `agent sync reject FILE` drops it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, cast

from agent.fs import atomic

if TYPE_CHECKING:
    from agent.vault.repo import Vault
    from agent.vault.staged import StagedVault

STATE_FILE = "held.json"                 # agent.sync.held.STATE_FILE
REF_PREFIX = "refs/agent/held/"          # agent.sync.held.REF_PREFIX
MODEL = "the model"                      # who a held write came from


def hold(vault: Vault | StagedVault, rel: str, text: str, source: str) -> None:
    """Record `text` for `rel` as a held change from the model (`source`: the chat);
    the blob is kept reachable by a ref so that gc keeps it."""
    real = cast("Vault", getattr(vault, "vault", vault))    # a turn's staged vault: its vault
    with real.locked(repair=False):
        oid = real.git("hash-object", "-w", "--stdin", input=text).strip()
        ref = REF_PREFIX + oid
        real.git("update-ref", ref, oid)
        path = real.state / STATE_FILE
        data = atomic.read_json(path) if path.exists() else None
        data = data if isinstance(data, dict) else {}
        data.setdefault("held", {})
        data.setdefault("rejected", {})
        data["held"][rel] = {"key": rel, "path": rel, "oid": oid, "mode": "100644",
                             "commit": "", "host": MODEL, "source": source, "ref": ref,
                             "job": None, "local_job": None}
        real.state.mkdir(exist_ok=True)
        atomic.write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
