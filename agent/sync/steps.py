"""The steps a sync runs (agent.sync.remotes plans which, and in what order): fetch,
read the refs, count what each side lacks, check what came in, follow tombstones, merge
under the vault lock, push, exchange the dream's proposal branches."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from agent.vault import git as gitrun
from agent.stores import kinds
from agent.vault import heldwrites
from agent.vault.change import Change
from agent.vault.gitstate import head_from_files
from agent.vault.repo import GitError, Vault
from agent.sync.mergetree import FACT_FILES, fact_notes, merge_tree
from agent.sync.result import SyncError, SyncResult, first_error

if TYPE_CHECKING:
    from agent.sync.arrived import Arrived

TOMBSTONES = ".forgotten"     # agent.stores.forgotten.FILE, loaded only when there is one


class Came:
    """What came in during one sync, read once (agent.sync.arrived) and asked by each
    step: `paths`, every path the commits that came in changed; `exact` while HEAD
    moved only by taking them (no hand edit committed, no history rewritten, no path
    settled by hand), so that those paths are all HEAD's move changed."""

    def __init__(self) -> None:
        self.arrived: Arrived | None = None
        self.paths: set[str] = set()
        self.exact = True

    def read(self, vault: Vault, ours: str | None, theirs: str) -> Arrived:
        """The commits of `theirs` that `ours` lacks: those read already when the same."""
        a = self.arrived
        if a is None or a.ours != ours or a.theirs != theirs:
            if a is not None:
                a.close()
            from agent.sync.arrived import Arrived
            a = self.arrived = Arrived.read(vault.root, ours, theirs)
            self.paths |= a.paths
        return a

    def close(self) -> None:
        if self.arrived is not None:
            self.arrived.close()


