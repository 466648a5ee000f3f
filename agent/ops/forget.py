"""`agent forget`: a phrase gone from every file, every commit, the search index and the
vectors, on this machine and, at their next sync, on every other; with a receipt.

    found = survey(vault, "my bank password is hunter2")   # what would go, with counts
    receipt = forget(vault, "my bank password is hunter2", now)

The history rewrite is agent.vault.rewrite's, the tombstone that carries it to other
clones agent.stores.forgotten's; this module is the operation every front-end calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agent.errors import UserError
from agent.stores import forgotten, memory, sessions
from agent.vault import rewrite, rewrite_journal
from agent.fs import safe
from agent.vault.change import Change
from agent.vault.repo import Vault
from agent.vault import gitcmd
from agent.fs import boundedjson

MIN_CHARS = rewrite.MIN_CHARS


@dataclass
class Survey:
    text: str
    files: dict[str, int] = field(default_factory=dict)   # path -> lines holding it
    commits: list[str] = field(default_factory=list)      # "abc1234 subject" that add/remove it
    messages: list[str] = field(default_factory=list)     # commits whose message holds it

    @property
    def empty(self) -> bool:
        return not (self.files or self.commits or self.messages)

    def lines(self) -> list[str]:
        out = [f"  {path}: {n} line{'s' * (n != 1)}" for path, n in sorted(self.files.items())]
        if self.commits:
            out.append(f"  history: {len(self.commits)} commit{'s' * (len(self.commits) != 1)} "
                       f"added or removed it")
        if self.messages:
            out.append(f"  commit messages: {len(self.messages)}")
        return out


@dataclass
class Receipt:
    survey: Survey
    rewritten: int = 0                  # commits whose new version differs
    tombstone: str = ""
    commit: str | None = None
    pushed: str = ""                    # "origin/main" when the remote was updated
    push_problem: str = ""
    state_files: list[str] = field(default_factory=list)
    checks: dict[str, int] = field(default_factory=dict)   # place -> hits left (0: gone)

    @property
    def verified(self) -> bool:
        return not any(self.checks.values())

    def as_dict(self) -> dict[str, Any]:
        return {"files": self.survey.files, "commits": len(self.survey.commits),
                "messages": len(self.survey.messages), "rewritten": self.rewritten,
                "tombstone": self.tombstone, "commit": self.commit, "pushed": self.pushed,
                "push_problem": self.push_problem, "state_files": self.state_files,
                "verification": self.checks, "verified": self.verified}


def check_phrase(text: str) -> str:
    text = text.strip("\n")
    if len(text.strip()) < MIN_CHARS:
        raise UserError(f"Give at least {MIN_CHARS} characters to forget: a shorter text "
                        f"would be cut out of unrelated words everywhere.")
    if text == rewrite.REPLACEMENT:
        raise UserError(f"{rewrite.REPLACEMENT} is what forgotten text becomes; give the text.")
    return text


def survey(vault: Vault, text: str) -> Survey:
    """Where the phrase is: files of the work tree (lines), and commits of every ref."""
    s = Survey(text)
    s.files = rewrite.grep_files(vault, text)
    s.commits, s.messages = rewrite.commits_with(vault, text)
    return s


def message_text(vault: Vault, message_id: str) -> str:
    """The text of the transcript message with id `message_id` (agent search shows ids)."""
    for path in sorted(vault.root.glob("sessions/**/*.jsonl")):
        rel = str(path.relative_to(vault.root))
        for line in (safe.read_text(vault.root, rel, errors="replace") or "").splitlines():
            if message_id not in line:
                continue
            try:
                obj = boundedjson.loads(line)
            except ValueError:
                continue
            if obj.get("id") == message_id:
                text = sessions.message_text(obj.get("content"))
                if not text.strip():
                    raise UserError(f"Message {message_id} holds no text to forget.")
                return text
    raise UserError(f"No message has the id {message_id} (agent search shows the ids).")


def fact_text(vault: Vault, text: str) -> str:
    """The one line of MEMORY.md or USER.md that holds `text` (its words, no bullet)."""
    hits = []
    for name in memory.MEMORY_FILES:
        for n, line in enumerate((safe.read_text(vault.root, name) or "").splitlines(), 1):
            if text.lower() in line.lower() and line.strip():
                hits.append((name, n, line.strip().lstrip("-*").strip()))
    if not hits:
        raise UserError(f"No line of MEMORY.md or USER.md holds {text!r}.")
    if len(hits) > 1:
        listed = "\n".join(f"  {name}:{n}: {line}" for name, n, line in hits[:10])
        raise UserError(f"{len(hits)} lines hold {text!r}; give more of the one to forget:\n"
                        f"{listed}")
    return hits[0][2]


# ---- forgetting ----------------------------------------------------------------------


def _upstream(vault: Vault) -> tuple[str, str, str | None] | None:
    """(remote, branch, the commit the remote branch is at) of the sync upstream, or None."""
    from agent.sync import remotes as syncing
    if not gitcmd.has_remote(vault):
        return None
    try:
        remote, branch = syncing.upstream(vault)
    except syncing.SyncError:
        return None
    return remote, branch, rewrite.remote_at(vault, remote, branch)


def forget(vault: Vault, text: str, now: datetime, *, sync_first: bool = True) -> Receipt:
    """Remove `text` everywhere, record the tombstone, update the remote, verify.

    The rewrite and its tombstone commit are journalled (agent.vault.rewrite_journal): a
    kill is finished or undone by the next command."""
    from agent.sync import remotes as syncing, tombstones

    text = check_phrase(text)
    receipt = Receipt(survey(vault, text))
    upstream = _upstream(vault)
    if upstream and sync_first:
        # The remote's newest commits are rewritten too, not overwritten by the push.
        try:
            synced = syncing.sync(vault, now=now)
        except syncing.SyncError as e:
            receipt.push_problem = f"could not sync first ({e})"
        else:
            if synced.waiting:
                # Its push would drop the remote's commits this vault did not merge.
                raise UserError("Nothing was forgotten: a forget made on another machine "
                                "waits for your decision here (`agent sync held`); accept "
                                "or reject it, then run agent forget again.")
        upstream = _upstream(vault)
    with vault.locked():                     # hand edits first, as the person's commit
        # Before anything moves: nothing of the text stays in .agent/, whatever follows.
        receipt.state_files = rewrite.scrub_state(vault, text)
        stone = forgotten.new_tombstone(text, now.isoformat(timespec="seconds"), {})
        with rewrite_journal.rewriting(vault, stone.id, "agent forget",
                                       forgotten.FILE) as journal:
            stone.rewrote = rewrite.rewrite_history(vault, text)
            receipt.commit = _commit_tombstone(vault, stone, len(receipt.survey.files))
            tombstones.decide(vault, stone.id, tombstones.APPLIED)
            journal.done()
        receipt.rewritten = len(stone.rewrote)
        receipt.tombstone = stone.id
    if upstream:
        remote, branch, lease = upstream
        problem = rewrite.push_rewritten(vault, remote, branch, "HEAD", lease)
        if problem:
            receipt.push_problem = (f"{remote} was not updated ({problem}); the next "
                                    f"`agent sync` rewrites it")
        else:
            receipt.pushed = f"{remote}/{branch}"
    from agent.search import index
    index.rebuild(vault)
    receipt.checks = verify(vault, text)
    return receipt


def _commit_tombstone(vault: Vault, stone: forgotten.Tombstone, n_files: int) -> str | None:
    """Add `stone` to .forgotten in one commit that says what was done."""
    stones = forgotten.parse(
        vault.read_text(forgotten.FILE) if (vault.root / forgotten.FILE).exists()
        else None)
    vault.write_text(forgotten.FILE, forgotten.dumps(stones + [stone]))
    n = len(stone.rewrote)
    return vault.commit(Change(
        "forget", f"a phrase removed from {n_files} file{'s' * (n_files != 1)}, "
                  f"{n} commit{'s' * (n != 1)} rewritten",
        trailers={"Forgotten": stone.id}))


def verify(vault: Vault, text: str) -> dict[str, int]:
    """Hits of the phrase left: in the files, in every ref (git grep), in every object
    of the repository (git cat-file --batch-all-objects) and in the search index and
    its vectors (the bytes of .agent/index.sqlite*)."""
    forms = [f.encode("utf-8") for f in rewrite.forms(text)]
    checks = {"files": sum(rewrite.grep_files(vault, text).values()),
              "git grep, all refs": rewrite.grep_refs(vault, text),
              "every object": rewrite.count_in_objects(vault, text)}
    from agent.search import index
    db = index.db_path(vault)
    n = 0
    for path in sorted(db.parent.glob(db.name + "*")):
        data = path.read_bytes()
        n += sum(data.count(f) for f in forms)
    checks["search index and vectors"] = n
    return checks
