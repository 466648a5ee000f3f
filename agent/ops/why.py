"""`agent why TEXT`: where a line of MEMORY.md or USER.md came from.

The line that best matches TEXT is found, then its story is told newest first, one
step per version of the line:

- the commit that wrote that version (author, date, kind: a hand edit, `remember` in a
  chat turn, `remember` from an MCP client, a dream, a sync merge, ...);
- its source: for a chat turn, the session, the turn and the user's message (and the
  tool call that wrote it); for a dream, the findings and the archive entries it stood
  on (from the dream ledger, `.dream_ledger.jsonl`) and, from each entry, the messages
  it covers; for a hand edit, the person; for a sync merge, the clone's commit merged;
- then the version before it, if that commit changed a line rather than added one.

What a commit says of itself (its author, its trailers: `Reviewer:`, `Session:`) is the
word of the clone that made it, and a remote can write anything there. So each step
says whether this machine made the commit, by git's own local record of it (HEAD's
reflog: never synced, never pushed): a review decision or a hand edit made here is
named by its author and this machine's host; one that came from another clone is
marked as such, its names shown as that clone's word.

Git walking is in `agent.vault.history`; this module tells the story.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import asdict, dataclass, field

from agent.oneline import shorten
from agent.errors import UserError
from agent.llm.records import ToolCall
from agent.stores import archive, ledger, memory, sessions
from agent.stores.exports import title_of
from agent.vault import history as lineage
from agent.vault.change import CLIENT, REVERTS, REVIEWER, RUN, SESSION, TOOL, TURN
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

FILES = memory.MEMORY_FILES
MAX_STEPS = 12
MATCH = 0.5                  # below this, TEXT matches no line
SHORT = 240                  # characters of a quoted message


class NoMatch(UserError):
    pass


@dataclass
class Candidate:
    file: str
    line: int
    text: str
    score: float


@dataclass
class Step:
    sha: str | None          # None: not committed yet
    kind: str                # "hand edit", "chat turn", "mcp", "dream", "sync merge", ...
    author: str
    email: str
    date: str
    subject: str
    file: str
    line: int
    text: str                # the line as this step wrote it
    source: dict[str, Any] = field(default_factory=dict)
    here: bool = True        # made on this machine (False: came from another clone)
    host: str = ""           # this machine's host, for a step made here


@dataclass
class Story:
    query: str
    match: Candidate
    steps: list[Step]
    closest: list[Candidate] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"query": self.query, "file": self.match.file, "line": self.match.line,
                "text": self.match.text, "score": round(self.match.score, 3),
                "steps": [asdict(s) for s in self.steps]}


# ---- finding the line -----------------------------------------------------------------


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def score(query: str, line: str) -> float:
    q = " ".join(_words(query))
    body = re.sub(r"^\s*[-*+]\s+", "", line)
    t = " ".join(_words(body))
    if not q or not t:
        return 0.0
    if q in t:
        return 1.0
    qw, tw = set(q.split()), set(t.split())
    recall = len(qw & tw) / len(qw)
    ratio = difflib.SequenceMatcher(None, q, t, autojunk=False).ratio()
    return 0.7 * recall + 0.3 * ratio


def candidates(vault: Vault, query: str) -> list[Candidate]:
    out = []
    from agent.fs import safe
    for rel in FILES:
        # The one safe read: a USER.md linked to ~/.ssh/id_rsa is refused, and bytes that
        # are not UTF-8 are an error naming the file and line (both UserErrors).
        text = safe.read_text(vault.root, rel)
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip() or memory.HEADING.match(line):
                continue
            out.append(Candidate(rel, n, line, score(query, line)))
    out.sort(key=lambda c: (-c.score, c.file, c.line))
    return out


# ---- the story ------------------------------------------------------------------------


def explain(vault: Vault, text: str) -> Story:
    """The story of the line of MEMORY.md or USER.md that best matches `text`."""
    query = " ".join(text.split())
    if not query:
        raise NoMatch("Nothing to explain: give some words of a line of MEMORY.md or USER.md.")
    found = candidates(vault, query)
    if not found or found[0].score < MATCH:
        # Offered instead: facts (bullets) only; a file's own prose (the template's
        # paragraph under its title) is no fact to explain.
        facts = [c for c in found if c.score > 0 and memory.FACT.match(c.text)]
        closest = "; ".join(f"{c.file}:{c.line} {c.text.strip()}" for c in facts[:3])
        raise NoMatch(f"No line of MEMORY.md or USER.md matches {query!r}."
                      + (f" Closest: {closest}" if closest else ""))
    match = found[0]
    steps = walk(vault, match.file, match.line, match.text)
    return Story(query, match, steps, [c for c in found[1:] if memory.FACT.match(c.text)][:3])


def walk(vault: Vault, rel: str, line: int, text: str) -> list[Step]:
    agent_email = vault.agent_identity().email
    here, host = lineage.made_here(vault), vault.host()
    lineage.ensure_path_filters(vault)
    steps: list[Step] = []
    rev = None                       # the work tree first: an uncommitted hand edit shows
    for _ in range(MAX_STEPS):
        blame = lineage.blame_line(vault, rel, line, rev)
        if blame is None:
            break
        if blame.sha == lineage.UNCOMMITTED:
            identity = vault.identity.user()
            steps.append(Step(None, "hand edit", identity.name, identity.email, "", "",
                              rel, line, text, {"note": "not committed yet; committed as "
                                                        "the person's edit before the "
                                                        "agent's next change"}))
            rev = "HEAD"
            continue
        c = lineage.commit_record(vault, blame.sha)
        if not steps or steps[-1].sha is None:
            merge = lineage.merge_bringing(vault, c.sha)
            if merge:
                steps.append(_merge_step(vault, merge, c, blame.path, blame.line, text))
        step = _step(vault, c, blame.path, blame.line, text, agent_email)
        if step.kind != "sync merge":
            step.here = c.sha in here
            step.host = host if step.here else ""
        steps.append(step)
        # The version before: the line this commit's hunk replaced, when it looks like it.
        parent = blame.previous or (c.parents[0] if c.parents else None)
        removed = lineage.hunk_at(vault, c.sha, parent, blame.path, blame.line,
                                  blame.previous_path)
        old = step.source.get("replaced")
        prev = None
        if old:
            prev = next(((n, t) for n, t in removed if t.strip() == old.strip()), None)
        if prev is None and removed:
            best = max(removed, key=lambda r: score(text, r[1]))
            if score(text, best[1]) >= 0.4 and best[1].strip() != text.strip():
                prev = best
        if prev is None or parent is None:
            break
        rel, line, text, rev = blame.previous_path or blame.path, prev[0], prev[1], parent
    return steps


@dataclass
class Teller:
    """What telling many lines' first steps shares: the commits read once, who the agent
    is, which commits this machine made."""
    agent_email: str
    here: set[str]
    host: str
    commits: dict[str, lineage.CommitRecord] = field(default_factory=dict)

    @classmethod
    def of(cls, vault: Vault) -> "Teller":
        return cls(vault.agent_identity().email, lineage.made_here(vault), vault.host())


def taught_by(vault: Vault, sha: str, rel: str, line: int, text: str,
              teller: Teller | None = None) -> Step:
    """The head of a line's story: the commit `sha` that wrote line `line` of `rel` (as
    blame names it) with its source, as `walk` tells its first step."""
    teller = teller or Teller.of(vault)
    c = teller.commits.get(sha)
    if c is None:
        c = teller.commits[sha] = lineage.commit_record(vault, sha)
    step = _step(vault, c, rel, line, text, teller.agent_email)
    if step.kind != "sync merge":
        step.here = c.sha in teller.here
        step.host = teller.host if step.here else ""
    return step


def _kind(c: lineage.CommitRecord, agent_email: str) -> str:
    if len(c.parents) > 1:
        return "sync merge"
    k = c.kind
    if k in ("dream", "review"):
        return k
    if k == "mcp":
        return "mcp"
    if k in ("edit",) or c.email != agent_email:
        return "hand edit"
    if SESSION in c.trailers and TURN in c.trailers:
        return "chat turn"
    return {"init": "vault template", "undo": "undo", "recover": "recovered",
            "import": "import"}.get(k, k or "commit")


def _step(vault: Vault, c: lineage.CommitRecord, rel: str, line: int, text: str, agent_email: str) -> Step:
    kind = _kind(c, agent_email)
    step = Step(c.sha, kind, c.author, c.email, c.date, c.subject, rel, line, text)
    if kind == "chat turn":
        step.source = _turn_source(vault, c, text)
    elif kind == "dream":
        step.source = _dream_source(vault, c, rel, text)
    elif kind == "review":
        step.source = _review_source(vault, c, rel, text)
    elif kind == "mcp":
        step.source = {"client": c.trailers.get(CLIENT, c.scope or ""),
                       "tool": c.trailers.get(TOOL, "")}
    elif kind == "hand edit":
        step.source = {"note": f"written by hand by {c.author}"}
    elif kind == "sync merge":
        step.source = {"note": "the merge itself wrote this line (a conflict resolved)",
                       "parents": c.parents}
    elif kind == "undo":
        step.source = {"reverts": c.trailers.get(REVERTS, "")}
    return step


def _merge_step(vault: Vault, merge: str, original: lineage.CommitRecord, rel: str, line: int, text: str) -> Step:
    m = lineage.commit_record(vault, merge)
    return Step(m.sha, "sync merge", m.author, m.email, m.date, m.subject, rel, line, text,
                {"merged": original.sha, "note": f"brought in from another clone, where "
                                                  f"{original.short} wrote it"})


# ---- sources --------------------------------------------------------------------------


def _short(text: str, limit: int = SHORT) -> str:
    return shorten(text, limit)


def _turn_source(vault: Vault, c: lineage.CommitRecord, text: str) -> dict[str, Any]:
    session, turn = c.trailers.get(SESSION, ""), c.trailers.get(TURN, "")
    source: dict[str, Any] = {"session": session, "turn": int(turn) if turn.isdigit() else turn}
    files = [p for p in lineage.changed_paths(vault, c.sha)
             if p.startswith("sessions/") and p.endswith(".jsonl")]
    if not files:
        return source
    rel = files[0]
    source["file"] = rel
    from agent.fs import safe
    try:
        lines = sessions.turn_lines(vault.root, rel, turn)
    except (FileNotFoundError, safe.UnsafeFile):
        return source          # gone, or not a file the agent reads: no detail to add
    user = next((m for m in lines if m.role == "user" and isinstance(m.content, str)), None)
    if user:
        source["message"] = {"id": user.id, "ts": user.ts, "text": _short(str(user.content))}
    body = re.sub(r"^\s*[-*+]\s+", "", text).strip()
    for m in lines:
        for block in m.blocks if isinstance(m.content, list) else []:
            if isinstance(block, ToolCall) and block.name == "remember":
                said = " ".join(str((block.input or {}).get("text", "")).split())
                if said and (said == body or score(said, body) >= 0.6):
                    source["tool_call"] = {"name": "remember", "input": block.input}
    return source


def _run_of(c: lineage.CommitRecord) -> tuple[str | None, int | None, int | None]:
    """A dream commit's run id (`first..through`) and its two ends: from its `Run:`
    trailer, else (a commit from before the trailer) from its subject's `(archive A..B)`."""
    m = re.fullmatch(r"\s*(\d+)\.\.(\d+)\s*", c.trailers.get(RUN, ""))
    if m is None:
        m = re.search(r"\(archive (\d+)\.\.(\d+)\)", c.subject)
    if m is None:
        return None, None, None
    return f"{m.group(1)}..{m.group(2)}", int(m.group(1)), int(m.group(2))


