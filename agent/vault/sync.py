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
import re
import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from agent.stores import archive, merge
from agent.stores import cron as cronfile
from agent.vault import atomic, mergedriver
from agent.vault.change import Change
from agent.vault.repo import _GIT_BASE, GitError, Vault, VaultError, check_host

MAX_ATTEMPTS = 4
STATE_FILE = "sync.json"


class SyncError(VaultError):
    """A sync that could not be done; the message says why and what to do."""


@dataclass
class SyncResult:
    remote: str
    branch: str
    commits_in: int = 0
    commits_out: int = 0
    pushed: bool = False
    facts_added: int = 0
    facts_removed: int = 0
    kept_both: list[str] = field(default_factory=list)
    merge_commit: str | None = None
    head: str | None = None
    claimed: list[str] = field(default_factory=list)   # jobs given to this machine

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

    def as_dict(self) -> dict:
        return {"remote": self.remote, "branch": self.branch, "in": self.commits_in,
                "out": self.commits_out, "pushed": self.pushed,
                "facts_added": self.facts_added, "facts_removed": self.facts_removed,
                "kept_both": self.kept_both, "merge": self.merge_commit, "head": self.head,
                "claimed": self.claimed}


# ---- which remote -----------------------------------------------------------------


def current_branch(vault: Vault) -> str:
    name = vault.git("symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip()
    if not name:
        raise SyncError("The vault is on a detached HEAD: run `agent git switch main` "
                        "(or the branch you use) before syncing.")
    return name


def upstream(vault: Vault, remote: str | None = None) -> tuple[str, str]:
    """(remote, branch) to sync with: --remote, else the branch's upstream, else origin."""
    branch = current_branch(vault)
    remotes = vault.git("remote").split()
    if remote:
        if remote not in remotes:
            raise SyncError(f"There is no remote named '{remote}' in this vault "
                            f"(remotes: {', '.join(remotes) or 'none'}). Add it with "
                            f"`agent git remote add {remote} URL`.")
        merge_ref = vault.git("config", f"branch.{branch}.merge", check=False).strip()
        return remote, merge_ref.removeprefix("refs/heads/") or branch
    configured = vault.git("config", f"branch.{branch}.remote", check=False).strip()
    if configured and configured in remotes:
        merge_ref = vault.git("config", f"branch.{branch}.merge", check=False).strip()
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
    vault.check_committable()
    remote, branch = upstream(vault, remote)
    ensure_setup(vault)
    result = SyncResult(remote, branch)
    from agent.vault import rewrite
    start = vault.head()
    for _ in range(MAX_ATTEMPTS):
        _fetch(vault, remote, branch)
        if rewrite.follow(vault, remote, branch, result):   # forgotten elsewhere: here too
            start = vault.head()
        with vault.locked():
            _merge(vault, remote, branch, result)
            result.claimed += claim_jobs(vault)[0]
            ours = vault.head()
            theirs = _remote_head(vault, remote, branch)
        result.commits_out = _count(vault, theirs, ours)
        if not push or not result.commits_out:
            break
        if _push(vault, remote, branch):
            result.pushed = True
            break
    else:
        raise SyncError(f"{remote} kept moving while this vault pushed ({MAX_ATTEMPTS} "
                        f"tries): run `agent sync` again.")
    result.head = vault.head()
    result.facts_added, result.facts_removed = _fact_changes(vault, start, result.head, result)
    _save_state(vault, result, now or datetime.now().astimezone())
    return result


def _fetch(vault: Vault, remote: str, branch: str) -> None:
    try:
        vault.git("fetch", "--quiet", "--no-write-fetch-head", remote,
                  f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}",
                  env={"GIT_TERMINAL_PROMPT": "0"})
    except GitError as e:
        if "couldn't find remote ref" in e.stderr:
            return  # an empty remote: nothing to fetch, everything to push
        url = vault.git("remote", "get-url", remote, check=False).strip()
        raise SyncError(f"Could not fetch from {remote} ({url}): {_first_error(e.stderr)}. "
                        f"Nothing changed.") from None


def _remote_head(vault: Vault, remote: str, branch: str) -> str | None:
    out = vault.git("rev-parse", "--verify", "-q", f"refs/remotes/{remote}/{branch}",
                    check=False).strip()
    return out or None


def _is_ancestor(vault: Vault, a: str, b: str) -> bool:
    return subprocess.run(["git", *_GIT_BASE, "merge-base", "--is-ancestor", a, b],
                          cwd=vault.root, capture_output=True).returncode == 0


