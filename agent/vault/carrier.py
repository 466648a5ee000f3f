"""The git plumbing of an encrypted remote (agent.sync.crypt): the *carrier* repository
the host keeps, and the packs that move objects into and out of the vault.

The host holds a plain git repository with one branch, `agent-crypt`, whose tree is a
flat list of opaque files (age ciphertext: an encrypted manifest and encrypted packs).
Each sync that sends something adds a commit on top of that branch, so git's own
atomic ref update on the host refuses a second machine pushing from the same commit
(it fetches, merges and pushes again). Only a rewrite of the vault's history (`agent
forget`) or a merge of packs replaces the branch, with a lease on the commit it
replaces. Carrier commits carry nothing of the vault: a fixed author, date and message.

This machine keeps a copy of the carrier (a shallow bare repository under
.git/agent-crypt/) so a sync fetches only what is new. The vault side is a pack of the
objects the remote lacks (`git pack-objects --thin`) and `git index-pack --fix-thin` of
one that arrives.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from agent.vault import git
from agent.vault.git import VaultError

BRANCH = "refs/heads/agent-crypt"
# Carrier commits name no one and no time: the host sees when they arrive anyway, and a
# person's name, time zone or host name would be a leak.
_IDENTITY = {"GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@localhost",
             "GIT_AUTHOR_DATE": "@1000000000 +0000", "GIT_COMMITTER_NAME": "agent",
             "GIT_COMMITTER_EMAIL": "agent@localhost",
             "GIT_COMMITTER_DATE": "@1000000000 +0000"}
# Where a repository is, as git's environment can say: a helper git starts inherits the
# vault's, which must not leak into the carrier's commands.
_LOCATION = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
             "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
             "GIT_PREFIX", "GIT_QUARANTINE_PATH", "GIT_SHALLOW_FILE", "GIT_GRAFT_FILE",
             "GIT_REPLACE_REF_BASE")


class CarrierError(VaultError):
    """The host could not be reached or refused; str() is one line for the person."""


class Rejected(Exception):
    """The host's branch moved since it was fetched (another machine pushed)."""


def _env(timeout: int | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LOCATION}
    env["GIT_TERMINAL_PROMPT"] = "0"
    if timeout:
        # A host that sends less than a byte a second for `timeout` seconds has stalled.
        env["GIT_HTTP_LOW_SPEED_LIMIT"] = "1"
        env["GIT_HTTP_LOW_SPEED_TIME"] = str(timeout)
    return env


def network_problem(stderr: str, url: str, timeout: int | None) -> str:
    """One line for a failed fetch or push of the carrier."""
    if "Operation too slow" in stderr or "curl 28" in stderr or "timed out" in stderr.lower():
        return (f"the host at {url} stalled (nothing for {timeout} seconds), so the sync "
                f"gave up")
    if any(s in stderr for s in ("curl 52", "curl 55", "curl 56", "Empty reply",
                                 "the remote end hung up", "Connection reset")):
        return f"the host at {url} hung up in the middle"
    for line in stderr.splitlines():
        line = line.strip().removeprefix("fatal: ").removeprefix("error: ")
        if line and not line.startswith(("remote: ", "hint: ")):
            return line.rstrip(".")
    return "git failed"