def current_branch(vault: Vault) -> str:
    sig = head_from_files(vault.root)          # no process when .git is a plain folder
    if sig is not None and sig.startswith(("ref:refs/heads/", "packed:refs/heads/",
                                           "unborn:refs/heads/")):
        name = sig.split(":", 2)[1].removeprefix("refs/heads/")
    else:
        name = vault.git("symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip()
    if not name:
        raise SyncError("The vault is on a detached HEAD: run `agent git switch main` "
                        "(or the branch you use) before syncing.")
    return name



def follow_tombstones(vault: Vault, remote: str, branch: str, result: SyncResult,
            came: Came) -> tuple[bool, bool]:
    """The tombstones of HEAD and the fetched branch (agent.sync.tombstones): those this
    machine made or accepted applied, the others that would rewrite commits here held.
    What to say goes to `result`; (whether the sync must merge and push nothing now,
    whether a tombstone rewrote the history here)."""
    objects = came.arrived.objects if came.arrived is not None else None
    if objects is not None and not (vault.state / heldwrites.STATE_FILE).exists() and \
            not objects.sizes([f"{rev}:{TOMBSTONES}"
                               for rev in ("HEAD", f"refs/remotes/{remote}/{branch}")]):
        # No tombstone on either side, and no held one to let go: nothing to follow,
        # nor the rewrite machinery to load (most pulls).
        return False, False
    from agent.sync import held, tombstones
    followed = tombstones.follow(vault, remote, branch, objects)
    result.forgotten.extend(followed.lines())
    waiting = held.hold_tombstones(vault, followed.held)
    result.held.extend(h.label() for h in waiting)
    result.waiting = followed.blocked
    return followed.blocked, bool(followed.applied)


def exchange_proposals(vault: Vault, remote: str, result: SyncResult,
               refs: dict[str, str] | None = None, rewritten: bool = False) -> bool:
    """The dream's proposal branches (dream/*) go both ways; the merged ledger says
    which still wait, so a decision made on any clone closes them everywhere. Whether
    any branch was brought, closed or pushed (none to read when neither side has one)."""
    from agent.vault import branches
    if refs is not None and not any(r.startswith(f"{p}/") for p in branches.ref_patterns(remote)
                                    for r in refs):
        return False
    from agent.stores import ledger

    waiting = {branches.branch_of(r["run"]) for r in ledger.waiting(vault.root)}
    try:
        from agent.sync import incoming
        done = branches.exchange(vault, remote, waiting, refs=refs, rewritten=rewritten,
                                 check=incoming.check_proposal)
        result.refused.update(done[3])
        return any(done)
    except GitError as e:
        raise SyncError(f"main is synced, but the proposal branches (dream/*) could not be "
                        f"exchanged with {remote}: {first_error(e.stderr)}") from None


def fetch(vault: Vault, remote: str, branch: str, with_proposals: bool = False) -> bool:
    """Fetch the branch (and, `with_proposals`, the dream/* branches in the same fetch);
    whether the proposal branches were fetched."""
    from agent.vault import branches
    spec = [f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}"]
    if with_proposals:
        # --prune drops tracking refs only under these refspecs: a proposal closed on
        # the remote, never the branch (a missing branch fails the fetch instead).
        spec = ["--prune", *spec, branches.fetch_refspec(remote)]
    try:
        # No `git maintenance run --auto` started by the fetch: the vault checks for
        # housekeeping itself, by two directory reads (Vault.maybe_gc), not a process.
        vault.git("-c", "maintenance.auto=false", "fetch", "--quiet", "--no-write-fetch-head",
                  remote, *spec, env={"GIT_TERMINAL_PROMPT": "0"})
        vault.maybe_gc()
        return with_proposals
    except GitError as e:
        if "couldn't find remote ref" in e.stderr:
            return False  # an empty remote: nothing to fetch, everything to push
        url = vault.git("remote", "get-url", remote, check=False).strip()
        raise SyncError(f"Could not fetch from {remote} ({url}): {first_error(e.stderr)}. "
                        f"Nothing changed.") from None


def read_refs(vault: Vault, remote: str, branch: str,
          seen: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    """(the fetched remote branch, HEAD) read from the .git folder (else in one `git
    for-each-ref`); None when missing. HEAD is refs/heads/<branch> (current_branch
    refuses a detached HEAD). The proposal branches (dream/*, here and fetched) are
    read by the same call into `seen`."""
    from agent.vault import branches, refs
    here = f"refs/heads/{current_branch(vault)}"
    tracking = f"refs/remotes/{remote}/{branch}"
    patterns = [tracking, here, *branches.ref_patterns(remote)]
    found = refs.read(vault.root, patterns)
    if found is None:
        found = dict(line.split(" ", 1)[::-1] for line in vault.git(
            "for-each-ref", "--format=%(objectname) %(refname)", *patterns).splitlines()
            if " " in line)
    if seen is not None:
        seen.clear()
        seen.update(found)
    return found.get(tracking), found.get(here)


def counts(vault: Vault, theirs: str | None, ours: str | None,
            came: Came | None = None) -> tuple[int, int]:
    """(commits HEAD holds that the fetched branch does not, and the other way round),
    in one `git rev-list` at most. With `came`, the commits that came in are read
    (kept there for the checks and the merge), and a fast-forward needs no count: HEAD
    is then a parent of one of them."""
    if theirs == ours:
        return 0, 0
    if not theirs or not ours:
        return count(vault, None, ours), count(vault, None, theirs)
    if came is not None:
        arrived = came.read(vault, ours, theirs)
        behind = len(arrived.commits)
        if behind and any(ours in c.parents for c in arrived.commits):
            return 0, behind
        return count(vault, theirs, ours), behind
    out = vault.git("rev-list", "--left-right", "--count", f"{ours}...{theirs}").split()
    return int(out[0]), int(out[1])


def check_incoming(vault: Vault, remote: str, branch: str, theirs: str | None,
                    ours: str | None, behind: int, came: Came) -> None:
    """Refuse what was fetched, before anything is merged or journalled, when a commit
    new to this machine (`behind` of them) holds what the vault does not take
    (agent.sync.incoming); the remote-tracking ref is put back (its reflog says where
    it was), so the vault is exactly as it was. The commits read stay in `came`, for
    the merge."""
    if not behind or not theirs:
        return                             # no commit new to this machine: nothing to check
    from agent.sync import incoming       # only when something came in
    try:
        incoming.check(vault.root, ours, theirs, f"{remote}/{branch}",
                       came.read(vault, ours, theirs))
    except incoming.IncomingRefused:
        ref = f"refs/remotes/{remote}/{branch}"
        before = vault.git("rev-parse", "--verify", "-q", f"{ref}@{{1}}", check=False).strip()
        if before:
            vault.git("update-ref", ref, before)
        else:
            vault.git("update-ref", "-d", ref)
        raise


def point_remote_head(vault: Vault, remote: str, branch: str,
                       config: dict[str, str] | None = None) -> None:
    """A bare remote on this disk made with plain `git init --bare` names `master` as its
    HEAD while the vault pushes `main`: point its HEAD at the vault's branch, so a plain
    `git clone` checks the vault out. Other transports are left alone."""
    url = (config or {}).get(f"remote.{remote}.url") or \
        vault.git("remote", "get-url", remote, check=False).strip()
    where = Path(url.removeprefix("file://")) if url.startswith(("/", "file://", ".")) else None
    if where is None:
        return
    where = (vault.root / where) if not where.is_absolute() else where
    try:
        text = (where / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return
    target = text.removeprefix("ref: ").strip()
    if not text.startswith("ref: ") or target == f"refs/heads/{branch}":
        return
    gd = ["--git-dir", str(where)]
    exists = gitrun.run([*gd, "rev-parse", "--verify", "-q", target], where).returncode == 0
    if not exists:
        gitrun.run([*gd, "symbolic-ref", "HEAD", f"refs/heads/{branch}"], where)


def remote_head(vault: Vault, remote: str, branch: str) -> str | None:
    out = vault.git("rev-parse", "--verify", "-q", f"refs/remotes/{remote}/{branch}",
                    check=False).strip()
    return out or None


def count(vault: Vault, since: str | None, until: str | None) -> int:
    if not until:
        return 0
    spec = [until] if not since else [f"{since}..{until}"]
    return int(vault.git("rev-list", "--count", *spec).strip() or 0)


def merge(vault: Vault, remote: str, branch: str, result: SyncResult, theirs: str,
           ours: str | None, ahead: int, behind: int, came: Came) -> int:
    """Bring what came in (`theirs`, not in HEAD `ours`: `behind` commits; HEAD has
    `ahead` commits `theirs` lacks) into HEAD (under the lock): fast-forward or a merge
    commit. How many commits HEAD then has that `theirs` lacks."""
    result.commits_in += behind
    arrived = came.read(vault, ours, theirs)
    from agent.sync import arrivals     # before anything moves: a proposal never goes unmarked
    arrivals.note(vault, ours, theirs, f"{remote}/{branch}", arrived)
    if ours is None:            # no commit here yet: the work tree moves as any other sync
        vault.journal.checkout_commit(theirs, f"sync: check out {remote}/{branch}")
        return 0
    source = f"{remote}/{branch}"
    forward = not ahead          # HEAD is an ancestor of what came in
    paths = arrived.paths
    if forward:
        tree = arrived.tree(theirs) or vault.git("rev-parse", f"{theirs}^{{tree}}").strip()
        notes: list[str] = []
    else:
        tree, notes, both = merge_tree(vault, ours, theirs, remote)
        if notes:                # a path settled by hand: its copy beside it is new
            came.exact = False
        # The facts merge can only have had work where the fact files came in.
        if set(FACT_FILES) & paths:
            notes = fact_notes(vault, ours, theirs, remote) + notes
        result.kept_both.extend(both)
    merged_tree = tree
    if any(kinds.held(path) for path in paths):    # else held.hold has nothing to hold
        from agent.sync import held
        tree, now_held = held.hold(vault, ours, tree, theirs, source, paths)
        result.held.extend(h.label() for h in now_held)
    else:
        now_held = []
    if forward and tree == merged_tree:
        vault.journal.checkout_commit(theirs, f"sync: fast-forward to {source}")
        return 0
    if tree != merged_tree:
        notes.append(f"Changes from {remote} to what decides what the agent runs, where it "
                     f"sends and how git behaves were not taken: this machine's version "
                     f"is kept until the person decides (`agent sync held`)."
                     + "".join(f"\n- {h.label()}" for h in now_held))
    change = Change("sync", f"merge from {remote}", body="\n\n".join(notes),
                    trailers={"Remote": source, "Merged": theirs})
    sha = vault.git("commit-tree", tree, "-p", ours, "-p", theirs, "-F", "-",
                    env=vault.agent_identity().env(), input=change.message()).strip()
    vault.journal.checkout_commit(sha, f"sync: merge from {remote}")
    result.merge_commit = sha
    return ahead + 1             # HEAD's own commits and the merge


def push(vault: Vault, remote: str, branch: str, config: dict[str, str] | None = None) -> bool:
    """Push HEAD; False if the remote moved meanwhile (fetch and merge again)."""
    p = gitrun.run(["push", "--quiet", "--porcelain", remote, f"HEAD:refs/heads/{branch}"],
                   vault.root, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    if p.returncode == 0:
        if (config or {}).get(f"remote.{remote}.fetch") != f"+refs/heads/*:refs/remotes/{remote}/*":
            # (with that refspec, git's push has moved the tracking ref itself)
            vault.git("update-ref", f"refs/remotes/{remote}/{branch}", "HEAD")
        known = (config or {}).get(f"branch.{branch}.remote") or \
            vault.git("config", f"branch.{branch}.remote", check=False).strip()
        if not known:
            vault.git("config", f"branch.{branch}.remote", remote)
            vault.git("config", f"branch.{branch}.merge", f"refs/heads/{branch}")
        return True
    text = p.stdout + p.stderr
    if "[rejected]" in text or "non-fast-forward" in text or "fetch first" in text:
        return False
    raise SyncError(f"Could not push to {remote}: {first_error(p.stderr or p.stdout)}. "
                    f"This vault's commits are safe here; run `agent sync` again later.")



def fact_changes(vault: Vault, old: str | None, new: str | None,
                  result: SyncResult, came: Came) -> tuple[int, int]:
    """Facts of MEMORY.md/USER.md that came in: (+added, -removed)."""
    if not old or not new or old == new or not result.commits_in:
        return 0, 0
    if came.exact and not set(FACT_FILES) & came.paths:
        return 0, 0              # no commit that came in changed them
    diff = vault.git("diff", "--no-color", "-U0", old, new, "--", *FACT_FILES)
    added = removed = 0
    for line in diff.splitlines():
        if line.startswith("+- ") or line.startswith("+* "):
            added += 1
        elif line.startswith("-- ") or line.startswith("-* "):
            removed += 1
    return added, removed


# ---- state and setup ---------------------------------------------------------------
