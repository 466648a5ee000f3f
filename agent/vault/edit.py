"""One file of the vault changed as a transaction: read under the vault lock, changed by
a function of its text, written atomically and committed; the one lock-read-write-commit
that cron.json's changes (agent.ops.jobs) and a sync's claim of jobs (agent.sync)
share. The format is the caller's: this module knows text, not JSON.

    change, sha = edit(vault, "cron.json", lambda text: (new_text, Change("cron", "...")))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from agent.fs import safe
from agent.vault.change import Change

if TYPE_CHECKING:
    from agent.vault.repo import Vault


def edit(vault: Vault, rel: str, fn: Callable[[str | None], tuple[str | None, Change | None]]
         ) -> tuple[Change | None, str | None]:
    """Apply `fn` to `rel`'s text as it is under the lock (None: no such file) and commit;
    (the change, the commit's sha).

    `fn` returns (the new text, the Change saying what it did), or a Change of None when
    there is nothing to do: then nothing is written, and neither is a text equal to the
    old one (the Change is returned with no sha). What `fn` raises leaves the file as it
    was."""
    with vault.locked():
        before = safe.read_text(vault.root, rel)
        after, done = fn(before)
        if done is None or after is None or after == before:
            return done, None
        vault.write_text(rel, after)
        return done, vault.commit(done)
