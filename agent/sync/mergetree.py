"""A sync's merge computed without touching the work tree: `git merge-tree` with the
vault's merge drivers (agent.sync.mergedriver), a file no driver can merge kept this
machine's way with the other machine's version beside it, and the notes the merge
commit carries about facts that came in (for agent.sync.remotes)."""

from __future__ import annotations

import os
import re

from agent.oneline import plural
from agent.sync.mergedriver import git_config
from agent.vault import git as gitrun
from agent.vault.repo import GitError, Vault

FACT_FILES = ("MEMORY.md", "USER.md")   # agent.stores.memory.MEMORY_FILES, unloaded


def fact_notes(vault: Vault, ours: str, theirs: str, remote: str) -> list[str]:
    """What the facts merge did where both machines changed the same facts, in words:
    both versions kept, or a fact deleted on one machine and changed on the other kept
    as changed (the merge driver ran inside git and could not say)."""
    base = vault.git("merge-base", ours, theirs, check=False).strip()
    if not base:
        return []

    def oids(commit):
        out = vault.git("ls-tree", "-z", commit, "--", *FACT_FILES)
        return {e.split("\t", 1)[1]: e.split()[2] for e in out.split("\0") if "\t" in e}

    b, o, t = oids(base), oids(ours), oids(theirs)
    lines = []
    for path in FACT_FILES:
        if not (b.get(path) and o.get(path) and t.get(path)) or len({b[path], o[path], t[path]}) < 3:
            continue
        data = [vault.git("cat-file", "blob", x[path]).encode("utf-8", "surrogateescape")
                for x in (b, o, t)]
        counts: dict[str, int] = {}
        from agent.stores import merge
        merge.merge_facts(data[0], data[1], data[2], counts=counts)
        lines += [f"- {path}: {plural(counts[key], 'fact')} {said.format(remote=remote)}"
                  for key, said in _SAID if counts.get(key)]
    return ["Facts changed on both machines:\n" + "\n".join(lines)] if lines else []


# What each count of agent.stores.merge.merge_facts did, said after the facts it counts.
_SAID = (("both", "changed differently on both machines: both versions kept, marked for "
                  "the dream"),
         ("deleted_ours", "deleted here, changed on {remote}: kept {remote}'s version"),
         ("deleted_theirs", "deleted on {remote}, changed here: kept this machine's version"))


def _driver_args() -> list[str]:
    args = []
    for key, value in git_config():
        args += ["-c", f"{key}={value}"]
    return args


_STAGE = r"^(\d{6}) ([0-9a-f]{40,64}) ([123])\t(.*)$"   # compiled by the merge that needs it


def merge_tree(vault: Vault, ours: str, theirs: str,
                remote: str) -> tuple[str, list[str], list[str]]:
    """The merged tree of two commits, every path settled; what happened to each path
    git could not merge (a line each, for the merge commit); and the paths kept both
    ways."""
    p = gitrun.run([*_driver_args(), "merge-tree", "--write-tree", "-z",
                    "--allow-unrelated-histories", ours, theirs], vault.root, text=False)
    if p.returncode not in (0, 1):
        raise GitError(["merge-tree", ours, theirs], p.returncode, p.stderr.decode("utf-8", "replace"))
    fields = p.stdout.split(b"\0")
    tree = fields[0].decode()
    if p.returncode == 0:
        return tree, [], []
    from agent.stores import merge
    stages: dict[str, dict[int, tuple[str, str]]] = {}
    for raw in fields[1:]:
        if not raw:
            break
        m = re.match(_STAGE, raw.decode("utf-8", "surrogateescape"), re.S)
        if m:
            mode, oid, stage, path = m.groups()
            stages.setdefault(path, {})[int(stage)] = (mode, oid)
    index = vault.state / "sync-index"
    index.unlink(missing_ok=True)
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}

    def in_index(*args, input: bytes | None = None) -> bytes:
        return gitrun.output(args, vault.root, env=env, input=input, text=False)

    in_index("read-tree", tree)
    notes, both = [], []
    short = theirs[:7]
    for path, st in sorted(stages.items()):
        base, mine, other = st.get(1), st.get(2), st.get(3)
        if mine is None or other is None:
            # Deleted on one side, changed on the other: the changed version stays.
            keep = mine if mine is not None else other
            if keep is None:            # in no stage: nothing to keep
                continue
            in_index("update-index", "--add", "--cacheinfo", f"{keep[0]},{keep[1]},{path}")
            notes.append(f"- {path}: deleted on {remote}, changed here: kept this machine's "
                         f"version" if mine else
                         f"- {path}: deleted here, changed on {remote}: kept {remote}'s version")
            continue
        data = [in_index("cat-file", "blob", s[1]) if s else b"" for s in (base, mine, other)]
        merged = None
        if path.endswith(".md") and all(_is_text(d) for d in data):
            merged = merge.merge_facts(data[0], data[1], data[2])
        if merged is not None:
            oid = in_index("hash-object", "-w", "--stdin", input=merged).decode().strip()
            in_index("update-index", "--add", "--cacheinfo", f"{mine[0]},{oid},{path}")
            clashes = merge.has_conflicts(merged.decode()) - merge.has_conflicts(data[1].decode())
            if clashes > 0:
                both.append(path)
                notes.append(f"- {path}: changed on both machines: both versions of "
                             f"{clashes} fact{'s' * (clashes != 1)} kept, marked for the dream")
            else:
                notes.append(f"- {path}: changed on both machines: merged line by line")
        else:
            in_index("update-index", "--add", "--cacheinfo", f"{mine[0]},{mine[1]},{path}")
            stem, dot, ext = path.rpartition(".")
            copy = f"{stem}.sync-conflict-{short}.{ext}" if dot and "/" not in ext else \
                f"{path}.sync-conflict-{short}"
            in_index("update-index", "--add", "--cacheinfo", f"{other[0]},{other[1]},{copy}")
            both.append(path)
            notes.append(f"- {path}: changed on both machines: kept this machine's version, "
                         f"{remote}'s beside it as {copy}")
    new_tree = in_index("write-tree").decode().strip()
    index.unlink(missing_ok=True)
    head = "What could not be merged line by line:\n" if notes else ""
    return new_tree, [head + "\n".join(notes)] if notes else [], both


def _is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