class Carrier:
    """This machine's copy of one encrypted remote's carrier repository."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _git(self, *args: str, input: bytes | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        return git.run(["--git-dir", str(self.path), *args], self.path, text=False,
                       input=input, env=env or _env(), filters=False)

    def _out(self, *args: str, input: bytes | None = None,
             env: dict[str, str] | None = None) -> str:
        p = self._git(*args, input=input, env=env)
        if p.returncode:
            raise VaultError(f"git {args[0]} failed in {self.path}: "
                             f"{p.stderr.decode('utf-8', 'replace').strip()[-300:]}")
        return p.stdout.decode("utf-8", "surrogateescape")

    def ensure(self) -> None:
        if not (self.path / "HEAD").exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            p = git.run(["init", "--quiet", "--bare", str(self.path)], None, env=_env(),
                        filters=False)
            if p.returncode:
                raise VaultError(f"could not make {self.path}: {p.stderr.strip()}")
            # Pruned when a rewrite asks (prune()), never by a background gc mid-sync.
            self._out("config", "gc.auto", "0")
            self._out("config", "maintenance.auto", "false")
            # Ciphertext does not compress: kept as it arrives, in the pack it came in,
            # rather than deflated again object by object.
            self._out("config", "core.compression", "0")
            self._out("config", "fetch.unpackLimit", "1")

    def tip(self) -> str | None:
        p = self._git("rev-parse", "--verify", "-q", BRANCH)
        return p.stdout.decode().strip() or None

    def fetch(self, url: str, timeout: int | None) -> str | None:
        """Bring the host's branch here (its newest commit only: that tree is the whole
        state); its commit, or None when the host has no carrier yet. CarrierError when
        the host is unreachable, stalls, or holds a plain repository instead."""
        self.ensure()
        p = self._git("fetch", "--quiet", "--depth=1", "--no-tags", "--no-write-fetch-head",
                      url, f"+{BRANCH}:{BRANCH}", env=_env(timeout))
        if p.returncode == 0:
            return self.tip()
        err = p.stderr.decode("utf-8", "replace")
        if "couldn't find remote ref" in err:
            heads = self.heads(url, timeout)
            if heads:
                raise CarrierError(f"{url} already holds a plain git repository "
                                   f"({', '.join(heads[:3])}), not an encrypted remote: "
                                   f"give an empty repository")
            self._git("update-ref", "-d", BRANCH)
            return None
        raise CarrierError(network_problem(err, url, timeout))

    def heads(self, url: str, timeout: int | None) -> list[str]:
        p = self._git("ls-remote", "--heads", url, env=_env(timeout))
        if p.returncode:
            raise CarrierError(network_problem(p.stderr.decode("utf-8", "replace"), url, timeout))
        return [line.split("\t", 1)[1] for line in p.stdout.decode().splitlines() if "\t" in line]

    def files(self, commit: str) -> dict[str, str]:
        """The carrier commit's files: name -> blob id."""
        out = self._out("ls-tree", "-z", commit)
        files = {}
        for entry in out.split("\0"):
            meta, _, name = entry.partition("\t")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == "blob":
                files[name] = parts[2]
        return files

    def read(self, blob: str) -> bytes:
        p = self._git("cat-file", "blob", blob)
        if p.returncode:
            raise VaultError(f"the carrier copy lacks {blob}")
        return p.stdout

    def write(self, data: bytes) -> str:
        return self._out("hash-object", "-w", "--stdin", input=data).strip()

    def commit(self, files: dict[str, str], parent: str | None) -> str:
        """A carrier commit of `files` (name -> blob id) on `parent` (None: a new root)."""
        tree = self._out("mktree", "-z", input="".join(
            f"100644 blob {oid}\t{name}\0" for name, oid in sorted(files.items())).encode())
        env = {**_env(), **_IDENTITY}
        args = ["commit-tree", tree.strip(), "-m", "agent-crypt"]
        if parent:
            args += ["-p", parent]
        return self._out(*args, env=env).strip()

    def push(self, url: str, commit: str, old: str | None, timeout: int | None,
             replace: bool = False) -> None:
        """Put `commit` on the host's branch, which must still be at `old` (None: must
        not exist yet): a fast-forward, or with `replace` a new history leased on `old`.
        Rejected when the host moved; CarrierError when it could not be reached."""
        lease = [f"--force-with-lease={BRANCH}:{old or ''}"] if replace or old is None else []
        p = self._git("push", "--quiet", "--porcelain", *lease, url, f"{commit}:{BRANCH}",
                      env=_env(timeout))
        text = (p.stdout + p.stderr).decode("utf-8", "replace")
        if p.returncode == 0:
            self._out("update-ref", BRANCH, commit)
            return
        if "[rejected]" in text or "stale info" in text or "fetch first" in text \
                or "non-fast-forward" in text:
            raise Rejected()
        raise CarrierError(network_problem(p.stderr.decode("utf-8", "replace"), url, timeout))

    def prune(self) -> None:
        """Drop every object of this copy that its branch no longer reaches (old
        ciphertext after a rewrite)."""
        self._git("reflog", "expire", "--expire=now", "--all")
        self._git("gc", "--quiet", "--prune=now")


