"""Sync through git remotes, above the vault and the formats: fetch, merge with the
formats' own merge drivers (`mergedriver`, `mergetree`), hold what a remote may not
change by itself (agent.toml, skills, heartbeats, delivery targets: `held`), check
incoming trees (`incoming`), note arriving proposals (`arrivals`), give unclaimed cron
jobs to this machine (`jobclaims`), push (`remotes` plans a sync, `steps` are what it
runs), clone (`clone`).

    from agent.sync import sync, clone
    result = sync(vault)          # a SyncResult; SyncError says why not

The names below load on first use.
"""

from __future__ import annotations

_EXPORTS = {
    "sync": "agent.sync.remotes", "clone": "agent.sync.clone",
    "SyncResult": "agent.sync.result", "SyncError": "agent.sync.result",
    "ahead_behind": "agent.sync.remotes", "last_sync": "agent.sync.remotes",
    "claim_jobs": "agent.sync.jobclaims",
}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - sorted() gives a list; ruff reads only literals


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agent.sync' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