def _dream_source(vault: Vault, c: lineage.CommitRecord, rel: str, text: str) -> dict[str, Any]:
    run, first, through = _run_of(c)
    rec = ledger.for_line(vault.root, run, rel, text)
    source: dict[str, Any] = {"run": run}
    if rec is None:
        ids = _run_ids(vault, first, through)
        source.update({"exact": False, "archive_ids": ids,
                       "note": "no ledger record: the entries of the whole run"})
    else:
        ids = [int(i) for i in rec.get("archive", []) if str(i).isdigit()]
        if not ids and not rec.get("exact"):
            ids = _run_ids(vault, first, through)     # no finer link: the run's entries
        source.update({"exact": bool(rec.get("exact")), "archive_ids": ids,
                       "op": rec.get("op"), "reason": rec.get("reason", ""),
                       "replaced": rec.get("old") or None,
                       "findings": rec.get("findings", [])})
    source["archive"] = [_entry(vault, i) for i in ids[:10]]
    return source


def _run_ids(vault: Vault, first: int | None, through: int | None) -> list[int]:
    """The entries of a whole run: the ids the archive holds between its ends (ids are
    18-digit stamps: never a range() over the numbers in between)."""
    if first is None or through is None:
        return []
    return [i for i, _ in archive.entry_ids(vault.root) if first <= i <= through]