def prune_local_host(url: str) -> None:
    """A host that is a folder on this machine drops what its branch no longer reaches,
    as after `agent forget` on a plain remote on a disk (a real host prunes in its own
    time)."""
    where = url.removeprefix("file://")
    if not os.path.isdir(where):
        return
    from agent.vault import prune
    try:
        prune.git_in(where, "reflog", "expire", "--expire=now", "--all")
        prune.git_in(where, "gc", "--quiet", "--prune=now")
    except prune.PruneError:
        pass       # it no longer hands them out; its own gc drops them later


# ---- the vault's side: packs out and in ----------------------------------------------


def present(git_dir: Path, shas: Iterable[str]) -> set[str]:
    """Those of `shas` that are commits of the repository at `git_dir`."""
    shas = list(dict.fromkeys(shas))
    if not shas:
        return set()
    p = git.run(["--git-dir", str(git_dir), "cat-file", "--batch-check=%(objectname) %(objecttype)"],
                git_dir, input="".join(f"{s}\n" for s in shas), filters=False)
    return {line.split()[0] for line in p.stdout.splitlines() if line.endswith(" commit")}


def is_ancestor(git_dir: Path, old: str, new: str) -> bool:
    return git.run(["--git-dir", str(git_dir), "merge-base", "--is-ancestor", old, new],
                   git_dir, filters=False).returncode == 0


def resolve(git_dir: Path, rev: str) -> str | None:
    p = git.run(["--git-dir", str(git_dir), "rev-parse", "--verify", "-q", f"{rev}^{{commit}}"],
                git_dir, filters=False)
    return p.stdout.strip() or None


def independent(git_dir: Path, shas: Iterable[str]) -> list[str]:
    """Those of `shas` (commits of the repository) that no other of them reaches."""
    shas = sorted(set(shas))
    if len(shas) < 2:
        return shas
    p = git.run(["--git-dir", str(git_dir), "merge-base", "--independent", *shas], git_dir,
                filters=False)
    return sorted(p.stdout.split()) if p.returncode == 0 else shas


def has_new(git_dir: Path, tips: list[str], exclude: Iterable[str]) -> bool:
    """Whether `tips` reach a commit that none of `exclude` reaches."""
    if not tips:
        return False
    p = git.run(["--git-dir", str(git_dir), "rev-list", "--max-count=1", "--stdin"], git_dir,
                input="".join(f"{t}\n" for t in tips) + "".join(f"^{x}\n" for x in exclude),
                filters=False)
    if p.returncode:
        raise VaultError(f"git rev-list failed: {p.stderr.strip()[-300:]}")
    return bool(p.stdout.strip())


def pack(git_dir: Path, tips: list[str], exclude: Iterable[str]) -> bytes:
    """A pack of every object `tips` reach that `exclude` does not, thin (its deltas may
    use objects of `exclude` as bases: the receiver has them)."""
    p = git.run(["--git-dir", str(git_dir), "pack-objects", "--revs", "--thin", "--stdout",
                 "--quiet", "--delta-base-offset"], git_dir, text=False,
                input=("".join(f"{t}\n" for t in tips)
                       + "".join(f"^{x}\n" for x in exclude)).encode(), filters=False)
    if p.returncode:
        raise VaultError(f"git pack-objects failed: "
                         f"{p.stderr.decode('utf-8', 'replace').strip()[-300:]}")
    return p.stdout


def unpack(git_dir: Path, data: bytes) -> None:
    """Store a pack's objects in the repository at `git_dir` (completing a thin one from
    the objects already there)."""
    p = git.run(["--git-dir", str(git_dir), "index-pack", "--stdin", "--fix-thin"], git_dir,
                text=False, input=data, filters=False)
    if p.returncode:
        raise VaultError(f"git index-pack failed: "
                         f"{p.stderr.decode('utf-8', 'replace').strip()[-300:]}")
