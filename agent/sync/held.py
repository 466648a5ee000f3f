"""Held changes: what a remote may not change on this machine without the person's yes.

The files that decide what the agent runs, where it sends and how git behaves
(`agent.toml`, `AGENTS.md`, every `.gitattributes` and `.gitignore`, anything under
`skills/` and `heartbeat/`: agent.stores.kinds says which) and every cron job a remote
adds or changes (delivering or not: each runs the model unattended) are **held** when
a sync brings a change to them, as is a heartbeat or skill the model writes
(agent.vault.heldwrites): the sync merges everything else, and its commit keeps
this machine's version of these. The incoming version waits in `.agent/held.json`
(this machine's decision, never in git), its objects kept reachable by a ref under
`refs/agent/held/` so that gc keeps them and `agent sync held` can show the diff.
`agent sync accept [FILE]` takes a held change in one commit; `agent sync reject
[FILE]` drops it, and a later sync does not hold that same version again (a new
change to the file is held again). A file changed again remotely replaces its held
version.

A tombstone (`.forgotten`) from elsewhere that would rewrite this vault's history is
held too, as `.forgotten#<id>` (agent.sync.tombstones decides which): accepting it
rewrites the history here, rejecting it lets the sync merge as if it were not there.

`agent clone` holds the same (`hold_clone`): a new clone has no version of its own, so
this machine's version is the one `agent init` would have made (its agent.toml,
AGENTS.md, .gitignore, .gitattributes and built-in heartbeats; no skills, no cron
jobs). Every one of these files the remote has otherwise, and every cron job, is held,
and one commit puts init's versions in place: the clone runs on a stranger's
settings only once the person accepted them.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from agent.fs import atomic
from agent.sync import tombstones
from agent.stores import forgotten
from agent.vault.change import Change
from agent.stores import kinds
from agent.vault import git
from agent.vault.repo import GitError, Vault, VaultError
from agent.fs import boundedjson

STATE_FILE = "held.json"
REF_PREFIX = "refs/agent/held/"
CRON = "cron.json"     # agent.stores.cronfile.CRON_FILE, loaded only to accept a job
# What makes a job's change worth asking about: what it runs, when, and where it sends
# (not its run state, which every machine that runs it updates).
_JOB_KEYS = ("deliver", "message", "schedule")


def protected(path: str) -> bool:
    """Whether an incoming change to `path` waits for the person (cron.json: job by job)."""
    return path != CRON and kinds.held(path)


@dataclass
class Held:
    """One change a remote sent that this machine has not taken."""
    key: str                 # the path, or `cron.json#<job id>`
    path: str
    oid: str | None          # the incoming blob (None: the remote deleted the file)
    mode: str | None
    commit: str              # the newest remote commit that changed it
    host: str                # the machine (Host trailer) or author it came from
    source: str              # remote/branch
    ref: str                 # keeps the objects reachable
    job: dict | None = None  # a cron job's incoming definition
    local_job: dict | None = None
    tombstone: dict | None = None   # a forget made elsewhere (tombstones.Waiting)

    def label(self) -> str:
        if self.tombstone is not None:
            return f"forgotten phrase {self.tombstone['id']} ({self.tombstone['summary']})"
        if self.job is not None:
            name = self.job.get("name") or self.key.split("#", 1)[1]
            return f'cron job "{name}" ({self.key})'
        return self.path


# ---- state --------------------------------------------------------------------------


def _load(vault: Vault) -> dict:
    data = atomic.read_json(vault.state / STATE_FILE)
    if not isinstance(data, dict):
        data = {}
    data.setdefault("held", {})
    data.setdefault("rejected", {})
    return data


def _save(vault: Vault, data: dict) -> None:
    vault.state.mkdir(exist_ok=True)
    # Not write_json: its sorted keys would reorder a held cron job's keys on accept.
    atomic.write_text(vault.state / STATE_FILE, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    _prune_refs(vault, data)


def _prune_refs(vault: Vault, data: dict) -> None:
    used = {h.get("ref") for h in data["held"].values()}
    for ref in vault.git("for-each-ref", "--format=%(refname)", REF_PREFIX).split():
        if ref not in used:
            vault.git("update-ref", "-d", ref)


def pending(vault: Vault) -> list[Held]:
    """The held changes waiting for a decision, in path order; a file that is already
    as the remote has it here (the person made the same change) waits no longer."""
    path = vault.state / STATE_FILE
    if not path.exists():
        return []
    items = [Held(**h) for _, h in sorted(_load(vault)["held"].items())]
    files = [h for h in items if h.job is None and h.tombstone is None]
    if not files or not vault.head():
        return items
    out = vault.git("ls-tree", "-z", "HEAD", "--", *{h.path for h in files})
    here = {e.split("\t", 1)[1]: e.split()[2] for e in out.split("\0") if "\t" in e}
    done = [h for h in files if here.get(h.path) == h.oid]
    if done:
        data = _load(vault)
        for h in done:
            data["held"].pop(h.key, None)
        _save(vault, data)
    return [h for h in items if h not in done]


def _job_stamp(job: dict | None) -> str:
    return json.dumps({k: (job or {}).get(k) for k in _JOB_KEYS}, sort_keys=True)


# ---- holding, during a sync's merge -------------------------------------------------


def hold(vault: Vault, ours: str, tree: str, theirs: str, source: str,
         arrived: set[str] | None = None) -> tuple[str, list[Held]]:
    """The tree a sync commits (`tree` with this machine's version of every protected
    change) and the changes newly held. Nothing is read from or written to the work
    tree; the held changes are recorded in .agent/held.json. `arrived`: every path the
    incoming commits changed (agent.sync.arrived), which holds every path `tree`
    changes from `ours`: none protected, and git is not asked."""
    if arrived is not None and not any(path == CRON or protected(path) for path in arrived):
        return tree, []
    p = git.run(["diff-tree", "-r", "-z", "--no-renames", ours, tree], vault.root, text=False)
    if p.returncode:
        raise GitError(["diff-tree", ours, tree], p.returncode, p.stderr.decode("utf-8", "replace"))
    fields = p.stdout.split(b"\0")
    changed = {}
    for meta, path in zip(fields[0::2], fields[1::2]):
        if not meta.startswith(b":"):
            continue
        parts = meta.decode()[1:].split()
        new_mode, new_oid, status = parts[1], parts[3], parts[4]
        changed[path.decode("utf-8", "surrogateescape")] = (
            (None, None) if status == "D" else (new_mode, new_oid))
    files = {p: v for p, v in changed.items() if protected(p)}
    data = _load(vault)
    rejected = data["rejected"]
    restore: dict[str, tuple[str, str] | None] = {}   # path -> our entry (None: absent)
    fresh: list[Held] = []
    if not files and CRON not in changed:
        return tree, []
    ref = None

    def keep_ref() -> str:
        nonlocal ref
        if ref is None:
            sha = vault.git("commit-tree", tree, "-p", theirs, "-m", "sync: held changes",
                            env=vault.agent_identity().env()).strip()
            ref = REF_PREFIX + sha
            vault.git("update-ref", ref, sha)
        return ref

    for path, (mode, oid) in sorted(files.items()):
        restore[path] = _entry(vault, ours, path)
        if rejected.get(path) == (oid or "deleted"):
            continue
        commit, host = _origin(vault, ours, theirs, path)
        fresh.append(Held(path, path, oid, mode, commit, host, source, keep_ref()))
    if CRON in changed and changed[CRON][1]:
        text, jobs = _hold_jobs(vault, ours, changed[CRON][1], rejected)
        if text is not None:
            oid = vault.git("hash-object", "-w", "--stdin", input=text).strip()
            restore[CRON] = (changed[CRON][0], oid)
        if jobs:
            commit, host = _origin(vault, ours, theirs, CRON)
            for job, local in jobs:
                fresh.append(Held(f"{CRON}#{job['id']}", CRON, None, None, commit, host,
                                  source, keep_ref(), job=job, local_job=local))
    if not restore:
        return tree, fresh
    new_tree = _replace(vault, tree, restore)
    for h in fresh:
        data["held"][h.key] = asdict(h)
    _save(vault, data)
    return new_tree, fresh


def hold_clone(vault: Vault, source: str) -> list[Held]:
    """After a clone checked out `source`: hold what a sync would hold if this vault
    were new (see the module), under the lock, with one commit on top of what was
    checked out. The changes held."""
    with vault.locked():
        theirs = vault.head()
        if theirs is None:
            return []
        tree = vault.git("rev-parse", f"{theirs}^{{tree}}").strip()
        ours = _init_commit(vault)
        new_tree, fresh = hold(vault, ours, tree, theirs, source)
        if new_tree == tree:
            return fresh
        change = Change("clone", f"hold {_what(fresh)} from {source} until you decide",
                        body="A new clone runs on the files `agent init` makes until the "
                             "person accepts the remote's (`agent sync held`, then `agent "
                             "sync accept`):\n" + "\n".join(f"- {h.label()}" for h in fresh),
                        trailers={"Remote": source})
        sha = vault.git("commit-tree", new_tree, "-p", theirs, "-F", "-",
                        env=vault.agent_identity().env(), input=change.message()).strip()
        vault.journal.checkout_commit(sha, f"clone: hold {source}'s settings")
    return fresh


def _what(fresh: list[Held]) -> str:
    if len(fresh) == 1:
        return fresh[0].label()
    return f"{len(fresh)} changes to what runs"


def _init_commit(vault: Vault) -> str:
    """A commit (on no branch) of what `agent init` writes into a new vault."""
    from agent.vault.repo import init_lines, template_files
    index = vault.state / "init-index"
    index.unlink(missing_ok=True)
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    try:
        for rel, src in template_files():
            oid = vault.git("hash-object", "-w", "--", str(src)).strip()
            vault.git("update-index", "--add", "--cacheinfo", f"100644,{oid},{rel}", env=env)
        for rel, lines in init_lines(vault.layout).items():
            oid = vault.git("hash-object", "-w", "--stdin",
                            input="".join(f"{line}\n" for line in lines)).strip()
            vault.git("update-index", "--add", "--cacheinfo", f"100644,{oid},{rel}", env=env)
        tree = vault.git("write-tree", env=env).strip()
    finally:
        index.unlink(missing_ok=True)
    return vault.git("commit-tree", tree, "-m", "init: a new vault",
                     env=vault.agent_identity().env()).strip()


def _entry(vault: Vault, commit: str, path: str) -> tuple[str, str] | None:
    out = vault.git("ls-tree", "-z", commit, "--", path).split("\0")[0]
    if not out:
        return None
    meta = out.split("\t", 1)[0].split()
    return meta[0], meta[2]


def _origin(vault: Vault, ours: str | None, theirs: str, path: str) -> tuple[str, str]:
    """The newest incoming commit that changed `path`, and its machine (its Host trailer,
    else its author)."""
    out = vault.git("log", "-1", "--format=%H%x00%an%x00%(trailers:key=Host,valueonly)",
                    theirs, *(["--not", ours] if ours else []), "--", path).strip()
    if not out:
        return theirs, "?"
    sha, author, host = (out.split("\0") + ["", ""])[:3]
    return sha, host.strip().splitlines()[0] if host.strip() else author


def _hold_jobs(vault: Vault, ours: str, oid: str, rejected: dict) -> tuple[str | None, list]:
    """cron.json as merged with the jobs the remote added or changed put back
    as they are here (None: nothing to put back), and those (job, local job) to hold."""
    try:
        merged = boundedjson.loads(vault.git("cat-file", "blob", oid))
        mine = _entry(vault, ours, CRON)
        local = boundedjson.loads(vault.git("cat-file", "blob", mine[1])) if mine else {"jobs": []}
        here = {j["id"]: j for j in local.get("jobs", [])}
        jobs = merged["jobs"]
    except (ValueError, KeyError, TypeError):
        return None, []              # not a cron file: serve and `cron list` say so
    out, held, changed = [], [], False
    for job in jobs:
        if not isinstance(job, dict) or "id" not in job:
            out.append(job)
            continue
        old = here.get(job["id"])
        if old is not None and _job_stamp(old) == _job_stamp(job):
            out.append(job)
            continue
        changed = True
        if rejected.get(f"{CRON}#{job['id']}") != _job_stamp(job):
            held.append((job, old))
        if old is not None:
            out.append(old)
    # A job here that the merge dropped stays: the other side may only be holding it (its
    # tree lacks a job it has not accepted yet, which a merge reads as a deletion).
    ids = {j.get("id") for j in out if isinstance(j, dict)}
    kept = [j for j in local.get("jobs", []) if isinstance(j, dict) and j.get("id") not in ids
            and j.get("id") not in {k.get("id") for k in jobs if isinstance(k, dict)}]
    if kept:
        changed = True
        out.extend(kept)
    if not changed:
        return None, []
    merged["jobs"] = out
    return json.dumps(merged, indent=2, ensure_ascii=False) + "\n", held


def _replace(vault: Vault, tree: str, entries: dict[str, tuple[str, str] | None]) -> str:
    index = vault.state / "held-index"
    index.unlink(missing_ok=True)
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    try:
        vault.git("read-tree", tree, env=env)
        for path, entry in entries.items():
            if entry is None:
                vault.git("update-index", "--force-remove", "--", path, env=env)
            else:
                vault.git("update-index", "--add", "--cacheinfo",
                          f"{entry[0]},{entry[1]},{path}", env=env)
        return vault.git("write-tree", env=env).strip()
    finally:
        index.unlink(missing_ok=True)


def hold_tombstones(vault: Vault, waiting: list[tombstones.Waiting]) -> list[Held]:
    """Record the tombstones now waiting for the person (those recorded before and no
    longer waiting go); the Held of each."""
    data = _load(vault)
    old = [k for k, h in data["held"].items() if h.get("tombstone") is not None]
    if not old and not waiting:
        return []                       # nothing to write (nor a git process to start)
    for key in old:
        del data["held"][key]
    out = []
    for w in waiting:
        theirs = "HEAD" if w.source == "HEAD" else f"refs/remotes/{w.source}"
        ours = None if w.source == "HEAD" else "HEAD"
        commit, host = _origin(vault, ours, theirs, forgotten.FILE)
        h = Held(f"{forgotten.FILE}#{w.stone.id}", forgotten.FILE, None, None, commit,
                 host, w.source, "", tombstone={**w.as_dict(), "summary": w.summary()})
        data["held"][h.key] = asdict(h)
        out.append(h)
    _save(vault, data)
    return out


# ---- showing and deciding -------------------------------------------------------------


def select(vault: Vault, which: str | None) -> list[Held]:
    """The held changes `which` names (a path, a folder, `cron.json#ID`; all when None)."""
    items = pending(vault)
    if not items:
        raise VaultError("No held changes: every change a sync brought in was taken.")
    if which is None:
        return items
    which = which.strip().rstrip("/") if which.strip() not in ("", "/") else which
    chosen = [h for h in items if which in (h.key, h.path)
              or h.path.startswith(which + "/") or (h.job and h.job["id"] == which)
              or (h.tombstone and h.tombstone["id"] == which)]
    if not chosen:
        raise VaultError(f"Nothing held for {which}. Held: {', '.join(h.key for h in items)} "
                         f"(see `agent sync held`).")
    return chosen


def diff(vault: Vault, h: Held) -> str:
    """The held change as a unified diff from this machine's version."""
    import difflib
    if h.tombstone is not None:
        n = h.tombstone["length"]
        return (f"  A forget made elsewhere: a text of {n} character{'s' * (n != 1)} would "
                f"become [forgotten] in every commit of every branch here, its old copies "
                f"pruned.")
    if h.job is not None:
        a = json.dumps(h.local_job, indent=2, ensure_ascii=False).splitlines() if h.local_job else []
        b = json.dumps(h.job, indent=2, ensure_ascii=False).splitlines()
        return "\n".join(difflib.unified_diff(a, b, f"a/{h.key} (here)",
                                              f"b/{h.key} ({h.source})", lineterm=""))
    mine = _entry(vault, "HEAD", h.path) if vault.head() else None
    a = _text(vault, mine[1]) if mine else []
    b = _text(vault, h.oid) if h.oid else []
    if a is None or b is None:
        return f"Binary file {h.path} differs"
    return "\n".join(difflib.unified_diff(a, b, f"a/{h.path} (here)" if mine else "/dev/null",
                                          f"b/{h.path} ({h.source})" if h.oid else "/dev/null",
                                          lineterm=""))


