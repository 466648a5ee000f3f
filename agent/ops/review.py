"""Review: the dream's proposals a person accepts, rejects or edits before they reach
MEMORY.md and USER.md. The one implementation the CLI (`agent review`), Telegram
(`/review`) and MCP (`review_list`, `review_decide`) call; they only render.

What waits is in the dream ledger (agent.stores.ledger: proposals without a decision),
so every clone the ledger reaches sees the same list, and a decision made on one closes
the proposal on all. Each run's proposals are also a real git branch, `dream/<run>`,
one commit on top of `main` holding the memory files as they would be: it is rebuilt on
`main` after every decision, and deleted once nothing on it waits.

Accepted edits land on `main` as one commit per run, `review: accept 2 of 5 from dream
4..9`, with `Run:`, `Accepted:` and `Reviewer:` trailers; an edit whose line changed by
hand since the dream is stale: shown as such, never applied, left for the person to
reject. A rejection is recorded (agent.stores.rejections) so no later dream proposes the
same statement again.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from agent.dream import reading
from agent.dream.edits import FILES, apply_ops
from agent.stores import holds
from agent.dream.proposals import branch_of
from agent.errors import UserError
from agent.stores import archive, arrivals, ledger, rejections, sessions
from agent.stores.exports import MEMORIES_SESSION, NAMES, title_of
from agent.vault import branches
from agent.fs import atomic, safe
from agent.vault.change import Change
from agent.vault.git import GitError
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

EXCERPT = 160          # characters of the source message shown with a proposal
GUESS_SCAN = 200       # entries of a run read to guess the source the dream did not name
GUESS_WORDS = 2        # words a guessed source shares with the fact at least
GUESS = "best guess (the dream named no source):"
NUMBERS = "review-numbers.json"   # in .agent/: the number each waiting proposal keeps


class ReviewError(UserError):
    pass


def label(run: str) -> str:
    """`dream 4..9`, or `chat-laptop-2026-11-20` for what a chat turn's writes held."""
    return run if holds.is_chat(run) else f"dream {run}"


@dataclass
class Item:
    """One proposal waiting for review, as every front-end shows it."""
    number: int              # its place in the list (1, 2, ...), for a person to type
    id: str                  # `<run>#<n>`: stable while the list changes (buttons, scripts)
    run: str
    n: int                   # its number within the run
    total: int               # the run's proposals, decided or not
    op: str                  # add, update, delete
    file: str
    section: str
    old: str
    new: str
    reason: str
    archive: list[int] = field(default_factory=list)
    source: str = ""         # the archive entry and an excerpt of the message it stands on
    guess: bool = False      # the dream named no source: `source` is a best guess, said so
    stale: str = ""          # why it can no longer be applied as proposed ("" when it can)
    branch: str = ""
    remote: str = ""         # where a sync or clone brought it from ("": made here;
                             # arrivals.UNKNOWN: not made here, where from not known)
    by: str = ""             # the machine (Host trailer) or author its commit names

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def kind(self) -> str:
        return {"delete": "remove"}.get(self.op, self.op)

    def lines(self) -> list[str]:
        """The proposal as a person reads it, in the terminal or on Telegram."""
        where = self.file + (f" ({self.section})" if self.section else "")
        head = f"{self.number}. {self.kind} {where}  [{label(self.run)}, {self.n} of {self.total}]"
        out = [head + ("  STALE" if self.stale else "")]
        shown = (("old", self.old, self.op in ("update", "delete")),
                 ("new", self.new, self.op in ("add", "update")),
                 ("why", self.reason, bool(self.reason)),
                 ("from", self.source, bool(self.source)))
        out += [f"   {name}: {text}" for name, text, show in shown if show]
        if self.remote == arrivals.UNKNOWN:
            out.append("   not made by this machine's dream, as far as it has a record: "
                       "where it came from is not known here")
        elif self.remote:
            out.append(f"   came from {self.remote}, by {self.by or 'an unnamed machine'}: "
                       f"not made by this machine's dream")
        if self.stale:
            out.append(f"   stale: {self.stale}; it will not be applied (reject it, or edit "
                       f"the file by hand)")
        return out


