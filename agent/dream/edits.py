"""The dream's edits applied to `MEMORY.md` and `USER.md`: what a user gets is facts
added, updated or removed exactly where the editor said, and nothing else touched.

Pure functions over text. An operation quotes the exact line it replaces; when that
line is not in the file exactly once (the user edited it meanwhile, or the model
misquoted it) the operation is skipped and reported, so a hand edit always wins.
Lines no operation touches keep their bytes.

A sync-conflict block (a fact changed differently on two machines, kept both ways
between `<!-- sync conflict: ... -->` and `<!-- end of sync conflict -->`: see
agent/stores/merge.py) is settled by an update or a delete quoting any line inside it:
the whole block, both comment lines included, becomes the update's new line (or lines),
or goes. Settling a block is what the dream is asked to do, so the guards against
rewriting memory do not count it.
"""

from __future__ import annotations

import bisect
import difflib
import re
from dataclasses import dataclass, field

from agent.stores.memory import FACT, HEADING, MEMORY, MEMORY_FILES, normalise
from agent.stores.merge import CONFLICT_END, CONFLICT_RE

FILES = MEMORY_FILES
SHRINK_LIMIT = 0.25            # a run may rewrite (update or delete) at most this share of a
                               # file's facts (and always at least one)
_MARKER = re.compile(r"^(\s*[-*+]\s+)")
_NUMBERED = re.compile(r"^\s*\d+\t")  # a quoted line that kept the prompt's "12<TAB>" prefix


@dataclass
class OpResult:
    """One editor operation and what became of it."""
    op: str
    file: str
    section: str
    old: str
    new: str
    reason: str
    status: str = "applied"     # "applied", "skipped" (did not fit the file), "refused" (a
                                # guard), "proposed" (waits for review) or "dropped"
    why: str = ""               # for skipped and refused operations: the explanation
    settled: bool = False       # it settled a sync-conflict block


@dataclass
class Applied:
    """The new texts of the memory files and the fate of every operation."""
    before: dict[str, str]
    texts: dict[str, str]
    results: list[OpResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, op: str) -> int:
        return sum(1 for r in self.results if r.op == op and r.status == "applied"
                   and not r.settled)

    @property
    def settled(self) -> int:
        """Sync-conflict blocks settled."""
        return sum(1 for r in self.results if r.settled and r.status == "applied")

    @property
    def added(self) -> int:
        return self.count("add")

    @property
    def updated(self) -> int:
        return self.count("update")

    @property
    def removed(self) -> int:
        return self.count("delete")

    @property
    def proposed(self) -> int:
        """Edits that wait for a person's review (agent review)."""
        return sum(1 for r in self.results if r.status == "proposed")

    @property
    def dropped(self) -> int:
        """Edits dropped before review (rejected before, or waiting already)."""
        return sum(1 for r in self.results if r.status == "dropped")

    @property
    def changed(self) -> list[str]:
        """Files whose text changed."""
        return [f for f in FILES if self.texts.get(f, "") != self.before.get(f, "")]

    def describe(self) -> list[str]:
        """What changed and why, then what was skipped: the commit body and the CLI's report."""
        lines = []
        for r in self.results:
            if r.status != "applied":
                continue
            if r.settled:
                lines.append(f"Settled a sync conflict in {r.file}: "
                             + (f"kept {r.new}" if r.op == "update" else "dropped every version"))
            elif r.op == "add":
                where = f" ({r.section})" if r.section else ""
                lines.append(f"Added to {r.file}{where}: {r.new}")
            elif r.op == "update":
                lines.append(f"Updated in {r.file}: {r.old}")
                lines.append(f"  now: {r.new}")
            else:
                lines.append(f"Removed from {r.file}: {r.old}")
            if r.reason:
                lines.append(f"  why: {r.reason}")
        for r in self.results:
            if r.status == "proposed":
                what = {"add": f"add to {r.file}" + (f" ({r.section})" if r.section else ""),
                        "update": f"update in {r.file}", "delete": f"remove from {r.file}"}
                lines.append(f"Proposed for review: {what.get(r.op, r.op)}: "
                             + (r.new if r.op == "add" else r.old))
                if r.op == "update":
                    lines.append(f"  now: {r.new}")
                if r.reason:
                    lines.append(f"  why: {r.reason}")
        for r in self.results:
            if r.status not in ("applied", "proposed"):
                lines.append(f"{r.status.capitalize()} {r.op} in {r.file}: {r.new or r.old} ({r.why})"
                             if r.status == "dropped" else
                             f"{r.status.capitalize()} {r.op} in {r.file}: {r.old or r.new} ({r.why})")
        return lines

    def diff(self) -> str:
        """A unified diff of the changed files, as `git diff` would show them."""
        out = []
        for name in self.changed:
            out.extend(difflib.unified_diff(
                self.before.get(name, "").splitlines(keepends=True),
                self.texts[name].splitlines(keepends=True),
                fromfile=f"a/{name}", tofile=f"b/{name}"))
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                       for line in out)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _heading_title(line: str) -> tuple[int, str] | None:
    if not line.startswith("#"):
        return None
    m = HEADING.match(line.rstrip("\r\n"))
    return (len(m.group(1)), m.group(2).strip()) if m else None


