"""A change to the vault as its commit tells it: the one place commit messages are made.

Every change the product commits is a `Change`, a typed record that becomes the commit
message in exactly one place (`Change.message`), and the vault commits it:

    vault.commit(Change("chat", "plan the Kyoto trip", scope="cli/default",
                        trailers={"Session": "cli/default", "Turn": "3"}))

        chat(cli/default): plan the Kyoto trip

        Session: cli/default
        Turn: 3

Reading commits back (trailers, undo, what changed since) is agent.vault.history; this
module is apart from it because the vault (agent.vault.repo) needs the record to commit
and history needs the vault to read, so one module would make the two import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

# Trailer keys: the `Key: value` lines the product writes and reads back.
SESSION = "Session"          # the session key of a chat turn, compaction or undo
TURN = "Turn"                # the turn's number in its session
MODEL = "Model"
TOKENS = "Tokens"            # written by tokens(), read back by read_tokens()
RUN = "Run"                  # a dream run: `first..through` archive ids
CURSOR = "Cursor"
BATCH = "Batch"
REVERTS = "Reverts"
ERROR = "Error"
INTERRUPTED = "Interrupted"
INJECTED = "Injected"
RUNS = "Runs"
CLIENT = "Client"            # the MCP client that asked
TOOL = "Tool"
REVIEWER = "Reviewer"
DUPLICATES = "Dropped-duplicates"  # a dream's edits dropped as restating a fact already held
# A dream's edits, by what they did (read by agent stats; older dream commits tell them
# only in their subject): facts added, updated and removed in memory, and proposed
# (waiting for review).
FACTS_ADDED = "Facts-added"
FACTS_UPDATED = "Facts-updated"
FACTS_REMOVED = "Facts-removed"
PROPOSED = "Proposed"

_USAGE = (("input_tokens", "in"), ("output_tokens", "out"),
          ("cache_read_input_tokens", "cache read"),
          ("cache_creation_input_tokens", "cache write"))


def tokens(usage: Mapping[str, Any]) -> str:
    """The Tokens trailer: `12 in, 5 out, 0 cache read, 0 cache write` for one usage
    dict; for usage by phase (the dream's analyst and editor), the phases in order:
    `analyst: 12 in, ...; editor: 40 in, ...`."""
    if any(isinstance(v, dict) for v in usage.values()):
        return "; ".join(f"{phase}: {tokens(u)}" for phase, u in usage.items())
    return ", ".join(f"{int(usage.get(k) or 0)} {name}" for k, name in _USAGE)


_OLD_USAGE = {"in": "input_tokens", "out": "output_tokens",
              "cache_read": "cache_read_input_tokens",
              "cache_write": "cache_creation_input_tokens"}


def _count(text: str) -> bool:
    """Whether a trailer's number is a count of tokens: digits, fewer than 16 (a forged
    trailer of thousands would not even convert, and a cost made of it would overflow)."""
    return text.isascii() and text.isdigit() and len(text) < 16


def read_tokens(value: str) -> dict[str, dict[str, int]]:
    """The usage a Tokens trailer tells, by phase ("" when it has none): reads what
    tokens() writes and what dreams wrote before it (`analyst in=12 out=5 cache_write=0
    cache_read=0; editor in=...`). A part it cannot read is left out."""
    names = {name: k for k, name in _USAGE}
    out: dict[str, dict[str, int]] = {}
    for part in value.split(";"):
        part = part.strip()
        if not part:
            continue
        if "=" in part:                       # the dream's older syntax
            phase, _, rest = part.partition(" ")
            pairs = [p.partition("=") for p in rest.split()]
            usage = {_OLD_USAGE[k]: int(v) for k, _, v in pairs
                     if k in _OLD_USAGE and _count(v)}
        else:
            phase, colon, rest = part.partition(":")
            if not colon:
                phase, rest = "", part
            usage = {}
            for item in rest.split(","):
                n, _, name = item.strip().partition(" ")
                if _count(n) and name in names:
                    usage[names[name]] = int(n)
        if usage:
            out[phase.strip()] = usage
    return out



@dataclass(frozen=True)
class Identity:
    """Who made a change: the name and email its commit carries as author and committer."""
    name: str
    email: str

    def env(self) -> dict[str, str]:
        return {"GIT_AUTHOR_NAME": self.name, "GIT_AUTHOR_EMAIL": self.email,
                "GIT_COMMITTER_NAME": self.name, "GIT_COMMITTER_EMAIL": self.email}


AGENT = Identity("agent", "agent@localhost")   # the agent, when agent.toml names no other


@dataclass(frozen=True)
class Change:
    """One change to the vault, as its commit will tell it.

    kind:     what sort of change: chat, note, archive, dream, cron, undo, edit, ...
    subject:  the sentence after `kind(scope): `, saying what changed
    scope:    what it is about, when that is one thing (a session key): `chat(cli/work)`
    body:     paragraphs after the subject (e.g. the dream's report), or ""
    trailers: `Key: value` lines at the end, in order (Session, Turn, Reverts, ...)
    author:   who made it; None is the agent (the vault's agent identity)
    """

    kind: str
    subject: str
    scope: str | None = None
    body: str = ""
    trailers: Mapping[str, str] = field(default_factory=dict)
    author: Identity | None = None

    @property
    def head(self) -> str:
        """The subject line: `kind(scope): subject` or `kind: subject`."""
        scope = f"({self.scope})" if self.scope else ""
        return f"{self.kind}{scope}: {self.subject}"

    def message(self) -> str:
        """The commit message: the subject line, the body, then the trailers.

        A message with a body or trailers ends with a newline; a bare subject line
        does not (as the vault has always written them).
        """
        text = self.head
        body = self.body.rstrip("\n")
        if body:
            text += "\n\n" + body
        if self.trailers:
            text += "\n\n" + "\n".join(f"{k}: {v}" for k, v in self.trailers.items())
        return text + "\n" if body or self.trailers else text


def by_hand(paths: list[str], author: Identity) -> Change:
    """Hand edits found uncommitted: `edit: MEMORY.md by hand`, `edit: 4 files by hand`."""
    return _files_change("edit", paths, "by hand", author)


def recovered(paths: list[str]) -> Change:
    """Files an interrupted command wrote but did not commit."""
    return _files_change("recover", paths, "left by an interrupted command", None)


def _files_change(kind: str, paths: list[str], tail: str, author: Identity | None) -> Change:
    if len(paths) <= 2:
        return Change(kind, f"{', '.join(paths)} {tail}", author=author)
    return Change(kind, f"{len(paths)} files {tail}", author=author,
                  body="\n".join(f"- {p}" for p in paths))