@dataclass
class Outcome:
    """What a decision did."""
    decision: str                                    # "accept" or "reject"
    done: list[Item] = field(default_factory=list)   # accepted (applied) or rejected
    stale: list[Item] = field(default_factory=list)  # asked to accept, but stale: not applied
    commits: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)  # branches deleted: nothing waits on them
    left: list[Item] = field(default_factory=list)   # from remotes, not taken by "all"

    def to_json(self) -> dict[str, Any]:
        return {"decision": self.decision, "done": [i.to_json() for i in self.done],
                "stale": [i.to_json() for i in self.stale], "commits": self.commits,
                "subjects": self.subjects, "closed": self.closed,
                "left": [i.to_json() for i in self.left]}


# ---- the list -------------------------------------------------------------------------


def _texts(root: Path) -> dict[str, str]:
    return {name: safe.read_text(root, name) or "" for name in FILES}


def _op(rec: dict[str, Any], new: str | None = None) -> dict[str, Any]:
    line = rec.get("line", "") if new is None else new
    return {"op": rec.get("op", ""), "file": rec.get("file", ""),
            "section": rec.get("section", ""), "old": rec.get("old", ""),
            "new": line, "reason": rec.get("reason", "")}


def _stale(texts: dict[str, str], rec: dict[str, Any]) -> str:
    r = apply_ops(texts, [_op(rec)], allow_shrink=True).results[0]
    if r.status == "applied":
        return ""
    if "not in the file" in r.why:
        return "the line it changes was edited or removed since the dream"
    return r.why


_WORD = re.compile(r"\w+")


_COMMON = frozenset("about after also been before from have into just more most much only "
                    "over same some such than that their them then there these they this "
                    "user very what when where which while will with would your".split())


def _words(text: str) -> set[str]:
    """The words that make a statement itself (numbers, words of four letters or more)."""
    return {w for w in _WORD.findall(text.casefold())
            if (w.isdigit() or len(w) >= 4) and w not in _COMMON}


def _said(line: dict[str, Any]) -> str:
    return " ".join(sessions.message_text(line.get("content", ""), sep=" ").split())


@dataclass
class _Entry:
    """An archive entry as the cards quote it: its messages, each with its words."""
    id: int
    topic: str
    session: str
    said: list[tuple[str, bool, set[str]]]    # (text, said by the person, its words)

    def stating(self, wanted: set[str]) -> tuple[str, int]:
        """The message sharing most of `wanted` (the person's before the agent's) and how
        many words it shares; when none shares one, the person's first message and 0."""
        if not self.said:
            return "", 0
        text, _, words = max(self.said, key=lambda m: (len(m[2] & wanted), m[1]))
        shared = len(words & wanted)
        if shared:
            return text, shared
        return next((t for t, user, _ in self.said if user), self.said[0][0]), 0


class _Entries:
    """The archive entries the waiting proposals stand on, each read once per list."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths = dict(archive.entry_ids(root))
        self.cache = reading.SessionCache(root)
        self._read: dict[int, _Entry | None] = {}

    def get(self, entry_id: int) -> _Entry | None:
        if entry_id not in self._read:
            self._read[entry_id] = self._load(entry_id)
        return self._read[entry_id]

    def _load(self, entry_id: int) -> _Entry | None:
        rel = self.paths.get(entry_id)
        if rel is None:
            return None
        try:
            e = archive.load(self.root, rel)
        except UserError:
            return None
        said = [(_said(o), o.get("role") == "user") for _, o in
                reading.covered_lines(self.cache, e.sources())
                if o.get("role") in ("user", "assistant")]
        return _Entry(entry_id, e.topic, e.session,
                      [(t, user, _words(t)) for t, user in said if t])


def _shorten(said: str) -> str:
    return said if len(said) <= EXCERPT else said[:EXCERPT - 3].rstrip() + "..."


def _where(root: Path, e: _Entry) -> str:
    return f"archive {e.id}" + (f" ({e.topic})" if e.topic else "") + \
        _conversation(root, e.session)


def _cited(entries: _Entries, ids: list[int], fact: str) -> str:
    """`archive 42 (Kyoto trip): "I booked the flights..."`: of the entries the dream
    cited, the message that states `fact` (sharing most of its words); when none does,
    the first entry's first message, said so."""
    wanted = _words(fact)
    found = [(e, *e.stating(wanted)) for e in map(entries.get, ids) if e is not None]
    if not found:
        return ""
    e, said, shared = max(found, key=lambda f: f[2])     # the first of the best
    where = _where(entries.root, e)
    if not said:
        return where
    if not shared:
        where += ", no message of it states this exactly; it begins"
    return f'{where}: "{_shorten(said)}"'