class _Doc:
    """A file as a list of lines with their endings, edited in place.

    What every operation would otherwise look for by reading the whole file is kept up
    to date by every edit instead: how many fact lines have each text, where the
    headings are, whether a sync-conflict block is in it at all. So a run's cost per
    operation does not grow with the file (a memory of 10,000 facts takes an add as
    fast as one of 100)."""

    def __init__(self, text: str):
        self.lines = text.splitlines(keepends=True)
        self.nl = "\r\n" if "\r\n" in text else "\n"
        # How many fact lines have each normalised text.
        self.keys: dict[str, int] = {}
        for line in self.lines:
            self._count(line, +1)
        # The line numbers (0-based, ascending) of the headings.
        self.heads = [i for i, line in enumerate(self.lines) if _heading_title(line)]
        # Only a sync's merge writes conflict blocks, and no edit adds one: a file
        # without their opening line has none to look for.
        self.conflicted = any(line.startswith("<!--") and CONFLICT_RE.match(line.strip())
                              for line in self.lines)

    def _count(self, line: str, delta: int) -> None:
        if FACT.match(line):
            key = normalise(line)
            self.keys[key] = self.keys.get(key, 0) + delta

    def _splice(self, a: int, b: int, lines: list[str]) -> None:
        """Lines a..b-1 become `lines` (fact counts are the caller's), headings kept."""
        self.lines[a:b] = lines
        k = bisect.bisect_left(self.heads, a)
        shift = len(lines) - (b - a)
        self.heads[k:] = ([a + j for j, line in enumerate(lines) if _heading_title(line)]
                          + [h + shift for h in self.heads[k:] if h >= b])

    def has_fact(self, fact: str) -> int | None:
        """The line number (1-based) of a fact with the same normalised text, or None."""
        key = normalise(fact)
        if not self.keys.get(key):
            return None
        return next(i + 1 for i, line in enumerate(self.lines)
                    if FACT.match(line) and normalise(line) == key)

    def replace(self, i: int, line: str | None) -> None:
        """Line i becomes `line` (None deletes it)."""
        self._count(self.lines[i], -1)
        if line is None:
            self._splice(i, i + 1, [])
        else:
            self._splice(i, i + 1, [line])
            self._count(line, +1)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def find(self, old: str) -> list[int]:
        want = old.rstrip("\r\n")
        hits = [i for i, line in enumerate(self.lines) if line.rstrip("\r\n") == want]
        if not hits and want.strip():
            # Trailing spaces are invisible in the prompt; compare without them.
            hits = [i for i, line in enumerate(self.lines) if line.rstrip() == want.rstrip()]
        return hits

    def block_of(self, i: int) -> tuple[int, int] | None:
        """(first, last) line of the sync-conflict block holding line i, or None."""
        if not self.conflicted:
            return None
        start = None
        for j in range(i, -1, -1):
            line = self.lines[j].strip()
            if CONFLICT_RE.match(line):
                start = j
                break
            if line == CONFLICT_END and j != i:
                return None
        if start is None:
            return None
        for k in range(max(i, start + 1), len(self.lines)):
            line = self.lines[k].strip()
            if line == CONFLICT_END:
                return start, k
            if CONFLICT_RE.match(line):
                return None
        return None

    def settle(self, block: tuple[int, int], lines: list[str]) -> None:
        """The block's lines replaced by `lines` (none: the block goes)."""
        a, b = block
        for line in self.lines[a:b + 1]:
            self._count(line, -1)
        self._splice(a, b + 1, lines)
        for line in lines:
            self._count(line, +1)

    def _terminate(self, i: int) -> None:
        if i >= 0 and not self.lines[i].endswith("\n"):
            self.lines[i] += self.nl

    def add(self, section: str, fact: str) -> None:
        self._count(fact, +1)
        line = fact + self.nl
        want = section.strip().lstrip("#").strip().casefold()
        if not want:
            last = next((i for i in range(len(self.lines) - 1, -1, -1) if self.lines[i].strip()),
                        -1)
            self._terminate(last)
            self._splice(last + 1, last + 1, [line])
            return
        for n, h in enumerate(self.heads):
            head = _heading_title(self.lines[h])
            if not head or head[1].casefold() != want:
                continue
            end = next((j for j in self.heads[n + 1:]
                        if (t := _heading_title(self.lines[j])) and t[0] <= head[0]),
                       len(self.lines))
            # The section's last line with text, looked for from its end back.
            last = next((j for j in range(end - 1, h, -1) if self.lines[j].strip()), None)
            if last is not None:
                self._terminate(last)
                self._splice(last + 1, last + 1, [line])
                return
            self._terminate(h)
            block = [self.nl, line]
            if h + 1 < len(self.lines) and self.lines[h + 1].strip():
                block.append(self.nl)
            self._splice(h + 1, h + 1, block)
            return
        # A heading the file does not have yet: a new section at the end.
        last = len(self.lines) - 1
        self._terminate(last)
        block = [self.nl] if self.lines and self.lines[-1].strip() else []
        block += [f"## {section.strip().lstrip('#').strip()}{self.nl}", self.nl, line]
        self._splice(len(self.lines), len(self.lines), block)


