"""Conversations: which there are, the one `agent chat -c` resumes, archiving one now
(`agent archive`, `/new`), and the topic of an archive entry. The one implementation
the CLI, the REPL, Telegram and the web page call; they only render.

    found = list_sessions(vault)                         # most recent first
    done = new_conversation(vault, provider, "cli/default", now)
    print(done.said)                                     # "Archived as entry 7 (Kyoto). ..."
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from agent.errors import UserError, did_you_mean
from agent.stores import sessions
from agent.fs import atomic
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.llm import Provider
    from agent.vault.repo import Vault

DEFAULT_SESSION = "cli/default"
LAST_SESSION = "last_session"       # in .agent/: the session `agent chat -c` resumes


def list_sessions(vault: Vault) -> list[Any]:
    """Every conversation (search.index.SessionSummary: key, messages, first, last, the
    last line and who said it), most recent first."""
    from agent.search import index

    return index.session_summaries(vault)


def titles(vault: Vault, found: list[Any]) -> dict[str, str]:
    """The titles of the imported conversations among `found` (key -> title)."""
    from agent.stores.exports import title_of

    out = {}
    for s in found:
        title = title_of(vault.root, s.key)
        if title:
            out[s.key] = title
    return out


def oldest_first(vault: Vault, keys: list[str]) -> list[str]:
    """`keys` by the month of their first messages, an imported conversation by when it
    began: `agent archive --all` makes the entries of a life's export in the order it
    was lived, and the dream, which reads entries in order, learns it oldest first."""
    from agent.stores.exports import conversation_of

    def when(key: str) -> tuple[str, str, str]:
        files = sessions.Session(vault.root, key).files()
        about = conversation_of(vault.root, key) or {}
        return (files[0].name if files else "", str(about.get("created") or ""), key)
    return sorted(keys, key=when)


def exists(vault: Vault, key: str) -> bool:
    return bool(sessions.Session(vault.root, key).files())


def unknown_session(vault: Vault, key: str) -> str:
    """The message for a session key the vault has no transcript of."""
    known = sessions.list_sessions(vault.root)
    return (f"No session {key} in {vault.root}.{did_you_mean(key, known)} "
            f"`agent sessions` lists them.")


def check_known(vault: Vault, key: str) -> str:
    """`key` checked and known to the vault; UserError naming the close ones otherwise."""
    key = sessions.check_key(key)
    if not exists(vault, key):
        raise UserError(unknown_session(vault, key))
    return key


def last_session(vault: Vault) -> str | None:
    """The session `agent chat` used last (else the one with the newest message)."""
    try:
        key = (vault.state / LAST_SESSION).read_text(encoding="utf-8").strip()
        return sessions.check_key(key)
    except (OSError, UserError):
        pass
    found = list_sessions(vault)
    return found[0].key if found else None


def remember_last(vault: Vault, key: str) -> None:
    """Keep `key` as the session `agent chat -c` resumes. Written whole or not at all
    (a crash mid-write leaves the previous name, never half of one)."""
    try:
        vault.state.mkdir(exist_ok=True)
        atomic.write_text(vault.state / LAST_SESSION, key + "\n")
    except OSError:
        pass                    # a convenience: a read-only .agent/ costs only the -c


def topic(vault: Vault, entry_id: int) -> str:
    """The topic of archive entry `entry_id` ("" when there is none)."""
    from agent.stores import archive

    found = archive.find(vault.root, entry_id)
    return "" if found is None else archive.load(vault.root, found).topic


@dataclass
class NewConversation:
    """What `/new` did: the archive entry made (None: nothing to archive), or why not."""
    entry: int | None = None
    topic: str = ""
    error: str | None = None

    @property
    def said(self) -> str:
        if self.error is not None:
            return f"{self.error} The conversation goes on as it was."
        if self.entry is None:
            return "Nothing to archive; this is already a fresh conversation."
        return f"Archived as entry {self.entry} ({self.topic}). A fresh conversation starts."


def new_conversation(vault: Vault, provider: Provider, session: str, now: datetime) -> NewConversation:
    """`/new`: archive the conversation's window and start afresh. A summary that fails
    keeps the conversation as it was (its messages are never dropped)."""
    from agent.chat import working
    from agent.chat.compact import CompactError, compact_session

    try:
        entry = compact_session(vault, provider, session, now, force=True)
    except CompactError as e:
        return NewConversation(error=str(e))
    working.clear(vault.root, session)       # a fresh conversation recalls afresh
    if entry is None:
        return NewConversation()
    return NewConversation(entry, topic(vault, entry))


def archive(vault: Vault, provider: Provider, session: str, now: Callable[[], datetime], *,
            on_entry: Callable[[int, int | None], None] | None = None) -> list[int]:
    """`agent archive`: compact the whole window of `session` now, imported history
    waiting beyond it first (one chunk a request); the entries made, each also given to
    `on_entry(entry, bytes of imported history left)` as it is committed. CompactError
    (a summary that failed) leaves the conversation as it was."""
    from agent.chat.compact import backlog_bytes, compact_backlog, compact_until

    def shown(entry: int, left: int | None = None) -> None:
        if on_entry is not None:
            on_entry(entry, left)

    made: list[int] = []
    while (entry := compact_backlog(vault, provider, session, now())) is not None:
        made.append(entry)
        shown(entry, backlog_bytes(vault.root, session))
    made += compact_until(vault, provider, session, now(), force=True, on_entry=shown)
    return made