def _guessed(entries: _Entries, ids: list[int], fact: str, run: str) -> str:
    """When the dream named no source for a proposal, the entry of its run whose message
    states most of `fact`, as a best guess (`GUESS_WORDS` words in common at least);
    an entry sharing a word or two by chance is not named."""
    wanted = _words(fact)
    need = min(GUESS_WORDS, len(wanted))
    best: tuple[_Entry, str, int] | None = None
    for e in map(entries.get, ids):
        if e is None:
            continue
        said, shared = e.stating(wanted)
        if shared and shared >= need and (best is None or shared > best[2]):
            best = (e, said, shared)
    if best is None:
        return (f"not known: the dream named no source, and no message of {label(run)} "
                f"states this")
    e, said, _ = best
    return f'{GUESS} {_where(entries.root, e)}: "{_shorten(said)}"'


def _numbers(vault: Vault, ids: list[str]) -> dict[str, int]:
    """The number each waiting proposal is listed under: given once and kept while it
    waits (.agent/review-numbers.json), so `accept 3` then `reject 2` act on what the
    list showed; new proposals take the next numbers, and 1 again once nothing waits."""
    path = vault.state / NUMBERS
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kept = {}
    if not isinstance(kept, dict):
        kept = {}
    waiting = set(ids)
    numbers: dict[str, int] = {}
    for i, n in kept.items():
        if i in waiting and isinstance(n, int) and n > 0 and n not in numbers.values():
            numbers[i] = n
    for i in ids:
        if i not in numbers:
            numbers[i] = max(numbers.values(), default=0) + 1
    if numbers != kept:
        try:
            vault.state.mkdir(parents=True, exist_ok=True)
            atomic.write_json(path, numbers)
        except OSError:                 # a read-only vault: the numbers hold for this list
            pass
    return numbers


def _conversation(root: Path, session: str) -> str:
    """`, from ChatGPT: "Trip to Kyoto" (import/chatgpt-...)` for an imported entry."""
    if not session.startswith("import/"):
        return ""
    if session == MEMORIES_SESSION:
        return ", from Claude's memories.json"
    title = title_of(root, session)
    source = session.split("/", 1)[1].split("-", 1)[0]
    return f", from {NAMES.get(source, source)}: {title!r} ({session})" if title else \
        f", from {session}"