def _count(vault: Vault, since: str | None, until: str | None) -> int:
    if not until:
        return 0
    spec = [until] if not since else [f"{since}..{until}"]
    return int(vault.git("rev-list", "--count", *spec).strip() or 0)


def _merge(vault: Vault, remote: str, branch: str, result: SyncResult) -> None:
    """Bring what came in into HEAD (under the lock): fast-forward or a merge commit."""
    theirs = _remote_head(vault, remote, branch)
    ours = vault.head()
    if not theirs or (ours and _is_ancestor(vault, theirs, ours)):
        return
    result.commits_in += _count(vault, ours, theirs)
    if ours is None:
        vault.git("update-ref", "HEAD", theirs)
        vault.git("read-tree", "--reset", "-u", theirs)
        return
    if _is_ancestor(vault, ours, theirs):
        vault.checkout_commit(theirs, f"sync: fast-forward to {remote}/{branch}")
        return
    tree, kept = _merge_tree(vault, ours, theirs)
    result.kept_both.extend(kept)
    body = "Kept both versions of:\n" + "\n".join(f"- {p}" for p in kept) if kept else ""
    change = Change("sync", f"merge from {remote}", body=body,
                    trailers={"Remote": f"{remote}/{branch}", "Merged": theirs})
    sha = vault.git("commit-tree", tree, "-p", ours, "-p", theirs, "-F", "-",
                    env=vault.agent_identity().env(), input=change.message()).strip()
    vault.checkout_commit(sha, f"sync: merge from {remote}")
    result.merge_commit = sha


def _driver_args() -> list[str]:
    args = []
    for key, value in mergedriver.git_config():
        args += ["-c", f"{key}={value}"]
    return args


_STAGE = re.compile(r"^(\d{6}) ([0-9a-f]{40,64}) ([123])\t(.*)$", re.S)


def _merge_tree(vault: Vault, ours: str, theirs: str) -> tuple[str, list[str]]:
    """The merged tree of two commits, every path settled; and the paths kept both ways."""
    p = subprocess.run(["git", *_GIT_BASE, *_driver_args(), "merge-tree", "--write-tree",
                        "-z", "--allow-unrelated-histories", ours, theirs],
                       cwd=vault.root, capture_output=True)
    if p.returncode not in (0, 1):
        raise GitError(["merge-tree", ours, theirs], p.returncode, p.stderr.decode("utf-8", "replace"))
    fields = p.stdout.split(b"\0")
    tree = fields[0].decode()
    if p.returncode == 0:
        return tree, []
    stages: dict[str, dict[int, tuple[str, str]]] = {}
    for raw in fields[1:]:
        if not raw:
            break
        m = _STAGE.match(raw.decode("utf-8", "surrogateescape"))
        if m:
            mode, oid, stage, path = m.groups()
            stages.setdefault(path, {})[int(stage)] = (mode, oid)
    index = vault.state / "sync-index"
    index.unlink(missing_ok=True)
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}

    def git(*args, input: bytes | None = None) -> bytes:
        q = subprocess.run(["git", *_GIT_BASE, *args], cwd=vault.root, env=env,
                           input=input, capture_output=True)
        if q.returncode:
            raise GitError(list(args), q.returncode, q.stderr.decode("utf-8", "replace"))
        return q.stdout

    git("read-tree", tree)
    kept = []
    short = theirs[:7]
    for path, st in sorted(stages.items()):
        base, mine, other = st.get(1), st.get(2), st.get(3)
        if mine is None or other is None:
            # Deleted on one side, changed on the other: the changed version stays.
            keep = mine or other
            git("update-index", "--add", "--cacheinfo", f"{keep[0]},{keep[1]},{path}")
            kept.append(path)
            continue
        data = [git("cat-file", "blob", s[1]) if s else b"" for s in (base, mine, other)]
        merged = None
        if path.endswith(".md") and all(_is_text(d) for d in data):
            merged = merge.merge_facts(*data)
        if merged is not None:
            oid = git("hash-object", "-w", "--stdin", input=merged).decode().strip()
            git("update-index", "--add", "--cacheinfo", f"{mine[0]},{oid},{path}")
        else:
            git("update-index", "--add", "--cacheinfo", f"{mine[0]},{mine[1]},{path}")
            stem, dot, ext = path.rpartition(".")
            copy = f"{stem}.sync-conflict-{short}.{ext}" if dot and "/" not in ext else \
                f"{path}.sync-conflict-{short}"
            git("update-index", "--add", "--cacheinfo", f"{other[0]},{other[1]},{copy}")
        kept.append(path)
    new_tree = git("write-tree").decode().strip()
    index.unlink(missing_ok=True)
    return new_tree, kept


