"""`agent sync` and `agent clone`: one vault on several machines through a git remote.

A sync is fetch, merge, push, with three promises:

- **Nothing is lost and no conflict marker is ever written.** The merge is computed
  with `git merge-tree` (nothing touches the work tree until the result is a commit),
  using the vault's merge drivers (`mergedriver`): transcripts and daily notes keep
  both sides' lines, facts changed differently on two machines are kept both ways and
  marked for the dream, cron.json merges job by job. A file no driver can merge keeps
  this machine's version in place and the other machine's beside it.
- **Published history is never rewritten.** No rebase, no force-push: a merge is a
  merge commit by the agent, `sync: merge from origin`; a push the remote rejects
  (it moved meanwhile) is followed by another fetch and merge, a few times at most.
- **A kill at any instant is repaired by the next command**: the merge commit exists
  before the work tree moves, and the move is journalled (`Vault.checkout_commit`).

The network is used outside the vault lock; the merge and the move happen under it,
after uncommitted hand edits were committed as the person's own commit.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from agent import clock
from agent.fs import atomic, safe
from agent.stores import kinds
from agent.sync import mergedriver
from agent.vault import attributes, heldwrites
from agent.vault.change import Change
from agent.vault import git as gitrun
from agent.vault.git import filters_key, know_filters
from agent.vault.gitstate import UnfinishedGit, head_from_files, unfinished_operation
from agent.vault.identity import HOST_KEY, check_host
from agent.vault.layout import GIT_ONLY, Layout
from agent.vault.repo import MARKER, GitError, Vault, VaultError
from agent.sync.jobclaims import _CRON_FILE, claim_jobs
from agent.sync.mergetree import FACT_FILES, fact_notes, merge_tree
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.sync.arrived import Arrived

MAX_ATTEMPTS = 4
STATE_FILE = "sync.json"
_TOMBSTONES = ".forgotten"     # agent.stores.forgotten.FILE, loaded only when there is one


class SyncError(VaultError):
    """A sync that could not be done; the message says why and what to do."""


class _Came:
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


class SyncResult:
    """What one sync did, filled in as it goes (a plain class: every sync builds this
    one, and a dataclass's generated methods cost its start a millisecond)."""

    def __init__(self, remote: str, branch: str) -> None:
        self.remote, self.branch = remote, branch
        self.commits_in = self.commits_out = 0
        self.pushed = False
        self.facts_added = self.facts_removed = 0
        self.kept_both: list[str] = []
        self.merge_commit: str | None = None
        self.head: str | None = None
        self.claimed: list[str] = []           # jobs given to this machine
        self.held: list[str] = []              # incoming changes held (labels)
        self.refused: dict[str, str] = {}      # proposal branches not taken
        self.forgotten: list[str] = []         # what the tombstones did (lines)
        self.waiting = False       # a forget made elsewhere waits: nothing merged or pushed
        # HEAD's move, when every path it changed is known: (from, to, the paths), for
        # the search index's refresh (agent.search.update), so it need not ask git.
        self.moved: tuple[str, str, list[str]] | None = None

    def line(self) -> str:
        """`sync: 3 commits in (memory: +2 facts), 5 out`"""
        inc = f"{self.commits_in} commit{'s' if self.commits_in != 1 else ''} in"
        if self.facts_added or self.facts_removed:
            parts = []
            if self.facts_added:
                parts.append(f"+{self.facts_added} fact{'s' if self.facts_added != 1 else ''}")
            if self.facts_removed:
                parts.append(f"-{self.facts_removed}")
            inc += f" (memory: {', '.join(parts)})"
        out = f"{self.commits_out} out" if self.pushed or not self.commits_out else \
            f"{self.commits_out} not pushed"
        return f"sync: {inc}, {out}"

    def refused_lines(self) -> list[str]:
        """A line for each proposal branch the remote offered and this vault did not take."""
        return [f"refused: proposal branch {b} from {self.remote}: {why}. It is not taken "
                f"here; `agent review` lists what waits from the ledger."
                for b, why in sorted(self.refused.items())]

    def held_line(self) -> str | None:
        """The one line saying what came in and was not taken, or None."""
        if not self.held:
            return None
        return (f"held: {', '.join(self.held)} from {self.remote} (this machine keeps its "
                f"own version until you decide: `agent sync held`)")

    def as_dict(self) -> dict:
        return {"remote": self.remote, "branch": self.branch, "in": self.commits_in,
                "out": self.commits_out, "pushed": self.pushed,
                "facts_added": self.facts_added, "facts_removed": self.facts_removed,
                "kept_both": self.kept_both, "merge": self.merge_commit, "head": self.head,
                "claimed": self.claimed, "held": self.held, "refused": self.refused,
                "forgotten": self.forgotten, "waiting": self.waiting}


# ---- which remote -----------------------------------------------------------------


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


def _config(vault: Vault) -> dict[str, str]:
    """The remotes', branches' and merge drivers' settings and this machine's name,
    read in one `git config` (the last value of a key wins, as with `git config KEY`;
    the machine's name counts only from the vault's own config). The filter drivers
    are read by the same call, for the `-c` options that switch them off in every
    later git call (git.no_filters), which then need no `git config` of their own."""
    key = filters_key(vault.root)
    p = gitrun.run(["config", "-z", "--show-scope", "--get-regexp",
                    r"^(remote|branch|merge|agent|filter)\."], vault.root,
                   filters=False)      # it reads them: no filter runs on a config read
    out = p.stdout.split("\0")
    have: dict[str, str] = {}
    filters = []
    for scope, item in zip(out[0::2], out[1::2]):
        name, _, value = item.partition("\n")
        if name.startswith("filter."):
            filters.append(name)
        elif name == HOST_KEY and scope != "local":
            continue
        elif name:
            have[name] = value
    know_filters(vault.root, filters, key)
    return have


def _remotes(config: dict[str, str]) -> list[str]:
    names = [k[len("remote."):k.rindex(".")] for k in config
             if k.startswith("remote.") and k.count(".") >= 2]
    return list(dict.fromkeys(names))


def upstream(vault: Vault, remote: str | None = None,
             config: dict[str, str] | None = None) -> tuple[str, str]:
    """(remote, branch) to sync with: --remote, else the branch's upstream, else origin."""
    branch = current_branch(vault)
    config = _config(vault) if config is None else config
    remotes = _remotes(config)
    merge_ref = config.get(f"branch.{branch}.merge", "").strip()
    if remote:
        if remote not in remotes:
            raise SyncError(f"There is no remote named '{remote}' in this vault "
                            f"(remotes: {', '.join(remotes) or 'none'}). Add it with "
                            f"`agent git remote add {remote} URL`.")
        return remote, merge_ref.removeprefix("refs/heads/") or branch
    configured = config.get(f"branch.{branch}.remote", "").strip()
    if configured and configured in remotes:
        return configured, merge_ref.removeprefix("refs/heads/") or branch
    if "origin" in remotes:
        return "origin", branch
    if len(remotes) == 1:
        return remotes[0], branch
    if not remotes:
        raise SyncError("This vault has no remote to sync with. Add one, then sync:\n"
                        "  agent git remote add origin URL\n  agent sync")
    raise SyncError(f"This vault has several remotes ({', '.join(remotes)}) and none is "
                    f"'origin': say which with `agent sync --remote NAME`.")


# ---- the sync ---------------------------------------------------------------------


def sync(vault: Vault, remote: str | None = None, push: bool = True,
         now: datetime | None = None) -> SyncResult:
    """Fetch, merge and push; the result says what came in and went out."""
    from agent.vault import rewrite_journal
    if rewrite_journal.pending(vault):     # a killed forget: settled before any fetch
        with vault.locked():
            pass
    # Conflicted files are found by the `git status` the vault lock runs (below), before
    # anything is merged or committed; the rest needs no git process.
    problem = unfinished_operation(vault.root, unmerged=False)
    if problem:
        raise UnfinishedGit(problem)
    config = _config(vault)
    remote, branch = upstream(vault, remote, config)
    ensure_setup(vault, config)
    result = SyncResult(remote, branch)
    # The refs as the last sync left them, when it found nothing to repair (below).
    settled = (last_sync(vault) or {}).get("refs")
    start = None
    ours = None
    seen: dict[str, str] = {}     # the refs as read after the fetch (proposal branches too)
    same = clean = rewritten = False
    came = _Came()
    try:
        for attempt in range(MAX_ATTEMPTS):
            # The branch and the dream's proposal branches in one fetch (one connection).
            dream = _fetch(vault, remote, branch, with_proposals=push)
            theirs, ours = _refs(vault, remote, branch, seen)
            if attempt == 0:
                start = ours
            ahead, behind = _counts(vault, theirs, ours, came)
            _check_incoming(vault, remote, branch, theirs, ours, behind, came)
            # Every ref as a sync that had nothing to repair left it: its tombstones were
            # applied and its proposal branches exchanged then, so they need no reading now.
            same = dream and seen == settled
            if not same:
                blocked, applied = _follow(vault, remote, branch, result, came)
                if blocked:                  # a forget waits for the person: nothing goes
                    break
                if applied:                  # forgotten elsewhere: here too
                    rewritten = True
                    came.exact = False
                    theirs, ours = _refs(vault, remote, branch, seen)
                    start = ours
                    ahead, behind = _counts(vault, theirs, ours, came)
            # HEAD read from the .git folder (no process) tells whether the lock's repair,
            # the merge or a claim moved it, so the refs are read again only then.
            sig = head_from_files(vault.root)
            with vault.locked():
                # Hand edits committed now were not there when the tombstones were read.
                clean = sig is not None and head_from_files(vault.root) == sig
                if not clean:
                    came.exact = False
                    ours = vault.head()
                    ahead, behind = _counts(vault, theirs, ours, came)
                if behind:
                    ahead = _merge(vault, remote, branch, result, theirs, ours, ahead, behind,
                                   came)
                claimed, claim = claim_jobs(vault)
                result.claimed += claimed
                if sig is None or head_from_files(vault.root) != sig:
                    ours = vault.head()
                    if claim or sig is None:    # else the merge said how far ahead HEAD is
                        ahead = _count(vault, theirs, ours) if theirs != ours else 0
            result.commits_out = ahead
            if not push or not result.commits_out:
                break
            if _push(vault, remote, branch, config):
                result.pushed = True
                break
        else:
            raise SyncError(f"{remote} kept moving while this vault pushed ({MAX_ATTEMPTS} "
                            f"tries): run `agent sync` again.")
        result.head = ours
        exchanged = False
        moved = head_from_files(vault.root)
        if push and not same and not result.waiting:
            exchanged = _proposals(vault, remote, result, refs=seen if dream else None,
                                   rewritten=rewritten)
        if moved is None or head_from_files(vault.root) != moved:
            came.exact = False
        if result.pushed:
            _point_remote_head(vault, remote, branch, config)
        result.facts_added, result.facts_removed = _fact_changes(vault, start, result.head,
                                                                 result, came)
    finally:
        came.close()
    if came.exact and came.paths and start and result.head and result.head != start:
        # Every path HEAD's move can have changed (and cron.json, which a claim of jobs
        # commits).
        result.moved = (start, result.head, sorted(came.paths | {_CRON_FILE}))
    refs = None
    if push and dream and clean and not exchanged and not result.forgotten:
        # What the refs are now: HEAD, and the remote's branch where it was fetched or
        # (pushed) where HEAD is; the proposal branches as read (none moved).
        refs = {**seen, f"refs/heads/{current_branch(vault)}": ours}
        refs[f"refs/remotes/{remote}/{branch}"] = ours if result.pushed else theirs
        refs = {k: v for k, v in refs.items() if v}
    _save_state(vault, result, now or clock.now(), refs)
    return result


def _follow(vault: Vault, remote: str, branch: str, result: SyncResult,
            came: _Came) -> tuple[bool, bool]:
    """The tombstones of HEAD and the fetched branch (agent.sync.tombstones): those this
    machine made or accepted applied, the others that would rewrite commits here held.
    What to say goes to `result`; (whether the sync must merge and push nothing now,
    whether a tombstone rewrote the history here)."""
    objects = came.arrived.objects if came.arrived is not None else None
    if objects is not None and not (vault.state / heldwrites.STATE_FILE).exists() and \
            not objects.sizes([f"{rev}:{_TOMBSTONES}"
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


def _proposals(vault: Vault, remote: str, result: SyncResult,
               refs: dict[str, str] | None = None, rewritten: bool = False) -> bool:
    """The dream's proposal branches (dream/*) go both ways; the merged ledger says
    which still wait, so a decision made on any clone closes them everywhere. Whether
    any branch was brought, closed or pushed (none to read when neither side has one)."""
    from agent.vault import branches
    if refs is not None and not any(r.startswith(f"{p}/") for p in branches.ref_patterns(remote)
                                    for r in refs):
        return False
    from agent.stores import ledger

    waiting = {branches.branch_of(r["run"]) for r in ledger.proposals(ledger.read(vault.root))}
    try:
        from agent.sync import incoming
        done = branches.exchange(vault, remote, waiting, refs=refs, rewritten=rewritten,
                                 check=incoming.check_proposal)
        result.refused.update(done[3])
        return any(done)
    except GitError as e:
        raise SyncError(f"main is synced, but the proposal branches (dream/*) could not be "
                        f"exchanged with {remote}: {_first_error(e.stderr)}") from None


def _fetch(vault: Vault, remote: str, branch: str, with_proposals: bool = False) -> bool:
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
        raise SyncError(f"Could not fetch from {remote} ({url}): {_first_error(e.stderr)}. "
                        f"Nothing changed.") from None


def _refs(vault: Vault, remote: str, branch: str,
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


def _counts(vault: Vault, theirs: str | None, ours: str | None,
            came: _Came | None = None) -> tuple[int, int]:
    """(commits HEAD holds that the fetched branch does not, and the other way round),
    in one `git rev-list` at most. With `came`, the commits that came in are read
    (kept there for the checks and the merge), and a fast-forward needs no count: HEAD
    is then a parent of one of them."""
    if theirs == ours:
        return 0, 0
    if not theirs or not ours:
        return _count(vault, None, ours), _count(vault, None, theirs)
    if came is not None:
        arrived = came.read(vault, ours, theirs)
        behind = len(arrived.commits)
        if behind and any(ours in c.parents for c in arrived.commits):
            return 0, behind
        return _count(vault, theirs, ours), behind
    out = vault.git("rev-list", "--left-right", "--count", f"{ours}...{theirs}").split()
    return int(out[0]), int(out[1])


def _check_incoming(vault: Vault, remote: str, branch: str, theirs: str | None,
                    ours: str | None, behind: int, came: _Came) -> None:
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


def _point_remote_head(vault: Vault, remote: str, branch: str,
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


def _remote_head(vault: Vault, remote: str, branch: str) -> str | None:
    out = vault.git("rev-parse", "--verify", "-q", f"refs/remotes/{remote}/{branch}",
                    check=False).strip()
    return out or None


def _count(vault: Vault, since: str | None, until: str | None) -> int:
    if not until:
        return 0
    spec = [until] if not since else [f"{since}..{until}"]
    return int(vault.git("rev-list", "--count", *spec).strip() or 0)


def _merge(vault: Vault, remote: str, branch: str, result: SyncResult, theirs: str,
           ours: str | None, ahead: int, behind: int, came: _Came) -> int:
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


def _push(vault: Vault, remote: str, branch: str, config: dict[str, str] | None = None) -> bool:
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
    raise SyncError(f"Could not push to {remote}: {_first_error(p.stderr or p.stdout)}. "
                    f"This vault's commits are safe here; run `agent sync` again later.")


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        line = line.strip().removeprefix("fatal: ").removeprefix("error: ")
        if line:
            return line.rstrip(".")
    return "git failed"


def _fact_changes(vault: Vault, old: str | None, new: str | None,
                  result: SyncResult, came: _Came) -> tuple[int, int]:
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


_CURSOR = ".dream_cursor"   # agent.stores.archive.CURSOR, loaded only to convert it

def _save_state(vault: Vault, result: SyncResult, when: datetime,
                refs: dict[str, str] | None = None) -> None:
    """What the sync did, for `agent status`; and `refs`, every ref it read as it left
    them, when it had nothing left to repair: the next sync that finds them so reads
    no tombstones and exchanges no proposal branches (nothing changed since)."""
    # Not fsynced (a disk flush would cost a sync with nothing to do more than its git
    # work): lost or torn in a crash, it reads as no record, and the next sync does all.
    atomic.write_json(vault.state / STATE_FILE,
                      {"at": when.isoformat(timespec="seconds"), **result.as_dict(),
                       **({"refs": refs} if refs else {})}, durable=False)


def last_sync(vault: Vault) -> dict | None:
    data = atomic.read_json(vault.state / STATE_FILE)
    return data if isinstance(data, dict) else None


def ahead_behind(vault: Vault) -> tuple[str, int, int] | None:
    """(remote/branch, ahead, behind) against the last fetched state; None if no remote."""
    try:
        remote, branch = upstream(vault)
    except SyncError:
        return None
    ref = _remote_head(vault, remote, branch)
    if not ref or not vault.head():
        return (f"{remote}/{branch}", _count(vault, None, vault.head()) if vault.head() else 0, 0)
    out = vault.git("rev-list", "--left-right", "--count", f"HEAD...{ref}").split()
    return f"{remote}/{branch}", int(out[0]), int(out[1])


def ensure_setup(vault: Vault, config: dict[str, str] | None = None) -> str | None:
    """Merge drivers in .git/config, the vault's merge rules in .gitattributes, and the
    dream's record as a mergeable set: an older vault is converted in one commit that
    says so. `config`: the settings _config read, when the caller has them."""
    attributes.configure(vault, mergedriver.git_config(), have=config)
    vault.host(known=(config or {}).get(HOST_KEY))
    text = safe.read_text(vault.root, ".gitattributes", errors="replace") or ""
    lines = text.splitlines()
    old_rules = {"sessions/**/*.jsonl merge=union", "memory/*.md merge=union"}
    missing = [a for a in kinds.ATTRIBUTES if a not in lines]
    cursor_text = safe.read_text(vault.root, _CURSOR, errors="replace") or ""
    old_cursor = bool(cursor_text.strip()) and not cursor_text.lstrip().startswith("#")
    if not missing and not old_rules & set(lines) and not old_cursor:
        return None
    from agent.stores import archive
    with vault.locked():
        done = []
        if missing or old_rules & set(lines):
            kept = [line for line in lines if line not in old_rules] + missing
            vault.write_text(".gitattributes", "\n".join(kept) + "\n")
            done.append("Merge rules in .gitattributes: transcripts and daily notes keep both "
                        "machines' lines, facts changed on two machines are kept both ways "
                        "for the dream to settle, cron.json merges job by job.")
        if old_cursor:
            record = archive.read_consolidated(vault.root)
            vault.write_text(archive.CURSOR, record.render())
            done.append(f"{archive.CURSOR} now lists the consolidated archive entries "
                        f"(1-{record.high}), so two machines' records merge.")
        return vault.commit(Change("sync", "set up this vault for syncing between machines",
                                   body="\n\n".join(done)))


def _check_out_vault(url: str, path: Path) -> None:
    """Check out the branch that holds the vault, whatever the remote's HEAD names (a
    plain `git init --bare` says `master` while the vault pushes `main`), after its
    newest tree was checked (agent.sync.incoming)."""
    def git(*args, check=True):
        q = gitrun.run(args, path)
        if check and q.returncode:
            raise GitError(list(args), q.returncode, q.stderr)
        return q

    branches = git("for-each-ref", "--format=%(refname:lstrip=3)", "refs/remotes/origin/"
                   ).stdout.split()
    branches = [b for b in branches if b != "HEAD"]
    head = git("symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD",
               check=False).stdout.strip().removeprefix("origin/")
    order = [b for b in dict.fromkeys([head, "main", "master", *sorted(branches)]) if b in branches]
    vaults = [b for b in order if git("cat-file", "-e", f"refs/remotes/origin/{b}:{MARKER}",
                                      check=False).returncode == 0]
    if not vaults and branches == ["agent-crypt"]:
        from agent.sync.crypt import cloning
        raise cloning.Encrypted(url)
    if not vaults:
        if not branches:
            raise SyncError(f"{url} is not a vault: it is empty. Nothing was made at {path}. To "
                            f"fill it from a vault, run `agent git remote add origin {url}` "
                            f"then `agent sync` in that vault.")
        raise SyncError(f"{url} is not a vault: no branch of it ({', '.join(sorted(branches))}) "
                        f"has an agent.toml. Nothing was made at {path}. Check the URL.")
    branch = vaults[0]
    from agent.sync import incoming
    incoming.check_tree(path, f"refs/remotes/origin/{branch}", url)
    local = git("symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
    git("checkout", "--quiet", "-B", branch, "--track", f"origin/{branch}")
    if local and local != branch:
        git("branch", "-D", local, check=False)   # the remote HEAD's branch, not a vault


def _remove_clone(path: Path, made: bool) -> None:
    import shutil
    if made:
        shutil.rmtree(path, ignore_errors=True)
    else:                        # an empty folder the person named: leave it empty
        for child in path.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()


def clone(url: str, path: Path, host: str | None = None, expect: str | None = None,
          layout: Layout = GIT_ONLY) -> Vault:
    """A vault cloned from `url` into `path`, set up as `agent init` sets one up; `host`
    names this machine (default: its hostname), `layout` what the vault is told of the
    product's files (agent.ops.vaults.LAYOUT). An encrypted remote (agent.sync.crypt)
    is cloned through its helper; `expect`: the fingerprint it must have. What decides
    what runs (agent.toml, skills, heartbeats, cron jobs, ...) is held as `agent
    init`'s until the person accepts the remote's (agent.sync.held.hold_clone)."""
    host = check_host(host) if host else None
    path = Path(path).expanduser().absolute()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise SyncError(f"{path} already exists and is not empty: choose a new folder.")
    made = not path.exists()
    from agent.sync.crypt import cloning
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **cloning.prepare(url, expect)}
    p = gitrun.run(["clone", "--quiet", "--no-checkout", url, str(path)], None, env=env)
    if p.returncode:
        if made and path.exists():     # (what a refusing helper leaves)
            _remove_clone(path, made)
        raise SyncError(cloning.refused(url, _first_error(p.stderr)) or
                        f"Could not clone {url}: {_first_error(p.stderr)}.")
    try:
        _check_out_vault(url, path)
    except cloning.Encrypted:      # a plain URL of an encrypted remote: through its helper
        _remove_clone(path, made)
        return clone(cloning.PREFIX + url, path, host, expect, layout)
    except VaultError:
        _remove_clone(path, made)
        raise
    vault = Vault.open(path, layout)
    if host:
        vault.identity.set_host(host)
    vault._configure_repo()
    vault.state.mkdir(exist_ok=True)
    from agent.sync import arrivals     # every proposal waiting in a clone came from there
    source = f"origin/{current_branch(vault)}"
    arrivals.note(vault, None, "HEAD", source)
    # What decides what runs waits for the person, as a sync's would (agent.sync.held).
    from agent.sync import held
    held.hold_clone(vault, source)
    return vault