def _review_source(vault: Vault, c: lineage.CommitRecord, rel: str, text: str) -> dict[str, Any]:
    """A line a person accepted in `agent review`: who and when, the proposal, and the
    dream run's evidence behind it (from the ledger's proposal and decision records)."""
    run = c.trailers.get(RUN, "").strip() or None
    records = ledger.read(vault.root)
    want = text.strip()
    decided = next((r for r in reversed(records) if ledger.is_decision(r)
                    and r.get("decision") == "accepted" and r.get("run") == run
                    and r.get("file") == rel and str(r.get("line", "")).strip() == want), None)
    # The Reviewer trailer first: the commit's own record (walk() says whose commit it
    # is); the ledger is a synced file anyone may append a decision to.
    source: dict[str, Any] = {"run": run, "reviewer": c.trailers.get(REVIEWER, ""), "accepted": c.date}
    if decided is None:
        source.update({"exact": False, "archive_ids": [], "archive": [],
                       "note": "no ledger record of this decision"})
        return source
    proposal = ledger.proposal(records, run, decided.get("n")) or {}
    ids = [int(i) for i in proposal.get("archive", []) if str(i).isdigit()]
    source.update({"reviewer": source["reviewer"] or decided.get("by"),
                   "accepted": decided.get("at") or c.date,
                   "proposal": {"n": decided.get("n"), "op": proposal.get("op"),
                                "proposed": proposal.get("line") or None,
                                "edited": bool(decided.get("edited")),
                                "at": proposal.get("at")},
                   "exact": bool(proposal.get("exact")), "archive_ids": ids,
                   "reason": proposal.get("reason", ""),
                   "replaced": decided.get("old") or None,
                   "findings": proposal.get("findings", [])})
    source["archive"] = [_entry(vault, i) for i in ids[:10]]
    return source


