"""The whole history at once, for what sums over it (`agent stats`): every commit reachable
from HEAD in one `git log` (with the trailers asked for and the blobs some files had after
it), and any number of blobs in one `git cat-file --batch`. Two processes, however long
the history: never one per commit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

_F, _R, _V = "\x1f", "\x1e", "\x1d"


@dataclass
class Commit:
    sha: str
    parents: list[str]
    when: int                      # the committer's Unix time
    subject: str
    trailers: dict[str, list[str]]
    blobs: dict[str, str]          # a watched file -> its blob after this commit ("": deleted)

    def trailer(self, key: str) -> str | None:
        values = self.trailers.get(key)
        return values[-1] if values else None

    @property
    def kind(self) -> str:
        """`chat` of `chat(cli/default): hello`."""
        return self.subject.split(":", 1)[0].split("(", 1)[0]


def commits(vault: Vault, keys: tuple[str, ...], files: tuple[str, ...]) -> list[Commit]:
    """Every commit reachable from HEAD, oldest first, with trailers `keys` and the blobs
    `files` had after it when it changed them (a merge: against its first parent)."""
    if vault.head() is None:
        return []
    trailers = "".join(f"{_F}%(trailers:key={k},valueonly,separator=%x1d)" for k in keys)
    out = vault.git("log", "--reverse", "--root", "--raw", "--no-abbrev", "--no-renames",
                    "--diff-merges=first-parent",
                    f"--format={_R}%H{_F}%P{_F}%ct{_F}%s{trailers}{_F}", "HEAD")
    found = []
    for rec in out.split(_R):
        if not rec.strip():
            continue
        head, _, raw = rec.rpartition(_F)
        sha, parents, when, subject, *values = head.split(_F)
        said = {k: [x.strip() for x in v.split(_V) if x.strip()] for k, v in zip(keys, values)}
        blobs = {}
        for line in raw.splitlines():
            meta, tab, path = line.partition("\t")
            if tab and path in files and meta.startswith(":"):
                new = meta.split()[3]
                blobs[path] = "" if set(new) == {"0"} else new     # a null id: deleted
        found.append(Commit(sha, parents.split(), int(when), subject,
                            {k: v for k, v in said.items() if v}, blobs))
    return found


def first_parents(found: list[Commit]) -> set[str]:
    """The commits of HEAD's first-parent line (the vault's own states, in order)."""
    parents = {c.sha: c.parents for c in found}
    out: set[str] = set()
    sha: str | None = found[-1].sha if found else None
    while sha is not None and sha not in out:
        out.add(sha)
        ps = parents.get(sha) or []
        sha = ps[0] if ps else None
    return out


def blobs(vault: Vault, shas: set[str]) -> dict[str, str]:
    """The text of each blob (undecodable bytes replaced), "" for a missing one."""
    if not shas:
        return {}
    order = sorted(shas)
    data = vault.git("cat-file", "--batch", input="".join(b + "\n" for b in order))
    raw = data.encode("utf-8", "surrogateescape")      # sizes count bytes
    out, at = {}, 0
    for sha in order:
        end = raw.index(b"\n", at)
        header = raw[at:end].split()
        at = end + 1
        if len(header) < 3 or header[1] == b"missing":
            out[sha] = ""
            continue
        size = int(header[2])
        out[sha] = raw[at:at + size].decode("utf-8", "replace")
        at += size + 1
    return out
