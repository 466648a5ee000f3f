"""The rewrite journal: a history rewrite (`agent forget`, an accepted tombstone) that a
kill at any instant leaves finished or undone, never half done.

    with rewrite_journal.rewriting(vault, stone_id, "agent forget", ".forgotten") as rewrite:
        ...                                      # git-filter-repo, the tombstone commit
        rewrite.done()                           # the new history is whole
    # leaving: finished (old copies pruned), or undone when done() was not reached

`.agent/rewrite.json` is written (fsynced) under the vault lock before any ref moves.
It holds every ref and HEAD's commit as they were, the tombstone's id (never the text:
nothing that holds the phrase is written to .agent/), the one file the rewrite may add
to the work tree (the tombstones', named by the caller: the vault knows no file of the
product) and where the rewrite stands:

- "rewriting": refs may have moved, the work tree may be half checked out, the
  tombstone commit may be missing. The old objects are all still there (nothing is
  pruned in this phase), so the next command, as it takes the vault lock and before it
  commits anything as a hand edit, puts every ref back and checks the old HEAD out
  again: nothing was forgotten, and the person is told to run the command again.
- "rewritten": the new history is whole. The next command finishes: reflogs expired,
  old objects and the commit-graph pruned, the state derived from the files dropped
  by the cleanups the vault's layout registered (the search index: the next search
  rebuilds it). A push left undone is the next sync's: it follows the tombstones this
  machine applied (agent.sync.tombstones).

Either way no sync ever sees old history beside new: a sync settles the journal before
it fetches (agent.sync.remotes).
"""

from __future__ import annotations

import contextlib
import shutil
from typing import Any
from collections.abc import Iterator

from agent.fs import atomic
from agent.vault import prune
from agent.vault.git import GitError, VaultError
from agent.vault.layout import drop_derived
from agent.vault.parts import Repository

JOURNAL = "rewrite.json"            # in .agent/
OLD_RULES = "forget"                # .agent/forget/: an older version's rules (the phrase)
# The one file a rewrite may add to the work tree, when a journal of an older version
# does not name it.
OLD_ADDS = ".forgotten"


def pending(vault: Repository) -> bool:
    """Whether an interrupted rewrite waits to be settled, or an older version's rules
    file (which held the text) is left (two stats: no git)."""
    return (vault.state / JOURNAL).exists() or (vault.state / OLD_RULES).exists()


class Rewrite:
    """A journalled rewrite in progress (see `rewriting`)."""

    def __init__(self, vault: Repository, data: dict[str, Any]):
        self.vault, self.data = vault, data

    def done(self) -> None:
        """The new history is whole: from now on a kill is finished, not undone."""
        self.data["phase"] = "rewritten"
        atomic.write_json(self.vault.state / JOURNAL, self.data)


def _refs(vault: Repository) -> dict[str, str]:
    """Every ref that is not a symbolic one (origin/HEAD follows origin/main) -> commit."""
    out = vault.git("for-each-ref", "--format=%(objectname) %(refname) %(symref)")
    return {parts[1]: parts[0] for parts in (line.split(" ") for line in out.splitlines())
            if len(parts) == 3 and not parts[2]}


@contextlib.contextmanager
def rewriting(vault: Repository, stone_id: str, command: str, adds: str) -> Iterator[Rewrite]:
    """Journal a rewrite (call locked, with the work tree committed): yields a Rewrite
    whose done() marks the new history whole; on leaving, the rewrite is finished, or
    undone when done() was not reached (an error: the history is as it was). `adds`:
    the one file the rewrite may add to the work tree, removed again by an undo."""
    shutil.rmtree(vault.state / OLD_RULES, ignore_errors=True)
    data = {"version": 1, "id": stone_id, "command": command, "phase": "rewriting",
            "head": vault.head(), "refs": _refs(vault), "adds": adds}
    vault.state.mkdir(exist_ok=True)
    atomic.write_json(vault.state / JOURNAL, data)
    rewrite = Rewrite(vault, data)
    try:
        yield rewrite
    finally:
        if data["phase"] == "rewritten":
            _finish(vault)
        else:
            _undo(vault, data)


def settle(vault: Repository) -> None:
    """Finish or undo a rewrite a kill interrupted (called as the vault lock is taken,
    before anything is committed); what was done goes to `vault.recovered`."""
    shutil.rmtree(vault.state / OLD_RULES, ignore_errors=True)
    data = atomic.read_json(vault.state / JOURNAL)
    if not isinstance(data, dict) or not isinstance(data.get("refs"), dict):
        (vault.state / JOURNAL).unlink(missing_ok=True)
        return
    command = str(data.get("command") or "rewrite")
    if data.get("phase") == "rewritten":
        try:
            _finish(vault)
        except prune.PruneError as e:      # the history is whole: only the prune is left
            vault.recovered.append(f"an interrupted `{command}` was finished, but {e}")
            return
        vault.recovered.append(f"an interrupted `{command}` was finished: old copies of the "
                               f"forgotten text pruned (`agent sync` updates the remote)")
    else:
        try:
            _undo(vault, data)
        except GitError as e:
            raise VaultError(f"An interrupted `{command}` could not be undone ({e}); its "
                             f"journal is {vault.state / JOURNAL}, which lists every ref "
                             f"as it was. Nothing was changed since.") from None
        vault.recovered.append(f"an interrupted `{command}` was undone: the history is as "
                               f"it was and nothing was forgotten; run it again")


def _finish(vault: Repository) -> None:
    """Prune the old copies (PruneError if git fails: the journal goes all the same, the
    new history being whole, so a failing prune never stops every later command)."""
    drop_derived(vault.layout, vault.state)      # rebuilt from the new history when needed
    shutil.rmtree(vault.git_dir / "filter-repo", ignore_errors=True)
    try:
        prune.prune_repository(vault.root, vault.git_dir)
    finally:
        (vault.state / JOURNAL).unlink(missing_ok=True)


def _undo(vault: Repository, data: dict[str, Any]) -> None:
    """Every ref back where the journal found it, and the old HEAD's tree in the index
    and the work tree (only what differs is written)."""
    for lock in (vault.git_dir / "refs").rglob("*.lock"):
        lock.unlink(missing_ok=True)              # a ref update the kill cut short
    now = _refs(vault)
    moves = "".join(f"update {ref} {sha}\n" for ref, sha in data["refs"].items()
                    if isinstance(sha, str) and now.get(ref) != sha)
    if moves:
        vault.git("update-ref", "--stdin", input=moves)
    head = data.get("head")
    adds = data.get("adds", OLD_ADDS)
    if isinstance(head, str):
        vault.git("read-tree", "--reset", "-u", head)
        if isinstance(adds, str) and adds and \
                not vault.git("ls-tree", "--name-only", head, "--", adds).strip():
            (vault.root / adds).unlink(missing_ok=True)
    shutil.rmtree(vault.git_dir / "filter-repo", ignore_errors=True)
    (vault.state / JOURNAL).unlink(missing_ok=True)
