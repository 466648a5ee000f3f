"""`agent clone` of an encrypted remote: this machine's key made first, the fingerprint
to expect handed to the helper, and a refusal said as what to do where."""

from __future__ import annotations

from datetime import datetime, timezone

from agent.sync.crypt import keys
from agent.sync.crypt.remote import EXPECT_ENV, PREFIX
from agent.vault.repo import VaultError

__all__ = ["PREFIX", "Encrypted", "prepare", "refused"]


class Encrypted(VaultError):
    """A plain URL that holds an encrypted remote: clone it through the helper."""


def prepare(url: str, expect: str | None) -> dict[str, str]:
    """The environment `git clone` of `url` runs with: for an encrypted remote, this
    machine's key exists (made now if not) and the fingerprint to expect is given."""
    env = {EXPECT_ENV: expect.strip().lower()} if expect else {}
    if url.startswith(PREFIX):
        keys.ensure(datetime.now(timezone.utc).isoformat(timespec="seconds"))
    return env


def refused(url: str, problem: str) -> str | None:
    """The one line for a clone the encrypted remote's helper refused, else None."""
    if not url.startswith(PREFIX):
        return None
    if "is not trusted there" not in problem:
        return f"Could not clone {url}: {problem}. Nothing was made here."
    key = keys.load()
    public = key.public if key else "(run `agent key`)"
    return (f"This machine cannot read {url}: it is not trusted there yet. On a machine "
            f"that syncs this vault, save this machine's key {public} to a file and run "
            f"`agent remote trust NAME FILE`, then clone again here (if no machine that "
            f"could read it is left, what it holds is unrecoverable: it is encrypted for "
            f"keys that are gone).")
