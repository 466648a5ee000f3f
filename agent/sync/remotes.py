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

A sync is planned from the refs: each pass fetches, reads the refs and counts what
each side lacks (a `Plan`), then runs what the plan calls for (follow tombstones when
the refs moved since the last settled sync, merge when behind, push when ahead), and
passes again only when the remote moved while this vault pushed. The steps themselves
are in `agent.sync.steps`, `agent clone` in `agent.sync.clone`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent import clock
from agent.fs import atomic, safe
from agent.stores import kinds
from agent.sync import mergedriver, steps
from agent.sync.jobclaims import _CRON_FILE, claim_jobs
from agent.sync.mergetree import FACT_FILES
from agent.sync.result import SyncError, SyncResult
from agent.sync.steps import Came, current_branch
from agent.vault import attributes
from agent.vault import git as gitrun
from agent.vault.change import Change
from agent.vault.git import filters_key, know_filters
from agent.vault.gitstate import UnfinishedGit, head_from_files, unfinished_operation
from agent.vault.identity import HOST_KEY
from agent.vault.repo import Vault

__all__ = ["FACT_FILES", "SyncError", "SyncResult", "ahead_behind", "current_branch",
           "ensure_setup", "last_sync", "sync", "upstream"]

MAX_ATTEMPTS = 4
STATE_FILE = "sync.json"


# ---- which remote -----------------------------------------------------------------


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

# ---- the sync ---------------------------------------------------------------------


@dataclass
class Plan:
    """What one pass must do, read from the refs after its fetch: the fetched branch
    (`theirs`) and HEAD (`ours`), the commits each holds that the other lacks, and
    whether every ref is as the last settled sync left it (`unchanged`: its tombstones
    were followed and its proposal branches exchanged then, so they need no reading)."""
    theirs: str | None
    ours: str | None
    ahead: int
    behind: int
    unchanged: bool


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
    run = _Sync(vault, remote, branch, config, push,
                # The refs as the last sync left them, when it found nothing to repair.
                settled=(last_sync(vault) or {}).get("refs"))
    try:
        run.passes()
        run.finish()
    finally:
        run.came.close()
    _save_state(vault, run.result, now or clock.now(), run.settled_refs())
    return run.result