def _text(vault: Vault, oid: str) -> list[str] | None:
    data = git.run(["cat-file", "blob", oid], vault.root, text=False).stdout
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def accept(vault: Vault, which: str | None) -> tuple[list[Held], str | None]:
    """Take the held changes `which` names into the work tree, in one commit; a held
    tombstone rewrites this vault's history first (VaultError, nothing changed, when one
    is under the minimum length)."""
    chosen = select(vault, which)
    stones = [h for h in chosen if h.tombstone is not None]
    if stones:
        _accept_tombstones(vault, stones)
        chosen = [h for h in chosen if h.tombstone is None]
        if not chosen:
            return stones, None
    with vault.locked():
        data = _load(vault)
        paths = []
        for h in chosen:
            if h.job is not None:
                _accept_job(vault, h)
            elif h.oid is None:
                vault.delete(h.path)
            else:
                _write_blob(vault, h)
            paths.append(h.path)
            data["held"].pop(h.key, None)
        hosts = sorted({h.host for h in chosen})
        commits = sorted({h.commit for h in chosen if h.commit})   # none: the model wrote it
        what = chosen[0].label() if len(chosen) == 1 else f"{len(chosen)} held changes"
        change = Change("sync", f"accept {what} from {', '.join(hosts)}",
                        body="\n".join(f"- {h.label()} ({h.source}{_at(h)})"
                                       for h in chosen) if len(chosen) > 1 else "",
                        trailers={"Accepted": " ".join(commits)} if commits else {})
        sha = vault.commit(change, paths=sorted(set(paths)))
        _save(vault, data)
    return stones + chosen, sha


