"""Dropping what no ref reaches after a history rewrite: the reflogs, the old objects,
and the files git derives from commits (a commit-graph, a multi-pack-index), which
would still name the pruned commits and make `git fsck` fail.

    prune_repository(vault.root, vault.git_dir)

Git does it: the reflogs expired, then `git gc --prune=now` (every reachable object
into one pack, every other pack and every unreachable object dropped, a commit-graph of
what is left written). Only where git's repack cannot run (see `repack_by_hand`) is the
same done by hand.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

from agent.vault import git
from agent.vault.git import VaultError
from agent.vault.gitstate import git_process_in

# Background git commands the vault starts (agent/vault/repo.py, history.py) that write
# a commit-graph from the commits they saw as they started.
_MAINTENANCE = ("commit-graph", "gc", "maintenance", "repack")


class PruneError(VaultError):
    """A git command of the prune failed; the message says what to run."""


def git_in(where: str | Path, *args: str) -> str:
    """A git command in the repository at `where`, its stdin an empty pipe; PruneError
    if it fails."""
    p = git.run(args, where, input="", errors="replace")
    if p.returncode:
        raise PruneError(f"git {args[0]} failed in {where}: {p.stderr.strip()[-300:]}; the "
                         f"history is rewritten but old copies may remain: run `agent git "
                         f"gc --prune=now`.")
    return p.stdout


def wait_for_maintenance(where: str | Path, limit: float = 60.0) -> None:
    """Wait (up to `limit` seconds) for a background gc or commit-graph write running in
    `where` to end: started before a rewrite, it would write a graph of the old commits
    after the prune."""
    deadline = time.monotonic() + limit
    while git_process_in(Path(where), lambda argv: any(a in _MAINTENANCE for a in argv)):
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def drop_derived(git_dir: str | Path) -> None:
    """Remove the files git derives from commits (it rebuilds them when needed)."""
    info = Path(git_dir) / "objects" / "info"
    (info / "commit-graph").unlink(missing_ok=True)
    shutil.rmtree(info / "commit-graphs", ignore_errors=True)
    (Path(git_dir) / "objects" / "pack" / "multi-pack-index").unlink(missing_ok=True)


def prune_repository(where: str | Path, git_dir: str | Path, *, work_tree: bool = True) -> None:
    """Drop every reflog entry, every object no ref reaches any more, and the derived
    files that name commits."""
    git_dir = Path(git_dir)
    wait_for_maintenance(where)
    (git_dir / "ORIG_HEAD").unlink(missing_ok=True)
    git_in(where, "reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all")
    if not _devnull_is_a_device():
        repack_by_hand(where, git_dir, work_tree=work_tree)
        return
    # git rewrites these itself; dropped first so that none written by an older git
    # (a split commit-graph chain) survives naming the old commits.
    drop_derived(git_dir)
    git_in(where, "gc", "--quiet", "--prune=now")


def _devnull_is_a_device() -> bool:
    """Whether /dev/null is what git's repack takes it for (Windows has none: git there
    uses its own NUL)."""
    if os.name == "nt":
        return True
    try:
        return stat.S_ISCHR(os.stat(os.devnull).st_mode)
    except OSError:
        return False


def repack_by_hand(where: str | Path, git_dir: str | Path, *, work_tree: bool = True) -> None:
    """What `git gc --prune=now` does to objects, done by hand: the fallback where git
    cannot. Git's repack (which gc runs) starts pack-objects with /dev/null as its
    stdin, and where
    /dev/null is no device (a sandbox that replaced it by a file others write to)
    pack-objects reads their output as revisions and fails, or packs what they name.
    Here the reachable objects are listed by rev-list and handed to pack-objects through
    a pipe; then every other pack and every loose object goes."""
    git_dir = Path(git_dir)
    listed = git_in(where, "rev-list", "--objects", "--all",
                    *(["--indexed-objects"] if work_tree else []))
    packs = git_dir / "objects" / "pack"
    packs.mkdir(parents=True, exist_ok=True)
    p = git.run(["pack-objects", "-q", str(packs / "pack")], where, input=listed,
                errors="replace")
    if p.returncode:
        raise PruneError(f"git pack-objects failed in {where}: {p.stderr.strip()[-300:]}")
    keep = f"pack-{p.stdout.strip()}"
    drop_derived(git_dir)
    for f in packs.iterdir():
        if f.name.startswith("pack-") and not f.name.startswith(keep + "."):
            f.unlink(missing_ok=True)
    git_in(where, "prune-packed")
    git_in(where, "prune", "--expire=now")
