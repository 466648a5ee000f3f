"""What `agent mcp` offers, as plain functions over a vault (no SDK here).

Each tool is a method whose type hints are its arguments: a pydantic model made from the
signature (agent/schemas.py) is both the JSON schema the client sees and the check of
what it sends. Input is checked here, before anything is read or written: a wrong or
missing argument, a path outside the vault or a huge text raises `BadInput`, which the
server turns into an MCP error (and nothing changes). Every write is one commit
`mcp(<client>): ...`, under the vault lock, after any hand edits were committed first.
pydantic is imported at the top: only `agent mcp` imports this module, and the MCP SDK
has loaded pydantic already.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal

from pydantic import Field

from agent import schemas
from agent.oneline import subject
from agent.clock import now as clock_now
from agent.errors import UserError
from agent.stores import memory
from agent.fs import safe
from agent.vault.change import Change
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

MAX_TEXT = 4000          # remember, note: one fact or note, not a document
MAX_QUERY = 1000         # search, why
MAX_OUTPUT = 60000       # characters of a tool's answer (history, recent)
SUBJECT_CHARS = 60

# The kinds of argument: a text that is not blank, a path, a whole number in a range.
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT, pattern=r"\S")]
Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY, pattern=r"\S")]
VaultPath = Annotated[str, Field(min_length=1, max_length=500,
                                 description="The file's path in the vault, e.g. MEMORY.md.")]
Limit = Annotated[int, Field(ge=1, le=50)]


class BadInput(UserError):
    """An argument the client sent is wrong; the message names it."""


@dataclass
class Spec:
    name: str
    description: str
    fn: Callable
    writes: bool = False
    decides: bool = False      # the person's decision: offered only to a client allowed it

    @functools.cached_property
    def model(self) -> Any:
        """The pydantic model of the arguments, from `fn`'s type hints (the client's name
        is the server's to give, not an argument)."""
        return schemas.arguments_model(self.fn, self.name, skip=("client",))

    @functools.cached_property
    def schema(self) -> dict:
        """The JSON schema the client sees."""
        return schemas.json_schema(self.model)


def _client_scope(name: str | None) -> str:
    """A client's name as a commit scope: `Claude Code` -> `claude-code`."""
    scope = re.sub(r"[^a-z0-9._-]+", "-", (name or "").strip().lower()).strip("-.")
    return scope[:40] or "client"


def _shorten(text: str, limit: int = SUBJECT_CHARS) -> str:
    return subject(text, limit)


def check_args(spec: Spec, args) -> dict:
    """The arguments the client gave, checked by the tool's model, or BadInput naming
    what is wrong (the method's defaults fill in the rest)."""
    try:
        return schemas.check(spec.model, args, spec.name, noun="argument", named=True)
    except schemas.ArgumentError as e:
        raise BadInput(str(e)) from None


# ---- the tools -------------------------------------------------------------------------