def _accept_tombstones(vault: Vault, stones: list[Held]) -> None:
    """Rewrite this vault's history as each held tombstone says (agent.sync.tombstones);
    none is applied when one is under the minimum length."""
    for h in stones:
        tombstones.check_acceptable(forgotten.Tombstone.from_dict(h.tombstone))
    with vault.locked():
        for h in stones:
            tombstones.accept(vault, forgotten.Tombstone.from_dict(h.tombstone))
            data = _load(vault)
            data["held"].pop(h.key, None)
            _save(vault, data)


def _at(h: Held) -> str:
    """", commit abc1234" for a change a remote sent; nothing for one the model wrote."""
    return f", {h.commit[:7]}" if h.commit else ""


def reject(vault: Vault, which: str | None) -> list[Held]:
    """Drop the held changes `which` names; a later sync does not hold them again."""
    chosen = select(vault, which)
    with vault.locked():
        data = _load(vault)
        for h in chosen:
            data["held"].pop(h.key, None)
            if h.tombstone is not None:
                tombstones.reject(vault, h.tombstone["id"])
                continue
            data["rejected"][h.key] = _job_stamp(h.job) if h.job is not None else (h.oid or "deleted")
        _save(vault, data)
    return chosen


def _write_blob(vault: Vault, h: Held) -> None:
    data = git.output(["cat-file", "blob", h.oid], vault.root, text=False)
    path = vault.writes.writable(h.path)
    if path.is_symlink() or path.exists():
        path.unlink()
    if h.mode == "120000":
        os.symlink(os.fsdecode(data), path)
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o755 if h.mode == "100755" else 0o644)
    os.replace(tmp, path)


def _accept_job(vault: Vault, h: Held) -> None:
    from agent.stores import cronfile
    text = cronfile.read_text(vault.root)
    try:
        doc = boundedjson.loads(text) if text else {"version": cronfile.VERSION, "jobs": []}
    except ValueError:
        doc = None
    jobs = doc.setdefault("jobs", []) if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise VaultError(f"{CRON} does not parse as a cron file: fix it (agent edit "
                         f"{CRON}), then accept {h.key} again.")
    for i, job in enumerate(jobs):
        if isinstance(job, dict) and job.get("id") == h.job["id"]:
            jobs[i] = h.job
            break
    else:
        jobs.append(h.job)
    vault.write_text(CRON, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