class _Sync:
    """One sync's passes and what they carry from one to the next."""

    def __init__(self, vault: Vault, remote: str, branch: str, config: dict[str, str],
                 push: bool, settled: Any) -> None:
        self.vault, self.remote, self.branch = vault, remote, branch
        self.config, self.push, self.settled = config, push, settled
        self.result = SyncResult(remote, branch)
        self.came = Came()
        self.seen: dict[str, str] = {}   # the refs as read after the fetch (proposal branches too)
        self.start: str | None = None    # HEAD before the sync (after a forget it followed)
        self.ours: str | None = None
        self.theirs: str | None = None
        self.fetched_proposals = False
        self.same = self.clean = self.rewritten = self.exchanged = False

    def passes(self) -> None:
        """Fetch, merge and push until the push lands (or nothing is to go out)."""
        for attempt in range(MAX_ATTEMPTS):
            plan = self.plan(first=attempt == 0)
            if not plan.unchanged:
                followed = self.follow(plan)
                if followed is None:     # a forget waits for the person: nothing goes
                    return
                plan = followed
            self.result.commits_out = self.merge(plan)
            if not self.push or not self.result.commits_out:
                return
            if steps.push(self.vault, self.remote, self.branch, self.config):
                self.result.pushed = True
                return
        raise SyncError(f"{self.remote} kept moving while this vault pushed ({MAX_ATTEMPTS} "
                        f"tries): run `agent sync` again.")

    def plan(self, first: bool) -> Plan:
        """Fetch, then read what the refs say this pass must do (what came in is
        checked before anything is merged)."""
        vault, remote, branch = self.vault, self.remote, self.branch
        # The branch and the dream's proposal branches in one fetch (one connection).
        self.fetched_proposals = steps.fetch(vault, remote, branch, with_proposals=self.push)
        self.theirs, self.ours = steps.read_refs(vault, remote, branch, self.seen)
        if first:
            self.start = self.ours
        ahead, behind = steps.counts(vault, self.theirs, self.ours, self.came)
        steps.check_incoming(vault, remote, branch, self.theirs, self.ours, behind, self.came)
        self.same = self.fetched_proposals and self.seen == self.settled
        return Plan(self.theirs, self.ours, ahead, behind, self.same)

    def follow(self, plan: Plan) -> Plan | None:
        """The tombstones of both sides followed: the plan again when they rewrote the
        history here, None when a forget made elsewhere waits for the person."""
        vault, remote, branch = self.vault, self.remote, self.branch
        blocked, applied = steps.follow_tombstones(vault, remote, branch, self.result,
                                                   self.came)
        if blocked:
            return None
        if not applied:
            return plan
        # Forgotten elsewhere: here too, so the refs and counts are read again.
        self.rewritten = True
        self.came.exact = False
        self.theirs, self.ours = steps.read_refs(vault, remote, branch, self.seen)
        self.start = self.ours
        ahead, behind = steps.counts(vault, self.theirs, self.ours, self.came)
        return Plan(self.theirs, self.ours, ahead, behind, plan.unchanged)

    def merge(self, plan: Plan) -> int:
        """Under the vault lock: what came in merged, unclaimed cron jobs claimed. How
        many commits HEAD then holds that the fetched branch lacks."""
        vault, theirs, ahead, behind = self.vault, plan.theirs, plan.ahead, plan.behind
        # HEAD read from the .git folder (no process) tells whether the lock's repair,
        # the merge or a claim moved it, so the refs are read again only then.
        sig = head_from_files(vault.root)
        with vault.locked():
            # Hand edits committed now were not there when the tombstones were read.
            self.clean = sig is not None and head_from_files(vault.root) == sig
            if not self.clean:
                self.came.exact = False
                self.ours = vault.head()
                ahead, behind = steps.counts(vault, theirs, self.ours, self.came)
            if behind and theirs is not None:
                ahead = steps.merge(vault, self.remote, self.branch, self.result, theirs,
                                    self.ours, ahead, behind, self.came)
            claimed, claim = claim_jobs(vault)
            self.result.claimed += claimed
            if sig is None or head_from_files(vault.root) != sig:
                self.ours = vault.head()
                if claim or sig is None:    # else the merge said how far ahead HEAD is
                    ahead = steps.count(vault, theirs, self.ours) if theirs != self.ours else 0
        return ahead

    def finish(self) -> None:
        """After the passes: proposal branches exchanged, the remote's HEAD pointed,
        what came in counted."""
        vault, result = self.vault, self.result
        result.head = self.ours
        moved = head_from_files(vault.root)
        if self.push and not self.same and not result.waiting:
            self.exchanged = steps.exchange_proposals(
                vault, self.remote, result, refs=self.seen if self.fetched_proposals else None,
                rewritten=self.rewritten)
        if moved is None or head_from_files(vault.root) != moved:
            self.came.exact = False
        if result.pushed:
            steps.point_remote_head(vault, self.remote, self.branch, self.config)
        result.facts_added, result.facts_removed = steps.fact_changes(
            vault, self.start, result.head, result, self.came)
        if self.came.exact and self.came.paths and self.start and result.head and \
                result.head != self.start:
            # Every path HEAD's move can have changed (and cron.json, which a claim of
            # jobs commits).
            result.moved = (self.start, result.head, sorted(self.came.paths | {_CRON_FILE}))

    def settled_refs(self) -> dict[str, str] | None:
        """Every ref as this sync leaves them, when it had nothing left to repair: HEAD,
        the remote's branch where it was fetched or (pushed) where HEAD is, the proposal
        branches as read (none moved)."""
        result = self.result
        if not (self.push and self.fetched_proposals and self.clean and not self.exchanged
                and not result.forgotten):
            return None
        refs: dict[str, str | None] = {**self.seen,
                                       f"refs/heads/{current_branch(self.vault)}": self.ours}
        refs[f"refs/remotes/{self.remote}/{self.branch}"] = \
            self.ours if result.pushed else self.theirs
        return {k: v for k, v in refs.items() if v}


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


def last_sync(vault: Vault) -> dict[str, Any] | None:
    data = atomic.read_json(vault.state / STATE_FILE)
    return data if isinstance(data, dict) else None


def ahead_behind(vault: Vault) -> tuple[str, int, int] | None:
    """(remote/branch, ahead, behind) against the last fetched state; None if no remote."""
    try:
        remote, branch = upstream(vault)
    except SyncError:
        return None
    ref = steps.remote_head(vault, remote, branch)
    if not ref or not vault.head():
        return (f"{remote}/{branch}", steps.count(vault, None, vault.head()) if vault.head() else 0, 0)
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
