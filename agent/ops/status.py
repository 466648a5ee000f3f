"""`agent status`: where the vault stands, gathered once for the front-ends to render
(HEAD, hand edits and what keeps them out, counts, memory, the dream's cursor, the
sync's tracking branch, held incoming changes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.errors import UserError
from agent.fs import safe
from agent.search import index
from agent.stores import archive, memory, merge
from agent.sync import held as held_changes
from agent.sync import remotes
from agent.vault import history
from agent.vault.repo import Vault


@dataclass
class Tracking:
    ref: str
    ahead: int
    behind: int
    last: str | None          # when the last sync was, ISO 8601
    host: str                 # this machine's name for its cron jobs and heartbeats


@dataclass
class Writing:
    """A command's change being written (a running import's chunk), or one a kill
    interrupted, which the next command commits as it was journalled."""
    change: str                # its commit's subject line
    files: list[str]           # the files it has written so far
    running: bool              # its process still holds the vault lock


@dataclass
class Status:
    root: str
    head: str | None           # the sha
    head_line: str             # the newest commit in one line
    dirty: list[str]           # uncommitted paths, left-out files included
    blocked: str | None        # why nothing can be committed (a broken agent.toml)
    broken: str | None         # why a hand edit cannot be committed (a broken cron.json)
    held_back: dict[str, str]  # left uncommitted on purpose, with why
    sessions: int
    messages: int
    archive_entries: int
    newest_archive: int
    facts: dict[str, int]
    conflicts: dict[str, int]  # sync-conflict blocks by memory file
    dream_cursor: int
    dream_waiting: int
    tracking: Tracking | None
    held: list[str]            # incoming changes held, by key
    warnings: list[str] = field(default_factory=list)
    writing: Writing | None = None

    @property
    def edits(self) -> list[str]:
        """The hand edits: what is uncommitted, not left out on purpose and not a
        command's change being written."""
        ours = set(self.writing.files) if self.writing else set()
        return [p for p in self.dirty if p not in self.held_back and p not in ours]


def writing(vault: Vault, dirty: list[str]) -> Writing | None:
    """The change the write journal says a command is making (or was, when killed),
    with the uncommitted files it wrote; None when there is none."""
    change = vault.journal.intended()
    if change is None:
        return None
    mine = vault.journal.pending_paths()
    files = [p for p in dirty if p in mine]
    running = vault.lock.held_elsewhere() is not None
    return Writing(change.head, files, running) if files or running else None


def commit_blocker(vault: Vault) -> str | None:
    """Why the vault's next change cannot be committed (a broken agent.toml), or None."""
    try:
        vault.agent_identity()
    except UserError as e:
        return f"{e}; nothing is committed until it is fixed: run agent edit agent.toml."
    return None


def status(vault: Vault) -> Status:
    root = vault.root
    dirty = vault.dirty_paths()
    n_sessions, messages = index.message_counts(vault, dirty)
    warnings: list[str] = []
    ids = archive.entry_ids(root)
    try:
        done = archive.read_consolidated(root)
    except UserError as e:
        warnings.append(str(e))
        done = archive.Consolidated()
    texts = {}
    for name in memory.MEMORY_FILES:
        try:
            texts[name] = safe.read_text(root, name, errors="replace", warnings=warnings) or ""
        except UserError as e:
            warnings.append(str(e))
            texts[name] = ""
    tracking = remotes.ahead_behind(vault)
    return Status(
        root=str(root), head=vault.head(), head_line=history.head_line(vault) or "(no commits)",
        dirty=dirty, blocked=commit_blocker(vault), broken=vault.lock.broken_hand_edit(dirty),
        held_back=vault.lock.held_back(), sessions=n_sessions, messages=messages,
        archive_entries=len(ids), newest_archive=ids[-1][0] if ids else 0,
        facts={name: memory.count_facts(text) for name, text in texts.items()},
        conflicts={name: merge.has_conflicts(text) for name, text in texts.items()},
        dream_cursor=done.high, dream_waiting=len(ids) - done.count_in([i for i, _ in ids]),
        tracking=Tracking(tracking[0], tracking[1], tracking[2],
                          (remotes.last_sync(vault) or {}).get("at"), vault.host())
        if tracking else None,
        held=[h.key for h in held_changes.pending(vault)], warnings=warnings,
        writing=writing(vault, dirty))
