"""Tombstones are this machine's to decide: a forget made elsewhere never rewrites the
history here because it arrived.

A `.forgotten` entry (agent.stores.forgotten) tells every clone to rewrite its history
without a text. Anyone who can write the file can write one: a remote, a plain-git
clone pushing to it, a turn, a hand edit. So at each sync every tombstone of HEAD and
of the fetched branch whose old commits this vault still has is sorted:

- **followed** when this machine made it (`agent forget`) or the person accepted it
  here (`agent sync accept`): the text is recovered from the vault's own copies and the
  same rewrite runs, journalled (agent.vault.rewrite_journal);
- **held** otherwise (`tombstone_held`): `agent sync` shows it, with its text's length
  and the commits it would rewrite here, and merges and pushes nothing until the person
  decides, since merging the remote's rewritten branch with the old history here would
  put the text back on the remote;
- **dropped** when the person rejected it here: the sync merges as if it were not there.

Whatever is accepted, a text shorter than rewrite.MIN_CHARS is never cut out: one
character would be cut out of every file. The decisions are this machine's, in
`.agent/tombstones.json` (never in git): {"applied": {id: when}, "rejected": {id: when}}.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent import clock
from agent.fs import atomic
from agent.stores import forgotten
from agent.vault import git, rewrite, rewrite_journal
from agent.vault.repo import Vault, VaultError

STATE_FILE = "tombstones.json"      # in .agent/
APPLIED, REJECTED = "applied", "rejected"


# ---- this machine's decisions --------------------------------------------------------


def _decisions(vault: Vault) -> dict[str, dict]:
    data = atomic.read_json(vault.state / STATE_FILE)
    data = data if isinstance(data, dict) else {}
    return {k: data[k] if isinstance(data.get(k), dict) else {} for k in (APPLIED, REJECTED)}


def decide(vault: Vault, stone_id: str, decision: str) -> None:
    """Record that this machine applied (made or accepted) or rejected a tombstone."""
    data = _decisions(vault)
    for k in data:
        data[k].pop(stone_id, None)
    data[decision][stone_id] = clock.now().isoformat(timespec="seconds")
    vault.state.mkdir(exist_ok=True)
    atomic.write_json(vault.state / STATE_FILE, data)


def tombstone_held(vault: Vault, stone: forgotten.Tombstone) -> bool:
    """Whether a tombstone waits for this machine's decision: it would rewrite commits
    this vault has, and this machine neither made, accepted nor rejected it."""
    decided = _decisions(vault)
    if stone.id in decided[APPLIED] or stone.id in decided[REJECTED]:
        return False
    return rewrite.rewrites_here(vault, stone)


# ---- what a held tombstone would do --------------------------------------------------


@dataclass
class Waiting:
    """A tombstone held for the person's decision, as `agent sync held` shows it."""
    stone: forgotten.Tombstone
    source: str                     # remote/branch, or HEAD (a turn, a hand edit)
    commits: int | None = None      # commits its rewrite would change here (None: unknown)

    @property
    def too_short(self) -> bool:
        return self.stone.length < rewrite.MIN_CHARS

    def summary(self) -> str:
        n = self.stone.length
        out = f"{n} character{'s' * (n != 1)}, "
        out += ("its text is not in this vault's copies of the commits it names (it cannot "
                "be applied here)" if self.commits is None else
                f"would rewrite {self.commits} commit{'s' * (self.commits != 1)} here")
        if self.too_short:
            out += f"; under the {rewrite.MIN_CHARS}-character minimum: never applied here"
        return out

    def as_dict(self) -> dict:
        return {**self.stone.as_dict(), "source": self.source, "commits": self.commits}


def describe(vault: Vault, stone: forgotten.Tombstone, source: str) -> Waiting:
    """What a held tombstone would do here: its text is recovered from this vault's own
    copies (never written anywhere) to count the commits a rewrite would change."""
    text = rewrite.recover(vault, stone)
    return Waiting(stone, source, None if text is None else rewrite.affected(vault, text))


# ---- the sync --------------------------------------------------------------------------


@dataclass
class Followed:
    applied: list[str] = field(default_factory=list)     # tombstone ids rewritten here
    held: list[Waiting] = field(default_factory=list)    # waiting for the person
    problems: list[str] = field(default_factory=list)

    @property
    def blocked(self) -> bool:
        """Whether the sync must merge and push nothing now."""
        return bool(self.held or self.problems)

    def lines(self) -> list[str]:
        n = len(self.applied)
        out = [(f"forget: applied {n} forgotten phrase{'s' * (n != 1)} to this vault's "
                f"history (rewritten, old copies pruned)")] if n else []
        out += [f"Warning: {p}" for p in self.problems]
        if self.blocked:
            out.append("forget: nothing was merged or pushed: a forget made elsewhere would "
                       "rewrite this vault's history and waits for your decision (`agent "
                       "sync held`, then `agent sync accept` or `agent sync reject`)"
                       if self.held else "forget: nothing was merged or pushed")
        return out