def _entry(vault: Vault, entry_id: int) -> dict[str, Any]:
    from agent.dream import reading
    rel = archive.find(vault.root, entry_id)
    if rel is None:
        return {"id": entry_id, "missing": True}
    try:
        e = archive.load(vault.root, rel)
    except UserError as err:
        return {"id": entry_id, "path": rel, "problem": str(err)}
    out: dict[str, Any] = {"id": entry_id, "path": rel, "session": e.session, "created": e.meta.get("created"),
           "topic": e.topic, "summary": _short(e.summary), "messages": []}
    title = title_of(vault.root, e.session)       # a conversation `agent import` brought
    if title:
        out["title"] = title
    cache = reading.SessionCache(vault.root)
    for file, obj in reading.covered_lines(cache, archive.source_ranges(e.meta.get("source"))):
        msg = sessions.Line.read(obj)
        if msg is None:
            continue
        out["messages"].append({"file": file, "id": msg.id, "ts": msg.ts, "role": msg.role,
                                "text": _short(sessions.message_text(msg.content, sep=" "),
                                               160)})
    return out


# ---- telling it -----------------------------------------------------------------------


def _date(iso: str) -> str:
    return iso[:16].replace("T", " ") if iso else ""


def render(story: Story) -> str:
    m = story.match
    out = [f"{m.file}:{m.line}  {m.text.strip()}", ""]
    for n, s in enumerate(story.steps):
        label = "Written" if n == 0 else "Before that"
        if s.sha is None:
            out.append(f"{label}: not committed yet, a hand edit in the work tree "
                       f"(it is committed as {s.author}'s edit before the agent's next change).")
            out.append("")
            continue
        head = f"{label}: {s.sha[:7]} {_date(s.date)} by {s.author} <{s.email}>"
        if not s.here:
            head += ", from another clone"
        out.append(head)
        out.append(f"  {s.subject}")
        if n > 0 or s.text.strip() != m.text.strip():
            out.append(f"  the line then: {s.text.strip()}")
        out.extend("  " + line for line in _describe(s))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _describe(s: Step) -> list[str]:
    if s.here:
        return _describe_here(s)
    theirs = (f"made on another clone, not on this machine: the names in its commit "
              f"({s.author} <{s.email}>"
              + (f", reviewer {s.source['reviewer']}" if s.source.get("reviewer") else "")
              + ") are that clone's word.")
    if s.kind == "hand edit":
        return [f"an edit from another clone; {theirs}"]
    if s.kind == "review":
        prop = s.source.get("proposal") or {}
        return [f"a review decision from another clone; {theirs}",
                (f"it says it accepted proposal {prop.get('n')} of the dream over archive "
                 f"{s.source.get('run')}")] + _evidence(s.source)
    return _describe_here(s) + [theirs[0].upper() + theirs[1:]]