def _is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _push(vault: Vault, remote: str, branch: str) -> bool:
    """Push HEAD; False if the remote moved meanwhile (fetch and merge again)."""
    p = subprocess.run(["git", *_GIT_BASE, "push", "--quiet", "--porcelain", remote,
                        f"HEAD:refs/heads/{branch}"], cwd=vault.root, capture_output=True,
                       text=True, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    if p.returncode == 0:
        vault.git("update-ref", f"refs/remotes/{remote}/{branch}", "HEAD")
        if not vault.git("config", f"branch.{branch}.remote", check=False).strip():
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
                  result: SyncResult) -> tuple[int, int]:
    """Facts of MEMORY.md/USER.md that came in: (+added, -removed)."""
    if not old or not new or old == new or not result.commits_in:
        return 0, 0
    diff = vault.git("diff", "--no-color", "-U0", old, new, "--", "MEMORY.md", "USER.md")
    added = removed = 0
    for line in diff.splitlines():
        if line.startswith("+- ") or line.startswith("+* "):
            added += 1
        elif line.startswith("-- ") or line.startswith("-* "):
            removed += 1
    return added, removed


# ---- which machine runs a job -------------------------------------------------------


def claim_jobs(vault: Vault) -> tuple[list[str], str | None]:
    """Give this machine (`vault.host()`) every cron job that names none, in one commit:
    (the jobs' ids, the sha). Called by a sync (after its merge, so the claim goes out
    with the push) and by `agent serve`; a job names its machine from then on, and
    every other machine leaves it alone. A cron.json that does not parse is left alone
    (serve and `agent cron list` name its problem)."""
    try:
        text = cronfile.read_text(vault.root)
        if text is None or all(j.host for j in cronfile.loads(text).jobs):
            return [], None
    except cronfile.CronFileError:
        return [], None
    here = vault.host()
    with vault.locked():
        try:
            text = cronfile.read_text(vault.root)
            cf = cronfile.loads(text or "")
        except cronfile.CronFileError:
            return [], None
        claimed = cronfile.claim(cf, here)
        if not claimed:
            return [], None
        vault.write_text(cronfile.CRON_FILE, cronfile.dumps(cf))
        what = claimed[0].label() if len(claimed) == 1 else f"{len(claimed)} jobs"
        sha = vault.commit(Change(
            "cron", f"run {what} on {here}",
            body="Jobs that named no machine run on this one only from now on (`agent cron "
                 "move JOB HOST` gives one to another machine):\n"
                 + "\n".join(f"- {j.label()} ({j.id})" for j in claimed)))
    return [j.id for j in claimed], sha


# ---- state and setup ---------------------------------------------------------------


def _save_state(vault: Vault, result: SyncResult, when: datetime) -> None:
    atomic.write_json(vault.state / STATE_FILE,
                      {"at": when.isoformat(timespec="seconds"), **result.as_dict()})


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


def ensure_setup(vault: Vault) -> str | None:
    """Merge drivers in .git/config, the vault's merge rules in .gitattributes, and the
    dream's record as a mergeable set: an older vault is converted in one commit that
    says so."""
    vault.configure_merge_drivers()
    vault.host()
    path = vault.root / ".gitattributes"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    lines = text.splitlines()
    old_rules = {"sessions/**/*.jsonl merge=union", "memory/*.md merge=union"}
    missing = [a for a in mergedriver.ATTRIBUTES if a not in lines]
    cursor = vault.root / archive.CURSOR
    cursor_text = cursor.read_text(encoding="utf-8") if cursor.is_file() else ""
    old_cursor = bool(cursor_text.strip()) and not cursor_text.lstrip().startswith("#")
    if not missing and not old_rules & set(lines) and not old_cursor:
        return None
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


def clone(url: str, path: Path, host: str | None = None) -> Vault:
    """A vault cloned from `url` into `path`, set up as `agent init` sets one up; `host`
    names this machine (default: its hostname)."""
    host = check_host(host) if host else None
    path = Path(path).expanduser().absolute()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise SyncError(f"{path} already exists and is not empty: choose a new folder.")
    p = subprocess.run(["git", *_GIT_BASE, "clone", "--quiet", url, str(path)],
                       capture_output=True, text=True,
                       env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    if p.returncode:
        raise SyncError(f"Could not clone {url}: {_first_error(p.stderr)}.")
    if not (path / "agent.toml").is_file():
        raise SyncError(f"{url} is not a vault (it has no agent.toml); the clone is at "
                        f"{path}: run `agent init {path}` to make it one.")
    vault = Vault.open(path)
    if host:
        vault.set_host(host)
    vault._configure_repo()
    vault.state.mkdir(exist_ok=True)
    return vault