class VaultTools:
    """The tools over one vault; `client` names the MCP client for commit messages."""

    def __init__(self, vault: Vault, *, read_only: bool = False, review: bool = False,
                 clock=None):
        self.vault = vault
        self.read_only = read_only
        # A review is the person's check on what a client (this one too) and the dream
        # put in memory: a client decides one only where the person started it so.
        self.review = review
        self.clock = clock or clock_now
        specs = [
            Spec("search", "Search everything the agent remembers: past conversations, "
                 "MEMORY.md, USER.md, daily notes and the archive. Returns the best hits with "
                 "their file, line, date and speaker.", self.search),
            Spec("remember", "Keep something in the shared memory, as one commit in the "
                 "vault's git history. target: 'daily' for today's daily note (passing "
                 "things), 'memory' for MEMORY.md (lasting facts about the world, projects, "
                 "plans), 'user' for USER.md (facts about the person).",
                 self.remember, writes=True),
            Spec("note", "Append a timestamped line to today's daily note (memory/"
                 "YYYY-MM-DD.md), as one commit.", self.note, writes=True),
            Spec("recent", "What was noted and learned lately: the daily notes of the last "
                 "days and the facts added to MEMORY.md and USER.md in that time.", self.recent),
            Spec("history", "How a vault file changed: its commits, newest first, each with "
                 "author, date, message and diff.", self.history),
            Spec("why", "Where a line of MEMORY.md or USER.md came from: the commit that "
                 "wrote it (a hand edit, a chat turn's remember, a dream, a sync merge) and "
                 "its source (the conversation, the archive entries), with earlier versions. "
                 "Or, given reply instead of text: the memories that reply was shown (lines "
                 "of USER.md, MEMORY.md, daily notes, retrieved messages, archive entries, "
                 "skills), each with the commit that taught it.", self.why),
            # Review of the dream's proposals: the one operation agent.ops.review.
            Spec("review_list", "The dream's proposed memory edits waiting for the person's "
                 "review: each with its id, kind (add/update/remove), file, old and new "
                 "text, the reason and its source message; stale ones are marked.",
                 self.review_list),
            Spec("review_decide", "Accept or reject proposals from review_list, by id; "
                 "accepted ones are written to MEMORY.md/USER.md as one commit per dream, "
                 "rejected ones are never proposed again. Only on the person's say-so.",
                 self.review_decide, writes=True, decides=True),
            # Time travel (issue 26): the operations are agent.ops.timetravel's.
            Spec("show_as_of", "A vault file as it was at a moment: what the agent knew then.",
                 self.show_as_of),
            Spec("restore", "Bring back the line of MEMORY.md or USER.md holding the text that "
                 "was removed most recently (by a dream, an undo or a hand edit), as one commit.",
                 self.restore, writes=True),
        ]
        self.specs = {s.name: s for s in specs}

    def offered(self) -> list[Spec]:
        return [s for s in self.specs.values() if not (self.read_only and s.writes)
                and not (s.decides and not self.review)]

    def call(self, name: str, args, client: str | None = None) -> str:
        """Run tool `name`: its text, or BadInput (nothing changed)."""
        spec = self.specs.get(name)
        if spec is None:
            raise BadInput(f"There is no tool {name!r}; the tools are "
                           f"{', '.join(s.name for s in self.offered())}.")
        if spec.writes and self.read_only:
            raise BadInput(f"{name} changes the vault, and this server was started with "
                           f"--read-only: it only reads.")
        if spec.decides and not self.review:
            raise BadInput(f"{name}: this client may not decide reviews; the person decides "
                           f"with `agent review`, or lets one client decide by adding "
                           f"--review to the command line it starts (agent mcp --review).")
        kwargs = check_args(spec, args)
        if spec.writes:
            kwargs["client"] = client
        return spec.fn(**kwargs)

    # -- reading

    def search(self, query: Annotated[Query, Field(description=(
                   "Key words to look for (names, places, distinctive words)."))],
               limit: Annotated[Limit, Field(description="How many hits at most (1 to 50).")]
               = 10) -> str:
        from agent.chat.tools.memory import format_hit
        from agent.search import index
        hits = index.search(self.vault, query, limit=limit)
        if not hits:
            return f"No matches for {query!r}."
        return "\n".join(format_hit(h) for h in hits)

    def recent(self, days: Annotated[int, Field(ge=1, le=90, description=(
                   "How many days back, today included (1 to 90)."))] = 3) -> str:
        from agent.ops.recent import recent
        found = recent(self.vault, days, self.clock())
        parts = [f"## {rel}\n\n{text.strip()}" for rel, text in found.notes]
        if found.facts:
            parts.append(f"## Facts added to MEMORY.md and USER.md since {found.since:%Y-%m-%d}"
                         f"\n\n" + "\n".join(found.facts))
        if not parts:
            return f"Nothing noted or learned in the last {days} day{'s' * (days != 1)}."
        return _cap("\n\n".join(parts))

    def history(self, path: VaultPath, limit: Annotated[Limit, Field(
                    description="How many commits at most (1 to 50).")] = 5) -> str:
        rel = self._vault_path(path)
        from agent.vault import history
        out = history.file_log(self.vault, [rel], max_count=limit)
        if not out.strip():
            if not (self.vault.root / rel).exists():
                raise BadInput(f"history: there is no file {rel} in the vault, now or in "
                               f"its history")
            return f"{rel} has no commits yet (it changed by hand since the last commit)."
        return _cap(out)

    def _vault_path(self, path: str) -> str:
        from agent.fs.offlimits import is_off_limits
        from agent.vault.repo import VaultError
        try:
            rel = self.vault.rel(path)
        except VaultError:
            raise BadInput(f"history: {path} is outside the vault") from None
        if rel in (".", "") or is_off_limits(rel):
            raise BadInput(f"history: {path} is not a file of the vault")
        return rel

    def why(self, text: Annotated[Query | None, Field(
                description="Words of the fact to explain.")] = None,
            reply: Annotated[str | None, Field(max_length=100, description=(
                "A reply's id (its transcript line's id), or 'last' for the newest "
                "reply."))] = None,
            session: Annotated[str | None, Field(max_length=200, description=(
                "With reply: the conversation (e.g. cli/default); default: any for an id, "
                "the latest conversation for 'last'."))] = None) -> str:
        from agent.ops import why
        if reply is None:
            if text is None:
                raise BadInput("why needs text (words of a fact) or reply (an id, or 'last')")
            return why.render(why.explain(self.vault, text))
        if text is not None:
            raise BadInput("why takes text or reply, not both")
        from agent.ops import used
        found = (used.last_reply(self.vault, session) if reply.strip() == "last"
                 else used.find_reply(self.vault, reply, session))
        return _cap(used.render(used.used(self.vault, found)))

    def review_list(self) -> str:
        from agent.ops import review
        items = review.pending(self.vault)
        return json.dumps([i.to_json() for i in items], ensure_ascii=False, indent=1) \
            if items else "Nothing waits for review."

    def show_as_of(self, path: VaultPath, when: Annotated[str, Field(
                       min_length=1, max_length=100,
                       description="A date (2026-11-20, '3 days ago') or a commit.")]) -> str:
        from agent.ops import timetravel
        found = timetravel.show_as_of(self.vault, self._vault_path(path), when)
        return _cap(f"{path} as of {found.line}:\n\n{found.text}")

    def restore(self, text: Annotated[Query, Field(description="Words of the removed fact.")],
                client: str | None = None) -> str:
        from agent.ops import timetravel
        from agent.search import index
        done = timetravel.restore(self.vault, text)
        index.refresh(self.vault, after_commit=True)
        return f"Restored to {done.rel}: {done.line} ({(done.sha or '')[:7]})"

    # -- writing

    def review_decide(self, ids: Annotated[Query, Field(description=(
                          "Proposal ids from review_list (as 4..9#2), separated by commas."))],
                      decision: Annotated[Literal["accept", "reject"], Field(
                          description="What the person decided.")],
                      because: Annotated[str | None, Field(
                          max_length=500, description="Why (for a rejection).")] = None,
                      client: str | None = None) -> str:
        from agent.ops import review
        picks = [p.strip() for p in ids.split(",") if p.strip()]
        try:
            out = review.decide(self.vault, picks, decision, self.clock(),
                                f"mcp client {client or 'unknown'}", because=because or "")
        except review.ReviewError as e:
            raise BadInput(f"review_decide: {e}".replace("`agent review` lists",
                                                         "review_list shows")) from None
        lines = [f"{'Accepted' if decision == 'accept' else 'Rejected'} {i.id}" for i in out.done]
        lines += [f"Not applied {i.id}: stale ({i.stale})" for i in out.stale]
        lines += [f"Committed {sha[:7]} {subject}" for sha, subject in zip(out.commits, out.subjects)]
        return "\n".join(lines)

    def _via(self, client: str | None, tool: str, what: str):
        """The commit of a client's note or fact: who asked, with which tool."""
        def change(rel: str, text: str) -> Change:
            return Change("mcp", f"{what} in {rel}: {_shorten(text)}",
                          scope=_client_scope(client),
                          trailers={"Client": client or "unknown", "Tool": tool, "File": rel})
        return change

    def _refresh(self, sha: str | None) -> str:
        if sha:
            from agent.search import index
            index.refresh(self.vault, after_commit=True)
        return f" ({sha[:7]})" if sha else ""

    def remember(self, text: Annotated[Text, Field(description=(
                     "What to keep, as one self-contained sentence with absolute dates."))],
                 target: Annotated[Literal["daily", "memory", "user"], Field(
                     description="Where it goes.")] = "daily",
                 section: Annotated[str | None, Field(max_length=200, description=(
                     "For memory and user: the heading to add the fact under (created when "
                     "missing)."))] = None,
                 client: str | None = None) -> str:
        from agent.config import load_settings
        from agent.ops import notes
        from agent.stores import holds
        done = notes.remember(self.vault, text, target, self.clock(), section=section,
                              via=self._via(client, "remember", "remember"),
                              hold=holds.holds(load_settings(self.vault.root)))
        if target == "daily":
            return f"Noted in {done.rel}: {done.line}" + self._refresh(done.sha)
        if done.held:
            return (f"Not written to {done.rel}: - {done.line} is {holds.HELD.format(file=done.rel)}"
                    f"; its id is {done.held}." + self._refresh(done.sha))
        if not done.added:
            return f"{done.rel} already has: - {done.line}"
        where = f" under {done.section}" if done.section else ""
        return f"Added to {done.rel}{where}: - {done.line}" + self._refresh(done.sha)

    def note(self, text: Annotated[Text, Field(description="The note.")],
             client: str | None = None) -> str:
        from agent.ops import notes
        done = notes.note(self.vault, " ".join(text.split()), self.clock(),
                          via=self._via(client, "note", "note"))
        return f"Noted in {done.rel}: {done.line}" + self._refresh(done.sha)

    # -- resources

    def resources(self) -> list[tuple[str, str, str]]:
        """(uri, name, description) of what a client may read."""
        today = memory.daily_path(self.clock().date())
        return [("agent://MEMORY.md", memory.MEMORY, "Long-term facts, one per bullet."),
                ("agent://USER.md", memory.USER, "Facts about the person."),
                ("agent://today", today, "Today's daily note.")]

    def read(self, uri: str) -> str:
        m = re.fullmatch(r"agent://(MEMORY\.md|USER\.md|today|memory/(\d{4}-\d{2}-\d{2})\.md)", uri)
        if not m:
            raise BadInput(f"No resource {uri}; there are agent://MEMORY.md, agent://USER.md, "
                           f"agent://today and agent://memory/YYYY-MM-DD.md")
        rel = m.group(1)
        if rel == "today":
            rel = memory.daily_path(self.clock().date())
        try:
            return self._read(rel) or ""
        except safe.UnsafeFile as e:
            raise BadInput(str(e)) from None

    def _read(self, rel: str) -> str | None:
        """A vault file through the one safe read: a USER.md linked to ~/.ssh/id_rsa or
        /proc/self/environ is refused with UnsafeFile naming the file."""
        return safe.read_text(self.vault.root, rel, errors="replace")


def _cap(text: str) -> str:
    if len(text) <= MAX_OUTPUT:
        return text
    return text[:MAX_OUTPUT] + f"\n... (cut at {MAX_OUTPUT} characters)"