def pending(vault: Vault) -> list[Item]:
    """Every proposal waiting for review, by number (see _numbers: oldest run first)."""
    root = vault.root
    records = ledger.read(root)
    waiting = ledger.proposals(records)
    if not waiting:
        return []
    totals: dict[str, int] = {}
    for r in records:
        if ledger.is_proposal(r):
            totals[r["run"]] = max(totals.get(r["run"], 0), int(r.get("n", 0)))
    texts = _texts(root)
    entries = _Entries(root)
    came = arrivals.load(vault.state)
    numbers = _numbers(vault, [f"{r['run']}#{r['n']}" for r in waiting])
    items = []
    for r in waiting:
        k = numbers[f"{r['run']}#{r['n']}"]
        ids = [int(i) for i in r.get("archive", []) if str(i).isdigit()]
        guess = not ids and not r.get("exact") and not r.get("chat")
        if guess:                                # no finer link: the run's entries
            lo, _, hi = str(r["run"]).partition("..")
            ids = [i for i in entries.paths if lo.isdigit() and hi.isdigit() and
                   int(lo) <= i <= int(hi)][:GUESS_SCAN]
        remote, by = arrivals.origin(came, r)
        fact = str(r.get("line") or r.get("old") or "")
        source = (f"{r.get('reason')}, held for review" if r.get("chat")
                  else _guessed(entries, ids, fact, str(r["run"])) if guess
                  else _cited(entries, ids, fact))
        items.append(Item(
            k, f"{r['run']}#{r['n']}", r["run"], int(r["n"]), totals[r["run"]],
            str(r.get("op", "")), str(r.get("file", "")), str(r.get("section", "")),
            str(r.get("old", "")), str(r.get("line", "")), str(r.get("reason", "")),
            ids, source, guess, _stale(texts, r), branch_of(r["run"]), remote, by))
    _branch_missing(vault, {str(r["run"]) for r in waiting})
    return sorted(items, key=lambda i: i.number)


def _branch_missing(vault: Vault, runs: set[str]) -> None:
    """Give the runs whose branch is not there yet their branch (a chat turn's held
    writes: the turn records them, its commit is the branch's base)."""
    have = branches.listed(vault)
    missing = [run for run in sorted(runs) if branch_of(run) not in have]
    if missing:
        try:
            _rebuild(vault, missing)
        except (GitError, OSError):       # a read-only vault: the list holds without it
            pass


def _pick(items: list[Item], picks: list[str] | None) -> list[Item]:
    if picks is None:
        return list(items)
    by_number = {str(i.number): i for i in items}
    by_id = {i.id: i for i in items}
    out = []
    for p in picks:
        item = by_number.get(str(p).strip()) or by_id.get(str(p).strip())
        if item is None:
            listed = (f"`agent review` lists {len(items)}" if items
                      else "nothing waits for review")
            raise ReviewError(f"No proposal {p!r} waits for review ({listed}).")
        if item not in out:
            out.append(item)
    return out


# ---- deciding -------------------------------------------------------------------------


def decide(vault: Vault, picks: list[str] | None, decision: str, now: datetime, reviewer: str, *,
           because: str = "", new_text: str | None = None) -> Outcome:
    """Accept or reject the proposals `picks` (list numbers or ids; None: all of them).

    `new_text` (one pick, accept): the text to apply instead of the proposed one (an
    edit). Accepting all (None) leaves the proposals a remote brought (`Outcome.left`). One commit per run; the run's branch is rebuilt or, when nothing on it
    waits any more, deleted.
    """
    if decision not in ("accept", "reject"):
        raise ReviewError(f"unknown decision {decision!r} (accept or reject)")
    out = Outcome(decision)
    with vault.locked():
        items = _pick(pending(vault), picks)
        if picks is None and decision == "accept":
            # Accepting everything takes only what this machine's dream proposed: what a
            # remote brought is accepted by naming it, never swept in unseen.
            out.left = [i for i in items if i.remote]
            items = [i for i in items if not i.remote]
        if new_text is not None:
            if len(items) != 1 or decision != "accept":
                raise ReviewError("An edit applies to one proposal at a time.")
            if items[0].op == "delete":
                raise ReviewError(f"Proposal {items[0].number} removes a line: there is no "
                                  f"new text to edit; accept or reject it.")
            if not new_text.strip():
                raise ReviewError("The edited text is empty: nothing was changed.")
        at = now.isoformat(timespec="seconds")
        runs: dict[str, list[Item]] = {}
        for item in items:
            runs.setdefault(item.run, []).append(item)
        for run, chosen in runs.items():
            _decide_run(vault, run, chosen, out, at, reviewer, because, new_text)
        out.closed = _rebuild(vault, list(runs))
    return out


