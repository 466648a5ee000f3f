"""Forgetting in git: rewrite every branch's history without a phrase, on every clone.

`agent forget` (agent.ops.forget) calls `rewrite_history(vault, text)`: git-filter-repo
replaces the phrase by `[forgotten]` in every file of every commit of every ref
(branches and remote-tracking refs) and in commit messages; authors, committers, dates
and the rest of each message are kept. `expire_and_prune` then drops the reflogs and the
old objects, so `git cat-file --batch-all-objects` no longer finds the phrase.

The tombstone (agent.stores.forgotten) is what another clone needs, never the phrase:
its salted hash, its length and `rewrote`, the commits the rewrite changed, old -> new.

How another clone finds a phrase it is only given a salted hash of (`recover`, once
that clone's person accepted the tombstone: agent.sync.tombstones decides which are
applied, and never one shorter than MIN_CHARS): after fetching, it has both its own old commits and the
remote's rewritten ones, and `rewrote` pairs them. In each pair the old and new commit
differ exactly where the phrase was replaced: the first place their texts differ is at
most len("[forgotten]") characters after the phrase's start. So a handful of windows of
`length` characters there are hashed with the salt; the one that matches is the phrase,
recovered from the clone's own copy. The clone then runs the very same rewrite: the same
phrase and rules on the same commits give the same new commits (filter-repo keeps every
author, committer, date and message byte), so its rewritten branch meets the remote's
at the same commits, and its unsynced work, rewritten on top, merges as any sync does.
A clone that never had the old commits has nothing to rewrite.

A rewrite is journalled (agent.vault.rewrite_journal): a kill is finished or undone by
the next command. The old objects are pruned (agent.vault.prune) only once the new
history is whole.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterable
from typing import Protocol

from agent.vault import git, prune
from agent.vault.layout import drop_derived
from agent.vault.repo import Vault, VaultError
from agent.fs import boundedjson

REPLACEMENT = "[forgotten]"
ITERATIONS = 20_000
# The shortest text a rewrite cuts out, whoever asks (`agent forget`, a tombstone from
# elsewhere): a shorter one would be cut out of unrelated words everywhere.
MIN_CHARS = 4


class RewriteError(VaultError):
    """A rewrite that could not be done; the message says why and what to do."""


class Sought(Protocol):
    """What `recover` needs of a tombstone (agent.stores.forgotten.Tombstone): the
    commits it rewrote, old -> new, and a test of a candidate text."""

    length: int
    rewrote: dict[str, str]

    def matches(self, text: str) -> bool:
        ...


# ---- the phrase and its forms ---------------------------------------------------------


def forms(text: str) -> list[str]:
    """The ways the phrase is written in vault files: as is, and escaped inside a JSON
    string (a transcript line), longest first so an escaped form is replaced whole."""
    out = {text, json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1]}
    return sorted(out, key=len, reverse=True)


def _pattern(form: str) -> str:
    # A real newline cannot stand in filter-repo's one-rule-a-line file: `\n` can.
    return "".join(r"\n" if c == "\n" else r"\r" if c == "\r" else re.escape(c) for c in form)


def _rules(text: str) -> bytes:
    return "".join(f"regex:{_pattern(form)}==>{REPLACEMENT}\n" for form in forms(text)).encode()


def rewrite_history(vault: Vault, text: str) -> dict[str, str]:
    """Replace `text` by [forgotten] in every commit of every ref and in the work tree;
    the commits that changed, old -> new (new is 40 zeros for a commit left empty).

    The rules (which hold the text) reach git-filter-repo through pipes, never a file:
    a kill leaves nothing of the text on disk. Call it inside a journalled rewrite
    (agent.vault.rewrite_journal), which undoes a kill before its end."""
    meta = vault.git_dir / "filter-repo"
    shutil.rmtree(meta, ignore_errors=True)       # a run's leftovers would make it ask
    # The vault's git settings (no hooks, no filters, no fsmonitor) for the git commands
    # git-filter-repo runs itself.
    env = git.config_env(vault.root)
    pipes = [os.pipe() for _ in range(2)]          # --replace-text, --replace-message
    fd_dir = "/dev/fd" if os.path.isdir("/dev/fd") else "/proc/self/fd"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import git_filter_repo as g; g.main()",
             "--partial", "--force", "--quiet", "--replace-refs", "delete-no-add",
             "--replace-text", f"{fd_dir}/{pipes[0][0]}",
             "--replace-message", f"{fd_dir}/{pipes[1][0]}"],
            cwd=vault.root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, pass_fds=[r for r, _ in pipes])
    finally:
        for r, _ in pipes:
            os.close(r)
    rules = _rules(text)
    writers = [threading.Thread(target=_feed, args=(w, rules), daemon=True) for _, w in pipes]
    for t in writers:
        t.start()
    out, err = proc.communicate()
    for t in writers:
        t.join()
    if proc.returncode:
        text_out = (err or out).decode("utf-8", "replace").strip()
        raise RewriteError(f"git-filter-repo failed: {text_out[-400:]}. The history is as "
                           f"it was.")
    mapping = {}
    try:
        lines = (meta / "commit-map").read_text().splitlines()[1:]
    except OSError:
        lines = []
    for line in lines:
        old, _, new = line.partition(" ")
        if old != new:
            mapping[old] = new
    shutil.rmtree(meta, ignore_errors=True)
    return mapping


def _feed(fd: int, data: bytes) -> None:
    """Write `data` to the pipe `fd` and close it (a reader that went away is no error:
    git-filter-repo's own failure says why)."""
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BrokenPipeError:
        pass


def expire_and_prune(vault: Vault) -> None:
    """Drop every reflog entry and every object no ref of the vault reaches any more."""
    prune.prune_repository(vault.root, vault.git_dir)


def texts_at(vault: Vault, revs: list[str], path: str) -> list[str | None]:
    """The text of `path` at each of `revs` (None where it is missing), read by one
    `git cat-file --batch` rather than a `git show` each."""
    p = git.run(["cat-file", "--batch"], vault.root,
                input="".join(f"{rev}:{path}\n" for rev in revs).encode(), text=False)
    out = p.stdout
    texts: list[str | None] = []
    for _ in revs:
        header, _, out = out.partition(b"\n")
        parts = header.split()
        if len(parts) == 3 and parts[1] == b"blob":
            size = int(parts[2])
            texts.append(out[:size].decode("utf-8", "replace"))
            out = out[size + 1:]
        else:                               # "<rev>:<path> missing" (or no such rev)
            texts.append(None)
    return texts


def remote_at(vault: Vault, remote: str, branch: str) -> str | None:
    """The commit this vault last saw the remote's branch at, or None."""
    sha = vault.git("rev-parse", "--verify", "-q", f"refs/remotes/{remote}/{branch}",
                    check=False).strip()
    return sha or None


def push_rewritten(vault: Vault, remote: str, branch: str, local: str, lease: str | None) -> str:
    """Put rewritten `local` on the remote's `branch`, only if the remote still is at
    `lease` (what it was before the rewrite) and `local` holds all that was fetched from
    it: '' when done, else what went wrong."""
    fetched = remote_at(vault, remote, branch)
    if fetched and git.run(["merge-base", "--is-ancestor", fetched, local],
                           vault.root).returncode:
        return "it has commits this vault has not merged"
    spec = [f"--force-with-lease=refs/heads/{branch}:{lease}"] if lease else []
    p = git.run(["push", "--quiet", "--porcelain", *spec, remote, f"{local}:refs/heads/{branch}"],
                vault.root, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    if p.returncode:
        return (p.stderr or p.stdout).strip().splitlines()[-1] if (p.stderr or p.stdout) \
            else "push failed"
    vault.git("update-ref", f"refs/remotes/{remote}/{branch}", local)
    url = vault.git("remote", "get-url", remote, check=False).strip()
    if url and os.path.isdir(url):
        # A remote on this machine (a bare repository on a disk): its old objects go too.
        try:
            bare = prune.git_in(url, "rev-parse", "--is-bare-repository").strip() == "true"
            git_dir = prune.git_in(url, "rev-parse", "--absolute-git-dir").strip()
            prune.prune_repository(url, git_dir, work_tree=not bare)
        except prune.PruneError:
            pass       # it no longer hands them out; its own gc drops them later
    return ""


# ---- another clone: find the phrase from its own old copy -----------------------------


def _window_match(stone: Sought, old: str, new: str) -> str | None:
    """The phrase, if `old` holds it where `new` (its rewritten form) first differs."""
    k = 0
    limit = min(len(old), len(new))
    while k < limit and old[k] == new[k]:
        k += 1
    for start in range(k, max(-1, k - len(REPLACEMENT) - 1), -1):
        window = old[start:start + stone.length]
        if len(window) == stone.length and stone.matches(window):
            return window
    return None


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


def _from_texts(stone: Sought, old: str, new: str) -> str | None:
    if old == new:
        return None
    found = _window_match(stone, old, new)
    if found:
        return found
    a, b = old.split("\n"), new.split("\n")
    for x, y in zip(a, b):
        if x == y:
            continue
        try:                                  # a transcript line: the phrase is escaped
            sx, sy = _strings(boundedjson.loads(x)), _strings(boundedjson.loads(y))
        except ValueError:
            break
        for s, t in zip(sx, sy):
            if s != t:
                found = _window_match(stone, s, t)
                if found:
                    return found
        break
    return None


def _cat(vault: Vault, obj: str) -> str:
    p = git.run(["cat-file", "-p", obj], vault.root, text=False)
    return p.stdout.decode("utf-8", "replace")


def _message(vault: Vault, sha: str) -> str:
    return _git_out(vault, "log", "-1", "--format=%B", sha)


# Pairs of commits compared at most: the text is in the first pair a rewrite made that
# this clone has; a tombstone listing more only makes a sync slower.
MAX_PAIRS = 32


def recover(vault: Vault, stone: Sought) -> str | None:
    """The phrase of `stone`, found in this clone's copies of the commits it rewrote."""
    here = set(present(vault, [*stone.rewrote, *stone.rewrote.values()]))
    pairs = [(old, new) for old, new in stone.rewrote.items() if old in here and new in here]
    for old, new in pairs[:MAX_PAIRS]:
        found = _from_texts(stone, _message(vault, old), _message(vault, new))
        if found:
            return found
        raw = vault.git("diff-tree", "-r", "--no-renames", old, new)
        for line in raw.splitlines():
            meta, _, _path = line.partition("\t")
            parts = meta.split()
            if len(parts) < 5 or set(parts[2]) == {"0"} or set(parts[3]) == {"0"}:
                continue
            found = _from_texts(stone, _cat(vault, parts[2]), _cat(vault, parts[3]))
            if found:
                return found
    return None


def present(vault: Vault, shas: Iterable[str]) -> list[str]:
    """Those of `shas` that are commits of this repository (one `git cat-file`)."""
    shas = [x for x in dict.fromkeys(shas) if re.fullmatch(r"[0-9a-f]{40}(?:[0-9a-f]{24})?", x)]
    if not shas:
        return []
    p = git.run(["cat-file", "--batch-check=%(objectname) %(objecttype)"], vault.root,
                input="".join(f"{x}\n" for x in shas))
    return [line.split()[0] for line in p.stdout.splitlines()
            if line.endswith(" commit")]


def reached(vault: Vault, shas: list[str]) -> bool:
    """Whether any ref reaches one of the commits `shas` (one `git for-each-ref`)."""
    if not shas:
        return False
    return bool(vault.git("for-each-ref", "--count=1", *(f"--contains={x}" for x in shas),
                          check=False).strip())


def rewrites_here(vault: Vault, stone: Sought) -> bool:
    """Whether the tombstone's old commits are still in this vault's history."""
    return reached(vault, present(vault, stone.rewrote))


def affected(vault: Vault, text: str) -> int:
    """How many commits of every ref a rewrite of `text` changes: each whose change or
    message holds it, and every commit after one of those."""
    hits: set[str] = set()
    for form in forms(text):
        for args in (["-S", form], ["-F", f"--grep={form}"]):
            hits.update(_git_out(vault, "log", "--all", "--format=%H", *args).split())
    if not hits:
        return 0
    changed: set[str] = set()
    for line in _git_out(vault, "rev-list", "--all", "--parents", "--topo-order",
                         "--reverse").splitlines():
        sha, *parents = line.split()
        if sha in hits or any(p in changed for p in parents):
            changed.add(sha)
    return len(changed)


def scrub_state(vault: Vault, text: str) -> list[str]:
    """Replace the phrase in the agent's own local files (.agent/: logs, journals), which
    git never holds; the state derived from the files (the search index) is dropped
    first by the cleanups the vault's layout registered, to be rebuilt. The files
    changed."""
    drop_derived(vault.layout, vault.state)
    changed = []
    for path in sorted(vault.state.rglob("*")):
        if not path.is_file() or path.is_symlink() \
                or path.name == "lock" or path.stat().st_size > 50_000_000:
            continue
        try:
            data = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        new = data
        for form in forms(text):
            new = new.replace(form, REPLACEMENT)
        if new != data:
            from agent.fs import atomic
            atomic.write_text(path, new)
            changed.append(str(path.relative_to(vault.root)))
    return changed


# ---- where a phrase is (the survey and the verification of agent forget) --------------


def _git_out(vault: Vault, *args: str) -> str:
    return git.run(args, vault.root, input="", errors="replace").stdout


def _grep_args(text: str) -> list[str]:
    out = ["-F", "-I", "-c"]
    for form in forms(text):
        out += ["-e", form]
    return out


def grep_files(vault: Vault, text: str) -> dict[str, int]:
    """Files of the work tree (tracked or not, .agent/ aside) -> lines holding the phrase."""
    out = {}
    for line in _git_out(vault, "grep", "--untracked", *_grep_args(text), "--", ".").splitlines():
        path, _, n = line.rpartition(":")
        if path and n.isdigit():
            out[path] = int(n)
    return out


def grep_refs(vault: Vault, text: str) -> int:
    """Lines holding the phrase in the trees of every ref (`git grep` over all refs)."""
    refs = sorted(set(_git_out(vault, "for-each-ref", "--format=%(objectname)").split()))
    if not refs:
        return 0
    out = _git_out(vault, "grep", *_grep_args(text), *refs, "--")
    return sum(int(x.rpartition(":")[2]) for x in out.splitlines()
               if x.rpartition(":")[2].isdigit())


def commits_with(vault: Vault, text: str) -> tuple[list[str], list[str]]:
    """("abc1234 subject" of the commits that add or remove the phrase, of the commits
    whose message holds it), over every ref."""
    changed: dict[str, str] = {}
    messages: dict[str, str] = {}
    for form in forms(text):
        for line in _git_out(vault, "log", "--all", "--format=%h %s", "-S", form).splitlines():
            changed.setdefault(line.split(" ", 1)[0], line)
        for line in _git_out(vault, "log", "--all", "--format=%h %s", "-F",
                             f"--grep={form}").splitlines():
            messages.setdefault(line.split(" ", 1)[0], line)
    return list(changed.values()), list(messages.values())


def count_in_objects(vault: Vault, text: str) -> int:
    """Occurrences of the phrase in every object of the repository, reachable or not
    (`git cat-file --batch-all-objects --batch`), read as a stream."""
    patterns = [f.encode("utf-8") for f in forms(text)]
    keep = max(len(f) for f in patterns)
    proc = git.popen(["cat-file", "--batch-all-objects", "--batch"], vault.root,
                     stdout=subprocess.PIPE, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None
    proc.stdin.close()
    hits, tail = 0, b""
    assert proc.stdout is not None
    while chunk := proc.stdout.read(1 << 20):
        data = tail + chunk
        for f in patterns:
            start = 0
            while (i := data.find(f, start)) != -1:
                if i + len(f) > len(tail):     # not counted with the previous chunk
                    hits += 1
                start = i + 1
        tail = data[-keep:]
    proc.wait()
    return hits