def conflict_lines(text: str) -> set[str]:
    """The lines (without trailing space) inside the file's sync-conflict blocks, read
    once: whether an operation settles a block is then a lookup."""
    inside, out = False, set()
    for line in text.splitlines():
        bare = line.strip()
        if CONFLICT_RE.match(bare):
            inside = True
        elif bare == CONFLICT_END:
            inside = False
        elif inside:
            out.add(line.rstrip())
    return out


def _bullet(new: str, like: str | None = None) -> str:
    """`new` folded onto one line and made a bullet (with `like`'s marker when it had one)."""
    text = _one_line(new)
    if FACT.match(text):
        return text
    m = _MARKER.match(like or "")
    return (m.group(1) if m else "- ") + text


_WORD = re.compile(r"\w+")
_COMMON = frozenset("about after also been before from have into just more most much only "
                    "over same some such than that their them then there these they this "
                    "very what when where which while will with would your".split())


def _words(line: str) -> set[str]:
    words = {w for w in _WORD.findall(normalise(line))
             if (w.isdigit() or len(w) >= 4) and w not in _COMMON}
    return words or set(_WORD.findall(normalise(line)))


def _quoted(line: str, text: str, evidence: frozenset[str]) -> bool:
    """Whether the evidence (the words of the run's archive entries) quotes a fact line
    of `text`: at least half of the words that set the line apart from the file's other
    facts (numbers, words of four letters or more) occur in it. So "moved from Berlin
    to Lisbon" quotes "- Lives in Berlin", while "forget everything" quotes nothing and
    an entry about fact 3 does not quote fact 7."""
    mine = _words(line)
    others: set[str] = set()
    for other in text.splitlines():
        if FACT.match(other) and other.rstrip("\r\n") != line.rstrip("\r\n"):
            others |= _words(other)
    words = (mine - others) or mine
    return bool(words) and 2 * len(words & evidence) >= len(words)