def _decide_run(vault: Vault, run: str, chosen: list[Item], out: Outcome, at: str, reviewer: str,
                because: str, new_text: str | None) -> None:
    root = vault.root
    records = ledger.read(root)
    texts = _texts(root)
    done: list[Item] = []
    decisions: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    for item in chosen:
        rec = ledger.proposal(records, run, item.n) or {}
        if out.decision == "accept":
            line = new_text if new_text is not None else item.new
            r = apply_ops(texts, [_op(rec, line)], allow_shrink=True)
            if r.results[0].status != "applied":
                item.stale = item.stale or r.results[0].why
                out.stale.append(item)
                continue
            texts = r.texts
            applied = r.results[0].new if item.op != "delete" else ""
            decisions.append({"run": run, "n": item.n, "decision": "accepted", "at": at,
                              "by": reviewer, "op": item.op, "file": item.file,
                              "line": applied, "old": item.old,
                              "edited": new_text is not None})
            item.new = applied or item.new
        else:
            decisions.append({"run": run, "n": item.n, "decision": "rejected", "at": at,
                              "by": reviewer, "op": item.op, "file": item.file,
                              "line": item.new, "old": item.old, "reason": because})
            statement = item.old if item.op == "delete" else item.new
            rejected.append(rejections.record(item.op, item.file, statement, because, run,
                                              at, reviewer))
        done.append(item)
    if not done:
        return
    for name in FILES:
        if texts[name] != (safe.read_text(root, name) or ""):
            vault.write_text(name, texts[name])
    vault.append_lines(ledger.LEDGER, [ledger.dumps(d) for d in decisions])
    if rejected:
        vault.append_lines(rejections.FILE, [rejections.dumps(r) for r in rejected])
    verb = "accept" if out.decision == "accept" else "reject"
    total = chosen[0].total
    edited = " (edited)" if new_text is not None else ""
    body = []
    for item in done:
        what = {"add": f"add to {item.file}", "update": f"update in {item.file}",
                "delete": f"remove from {item.file}"}.get(item.op, item.op)
        body.append(f"{verb.capitalize()}ed {item.n}: {what}: "
                    + (item.old if item.op == "delete" else item.new))
    if because:
        body.append(f"because: {because}")
    numbers = ", ".join(str(i.n) for i in done)
    change = Change("review", f"{verb} {len(done)} of {total} from {label(run)}{edited}",
                    body="\n".join(body),
                    trailers={"Run": run, f"{verb.capitalize()}ed": numbers,
                              "Reviewer": reviewer})
    sha = vault.commit(change)
    out.done.extend(done)
    if sha:
        out.commits.append(sha)
        out.subjects.append(change.head)


def _rebuild(vault: Vault, runs: list[str]) -> list[str]:
    """Each run's branch on top of `main` as it is now, holding what still waits; a
    branch with nothing waiting is deleted. The names of the deleted ones."""
    waiting = ledger.waiting(vault.root)
    head = vault.head() or ""        # "": no commit yet, which git refuses as a parent
    closed = []
    for run in runs:
        branch = branch_of(run)
        left = [r for r in waiting if r.get("run") == run]
        if not left:
            if branches.delete(vault, branch):
                closed.append(branch)
            continue
        texts = _texts(vault.root)
        proposed = apply_ops(texts, [_op(r) for r in left], allow_shrink=True)
        files = {n: proposed.texts[n] for n in FILES if proposed.texts[n] != texts[n]}
        branches.commit_files(vault, branch, head, files, Change(
            "dream", f"propose {len(left)} edit{'s' * (len(left) != 1)} for review "
                     f"({run if holds.is_chat(run) else 'archive ' + run})",
            trailers={"Run": run}))
    return closed


def tidy(vault: Vault) -> list[str]:
    """Delete the local `dream/*` branches on which nothing waits any more (decided on
    another clone, say); the names deleted. Called after a sync brings the ledger in."""
    waiting = {branch_of(r["run"]) for r in ledger.waiting(vault.root)}
    closed = []
    for branch in branches.listed(vault):
        if branch not in waiting and branches.delete(vault, branch):
            closed.append(branch)
    return closed
