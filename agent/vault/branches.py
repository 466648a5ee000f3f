"""Proposal branches: commits on a branch (`dream/<run>`) made with plumbing, so that
`main`'s files, index and work tree are never touched.

A dream that waits for review puts its proposed memory files on a branch whose commit
sits on top of `main`'s: `git diff main dream/<run>` (or any git tool) shows exactly
what it proposes. Only this module and agent.vault.repo run git.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, TYPE_CHECKING

from agent.vault.change import Change

if TYPE_CHECKING:
    from agent.vault.repo import Vault

PREFIX = "dream/"


def branch_of(run: str) -> str:
    """`dream/4-9` for the dream run `4..9` (a git branch name cannot hold `..`)."""
    return PREFIX + run.replace("..", "-")


def ref_of(branch: str) -> str:
    return f"refs/heads/{branch}"


def commit_files(vault: Vault, branch: str, parent: str, files: dict[str, str],
                 change: Change) -> str:
    """Commit `files` (vault-relative path -> text) on top of `parent` as the tip of
    `branch` (made or moved); the sha. A private index file is used, so the vault's
    own index and work tree stay as they are."""
    index = vault.state / f"branch-{os.getpid()}.index"
    vault.state.mkdir(exist_ok=True)
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        vault.git("read-tree", parent, env=env)
        for rel, text in sorted(files.items()):
            blob = vault.git("hash-object", "-w", "--stdin", "--no-filters", input=text).strip()
            vault.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}", env=env)
        tree = vault.git("write-tree", env=env).strip()
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()
    message, who = change.message(), change.author or vault.agent_identity()
    sha = vault.git("commit-tree", tree, "-p", parent, "-F", "-", env=who.env(),
                    input=message).strip()
    vault.git("update-ref", "-m", change.head, ref_of(branch), sha)
    return sha


def tip(vault: Vault, branch: str) -> str | None:
    """The branch's commit, or None when there is no such branch."""
    out = vault.git("rev-parse", "--verify", "-q", f"{ref_of(branch)}^{{commit}}", check=False)
    return out.strip() or None


def delete(vault: Vault, branch: str) -> bool:
    """Delete the branch; False when it was not there."""
    sha = tip(vault, branch)
    if sha is None:
        return False
    vault.git("update-ref", "-d", ref_of(branch), sha)
    return True


def listed(vault: Vault, prefix: str = PREFIX) -> dict[str, str]:
    """Branch name -> sha of every branch under `prefix`."""
    out = vault.git("for-each-ref", "--format=%(refname:strip=2) %(objectname)",
                    ref_of(prefix.rstrip("/")))
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def fetch_refspec(remote: str) -> str:
    """The refspec that brings the remote's proposal branches to its tracking refs."""
    return f"+{ref_of(PREFIX)}*:refs/remotes/{remote}/{PREFIX}*"


def ref_patterns(remote: str) -> tuple[str, str]:
    """The `git for-each-ref` patterns of the proposal branches: fetched, and here."""
    return f"refs/remotes/{remote}/{PREFIX}".rstrip("/"), ref_of(PREFIX).rstrip("/")


def exchange(vault: Vault, remote: str, waiting: set[str],
             refs: dict[str, str] | None = None, rewritten: bool = False, *,
             check: Callable[[Vault, str], str | None]) -> tuple[list[str], list[str], list[str], dict[str, str]]:
    """Carry proposal branches through `remote` in a sync, once `main` (and with it the
    ledger that says what waits) is merged: the names of the `waiting` branches and
    their tips are fetched and pushed; a branch nothing waits on any more (decided on
    this clone or another) is deleted here and on the remote. (brought in, closed,
    the refspecs pushed, the branches refused -> why).
    `refs` (ref -> sha): the sync's own fetch already brought them (with --prune) and
    it read both sides' branches since; else they are fetched and read here.

    `check(vault, sha)` says why a remote's branch is not taken (None: it is); one it
    refuses is left where it is, never checked out, merged or pushed back (what waits
    is listed from the ledger all the same).

    `rewritten`: this sync has just forgotten a phrase here (agent.vault.rewrite), the
    remote's branches included, which the remote itself may still hold: every branch
    here is pushed, and one of the remote's not taken here is deleted there.

    These branches are views the ledger rebuilds after every decision, so they are
    replaced rather than merged (`+` refspecs); `main` is never force-pushed."""
    tracking = f"refs/remotes/{remote}/{PREFIX}"
    if refs is None:
        vault.git("fetch", "--quiet", "--prune", "--no-write-fetch-head", remote,
                  fetch_refspec(remote), env={"GIT_TERMINAL_PROMPT": "0"})
    # Both sides' branches in one `git for-each-ref`.
    cut = len(f"refs/remotes/{remote}/")          # refs/remotes/origin/dream/4-9 -> dream/4-9
    local = ref_of(PREFIX)
    theirs: dict[str, str] = {}
    ours: dict[str, str] = {}
    if refs is None:
        refs = dict(line.partition(" ")[::2] for line in vault.git(
            "for-each-ref", "--format=%(refname) %(objectname)",
            *ref_patterns(remote)).splitlines())
    for ref, sha in refs.items():
        if ref.startswith(tracking):
            theirs[ref[cut:]] = sha
        elif ref.startswith(local):
            ours[ref[len("refs/heads/"):]] = sha
    brought, closed, refspecs = [], [], []
    refused: dict[str, str] = {}
    for branch, sha in theirs.items():
        if branch in waiting and branch not in ours:
            problem = check(vault, sha)
            if problem:
                refused[branch] = problem
                continue
            vault.git("update-ref", "-m", f"sync: proposal from {remote}", ref_of(branch), sha)
            ours[branch] = sha
            brought.append(branch)
    for branch in list(ours):
        if branch not in waiting:
            delete(vault, branch)
            del ours[branch]
            closed.append(branch)
    refspecs += [f"+{ref_of(b)}:{ref_of(b)}" for b, sha in ours.items()
                 if rewritten or theirs.get(b) != sha]
    refspecs += [f":{ref_of(b)}" for b in theirs if b not in waiting
                 or (rewritten and b not in ours)]
    if refspecs:
        vault.git("push", "--quiet", "--porcelain", remote, *refspecs,
                  env={"GIT_TERMINAL_PROMPT": "0"})
    return brought, closed, refspecs, refused