def _apply(texts: dict[str, str], ops: list[dict], refuse_deletes: set[str],
           hand: dict[str, set[str]] | None = None,
           evidence: frozenset[str] = frozenset()) -> Applied:
    docs = {name: _Doc(texts.get(name, "")) for name in FILES}
    results = []
    for raw in ops:
        r = OpResult(str(raw.get("op", "")), str(raw.get("file", "")), str(raw.get("section", "")),
                     str(raw.get("old", "")), str(raw.get("new", "")), str(raw.get("reason", "")))
        results.append(r)
        if r.file not in docs:
            r.status, r.why = "skipped", f"unknown file {r.file!r} (only {' and '.join(FILES)})"
            continue
        doc = docs[r.file]
        if r.op == "add":
            if not r.new.strip():
                r.status, r.why = "skipped", "an add needs the new fact's text"
                continue
            fact = _bullet(r.new)
            present = doc.has_fact(fact)
            if present is not None:
                r.status, r.why = "skipped", f"already present (line {present})"
                continue
            doc.add(r.section, fact)
            r.new = fact
            continue
        if r.op not in ("update", "delete"):
            r.status, r.why = "skipped", f"unknown operation {r.op!r}"
            continue
        if not r.old.strip():
            r.status, r.why = "refused", f"{'an' if r.op == 'update' else 'a'} {r.op} must quote the exact line it replaces"
            continue
        hits = doc.find(r.old)
        if not hits and _NUMBERED.match(r.old):
            hits = doc.find(_NUMBERED.sub("", r.old, count=1))
        if len(hits) != 1:
            r.status = "skipped"
            r.why = ("the quoted line is not in the file (edited since?)" if not hits else
                     f"the quoted line is in the file {len(hits)} times")
            continue
        i = hits[0]
        current = doc.lines[i]
        block = doc.block_of(i)
        if block is not None:
            if r.op == "update" and not r.new.strip():
                r.status, r.why = "skipped", "an update needs the new text (use delete to remove)"
                continue
            ending = current[len(current.rstrip("\r\n")):] or doc.nl
            new = [_bullet(x, like=current) + ending for x in r.new.splitlines() if x.strip()]
            doc.settle(block, new if r.op == "update" else [])
            r.settled = True
            r.new = " / ".join(x.rstrip("\r\n") for x in new)
            continue
        if not FACT.match(current):
            r.status, r.why = "refused", "only fact lines (bullets) are edited by the dream"
            continue
        if hand and current.rstrip("\r\n") in hand.get(r.file, set()) \
                and not _quoted(current, texts.get(r.file, ""), evidence):
            r.status = "refused"
            r.why = ("a line a person wrote by hand, which the archive entries do not quote; "
                     "the dream leaves it to them")
            continue
        if r.file in refuse_deletes:
            r.status = "refused"
            r.why = (f"updating or deleting more than a quarter of {r.file}'s facts in one "
                     f"run needs --allow-shrink")
            continue
        if r.op == "delete":
            doc.replace(i, None)
            continue
        if not r.new.strip():
            r.status, r.why = "skipped", "an update needs the new text (use delete to remove)"
            continue
        line = _bullet(r.new, like=current)
        ending = current[len(current.rstrip("\r\n")):]
        if line == current.rstrip("\r\n"):
            r.status, r.why = "skipped", "the new text is the same as the old"
            continue
        doc.replace(i, line + ending)
        r.new = line
    return Applied(dict(texts), {name: doc.text for name, doc in docs.items()}, results)


def apply_ops(texts: dict[str, str], ops: list[dict], *, allow_shrink: bool = False,
              max_lines: int = 200, hand: dict[str, set[str]] | None = None,
              evidence: str = "") -> Applied:
    """The memory files after the editor's operations, and a report on each of them.

    `texts` maps MEMORY.md and USER.md to their current text ("" when missing).
    The guard against a run that would empty or rewrite memory (a hostile archive entry
    crafted to look like instructions, a confused model): updates and deletions count
    together, and more than a quarter of a file's facts (at least one is always allowed)
    are all refused for that file unless `allow_shrink`; a line a person wrote by hand
    (`hand`: the lines of each file not written by the agent) is rewritten only when
    the `evidence` (the archive entries' text) quotes it. Everything else still applies.
    """
    texts = {name: texts.get(name, "") for name in FILES}
    words = frozenset(_WORD.findall(evidence.casefold()))
    applied = _apply(texts, ops, set(), hand, words)
    notes = []
    if not allow_shrink:
        refuse = set()
        for name in FILES:
            before = sum(1 for line in texts[name].splitlines() if FACT.match(line))
            changes = [r for r in applied.results if r.file == name and not r.settled
                       and r.op in ("update", "delete") and r.status == "applied"]
            if len(changes) > max(1, before * SHRINK_LIMIT):
                refuse.add(name)
                deletes = sum(1 for r in changes if r.op == "delete")
                what = (f"{deletes} of {before} facts would be deleted" if deletes == len(changes)
                        else f"{len(changes)} of {before} facts would be updated or deleted")
                notes.append(f"{name}: {what}, more than a quarter; those changes were "
                             f"refused (--allow-shrink allows them)")
        if refuse:
            # Again without those changes: a later operation may quote a line they touched.
            applied = _apply(texts, ops, refuse, hand, words)
    applied.notes.extend(notes)
    lines = len(applied.texts[MEMORY].splitlines())
    if lines > max_lines:
        applied.notes.append(f"{MEMORY}: {lines} lines, over its budget of {max_lines} "
                             f"([memory] max_lines in agent.toml)")
    else:
        applied.notes.append(f"{MEMORY}: {lines} of {max_lines} lines")
    return applied