def _describe_here(s: Step) -> list[str]:
    src = s.source
    where = f" on this machine ({s.host})" if s.host else ""
    if s.kind == "hand edit":
        return [f"a hand edit: {s.author} wrote it{where}."]
    if s.kind == "chat turn":
        lines = [f"remember in a chat turn: session {src.get('session')}, turn {src.get('turn')}"
                 + (f" ({src['file']})" if src.get("file") else "")]
        msg = src.get("message")
        if msg:
            lines.append(f"the user said ({_date(msg.get('ts') or '')}, {msg.get('id')}): "
                         f"{msg['text']}")
        call = src.get("tool_call")
        if call:
            lines.append(f"the agent called remember({json.dumps(call['input'], ensure_ascii=False)})")
        return lines
    if s.kind == "mcp":
        return [f"remember from the MCP client {src.get('client')} (tool {src.get('tool')})."]
    if s.kind == "review":
        prop = src.get("proposal") or {}
        lines = [(f"accepted in review by {src.get('reviewer')}{where} "
                  f"({_date(str(src.get('accepted') or ''))}): "
                  f"proposal {prop.get('n')} of the dream over archive {src.get('run')} "
                  f"(branch dream/{str(src.get('run') or '').replace('..', '-')}, proposed "
                  f"{_date(str(prop.get('at') or ''))})")]
        if prop.get("edited") and prop.get("proposed"):
            lines.append(f"edited in review; the dream proposed: {prop['proposed']}")
        return lines + _evidence(src)
    if s.kind == "dream":
        ids = ", ".join(str(i) for i in src.get("archive_ids", []))
        lines = [f"a dream over archive {src.get('run')}: from archive "
                 f"entr{'y' if len(src.get('archive_ids', [])) == 1 else 'ies'} {ids}"
                 + ("" if src.get("exact") else " (the whole run; no finer record)")]
        return lines + _evidence(src)
    if s.kind == "sync merge":
        return [f"a sync merge: {src.get('note')}."]
    if s.kind == "undo":
        return [f"an undo (reverts {src.get('reverts')})."]
    return [f"{s.kind}."]


def _evidence(src: dict[str, Any]) -> list[str]:
    """The editor's reason, the findings and the archive entries (with their messages)
    behind a dream's edit."""
    lines = []
    if src.get("reason"):
        lines.append(f"why: {src['reason']}")
    for f in src.get("findings", []):
        cited = ", ".join(str(e) for e in f.get("evidence") or [])
        lines.append(f"finding ({f.get('kind')}): {f.get('statement')} "
                     + (f"[{cited}]" if cited else "(it cites no evidence)"))
    for e in src.get("archive", []):
        if e.get("missing"):
            lines.append(f"archive {e['id']}: not in the vault any more")
            continue
        title = f" \"{e['title']}\"" if e.get("title") else ""
        lines.append(f"archive {e['id']} ({e.get('path')}, session {e.get('session')}{title}, "
                     f"{_date(str(e.get('created') or ''))}): {e.get('topic')}")
        for msg in e.get("messages", [])[:6]:
            lines.append(f"  {msg['file']} {msg['id']} {_date(msg.get('ts') or '')} "
                         f"{msg['role']}: {msg['text']}")
        if len(e.get("messages", [])) > 6:
            lines.append(f"  ... {len(e['messages']) - 6} more messages")
    return lines