def _stones(vault: Vault, tracking: str,
            objects: git.Objects | None = None) -> list[tuple[forgotten.Tombstone, str]]:
    """The tombstones of HEAD and of the fetched branch, each with where it is from
    (read through `objects`, a sync's session, when it has one)."""
    if objects is None:
        here, there = rewrite.texts_at(vault, ["HEAD", tracking], forgotten.FILE)
    else:
        here, there = (None if b is None else b.decode("utf-8", "replace") for b in
                       (objects.read(f"{rev}:{forgotten.FILE}") for rev in ("HEAD", tracking)))
    mine = {s.id: (s, "HEAD") for s in forgotten.parse(here)}
    for s in forgotten.parse(there):
        mine.setdefault(s.id, (s, tracking.removeprefix("refs/remotes/")))
    return list(mine.values())


def follow(vault: Vault, remote: str, branch: str,
           objects: git.Objects | None = None) -> Followed:
    """Between a sync's fetch and its merge: apply the tombstones this machine made or
    accepted, and hold the others that would rewrite commits here (see the module).
    `objects`: the sync's session reading objects, when it has one."""
    done = Followed()
    decided = _decisions(vault)
    todo = []
    for stone, source in _stones(vault, f"refs/remotes/{remote}/{branch}", objects):
        if stone.id in decided[REJECTED] or not rewrite.rewrites_here(vault, stone):
            continue
        if stone.id in decided[APPLIED]:
            todo.append(stone)
        else:
            done.held.append(describe(vault, stone, source))
    if not todo:
        return done
    before = rewrite.remote_at(vault, remote, branch)
    for stone in todo:
        problem = _apply(vault, stone, "agent sync")
        if problem:
            done.problems.append(problem)
        else:
            done.applied.append(stone.id)
    after = rewrite.remote_at(vault, remote, branch)
    if done.applied and after and after != before:
        # The remote still had the text (a forget whose push failed): put it right.
        problem = rewrite.push_rewritten(vault, remote, branch, after, before)
        if problem:
            done.problems.append(f"the remote still holds a forgotten phrase and could not "
                                 f"be updated ({problem})")
    return done


def _apply(vault: Vault, stone: forgotten.Tombstone, command: str) -> str | None:
    """Rewrite this vault's history as `stone` says (journalled); why not, or None."""
    problem = _too_short(stone)
    if problem:
        return problem
    with vault.locked():                  # hand edits go in first, as the person's
        text = rewrite.recover(vault, stone)
        if text is None:
            return (f"forgotten phrase {stone.id} is still in this vault's history, and its "
                    f"old and rewritten commits could not be compared here; run `agent "
                    f"forget` with the text on this machine")
        rewrite.scrub_state(vault, text)
        with rewrite_journal.rewriting(vault, stone.id, command, forgotten.FILE) as journal:
            rewrite.rewrite_history(vault, text)
            decide(vault, stone.id, APPLIED)
            journal.done()
    return None


def _too_short(stone: forgotten.Tombstone) -> str | None:
    if stone.length >= rewrite.MIN_CHARS:
        return None
    return (f"forgotten phrase {stone.id} is {stone.length} character"
            f"{'s' * (stone.length != 1)}, under the {rewrite.MIN_CHARS}-character minimum: "
            f"it is never applied here (`agent sync reject .forgotten#{stone.id}` drops it)")


# ---- the person's decision ------------------------------------------------------------


def check_acceptable(stone: forgotten.Tombstone) -> None:
    """VaultError when no decision can make this tombstone apply here (its text is under
    the minimum length)."""
    problem = _too_short(stone)
    if problem:
        raise VaultError(problem[0].upper() + problem[1:] + ". Nothing was changed.")


def accept(vault: Vault, stone: forgotten.Tombstone) -> None:
    """Apply a held tombstone here (VaultError, nothing changed, when it cannot be: a text
    under the minimum, or one this vault's copies do not hold)."""
    check_acceptable(stone)
    if not rewrite.rewrites_here(vault, stone):
        decide(vault, stone.id, APPLIED)      # nothing of it here any more
        return
    problem = _apply(vault, stone, "agent sync accept")
    if problem:
        raise VaultError(problem[0].upper() + problem[1:] + ". Nothing was changed.")


def reject(vault: Vault, stone_id: str) -> None:
    """Never apply this tombstone here; a sync merges as if it were not there."""
    decide(vault, stone_id, REJECTED)
