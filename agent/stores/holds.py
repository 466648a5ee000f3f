"""A model's own write to MEMORY.md or USER.md, held for review under `[dream] review =
"all"`: a chat turn's `remember`, `write_file` or `edit_file` of a memory file becomes
proposals in the dream ledger, the same records a dream's proposals are, so `agent
review` lists them, accepting lands them on `main` and rejecting sticks.

The proposals of one machine's chat on one day are one "run", `chat-<machine>-<day>`
(`chat-laptop-2026-11-20#3` is the third), and their branch is `dream/chat-laptop-2026-11-20`.
The record goes into the turn's own commit; its number is taken under the vault lock
as the turn is saved, so two turns at once never share one.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from agent.stores import arrivals, ledger
from agent.stores.memory import FACT, HEADING, memory_file, normalise

PREFIX = "chat-"
HELD = ("held for review: nothing reaches {file} until the person accepts it "
        "(`agent review` lists it; [dream] review = \"all\")")


def holds(settings: object) -> bool:
    """Whether a model's writes to the memory files wait for review."""
    return getattr(settings, "dream_review", "changes") == "all"


def run_of(host: str, now: datetime) -> str:
    """The run id of this machine's chat proposals of `now`'s day (a valid branch name)."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", host).strip("-") or "machine"
    return f"{PREFIX}{name}-{now:%Y-%m-%d}"


def is_chat(run: str) -> bool:
    return run.startswith(PREFIX)


def _section_of(lines: list[str], i: int) -> str:
    for line in reversed(lines[:i]):
        m = HEADING.match(line.rstrip("\r\n")) if line.startswith("#") else None
        if m:
            return m.group(2).strip()
    return ""


def ops_between(file: str, old: str, new: str) -> list[dict]:
    """The fact-line edits that turn `old` into `new` (adds under their heading, updates
    of a line into another, removals); lines that are not facts are not edits."""
    file = memory_file(file) or ""
    if not file:
        return []
    old_lines, new_lines = old.splitlines(), new.splitlines()
    a = [(i, line) for i, line in enumerate(old_lines) if FACT.match(line)]
    b = [(j, line) for j, line in enumerate(new_lines) if FACT.match(line)]
    out: list[dict] = []

    def op(kind: str, was: str = "", now: str = "", section: str = "") -> None:
        out.append({"op": kind, "file": file, "section": section, "old": was, "new": now,
                    "reason": ""})

    matcher = difflib.SequenceMatcher(a=[normalise(x) for _, x in a],
                                      b=[normalise(x) for _, x in b], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        gone, came = a[i1:i2], b[j1:j2]
        for (_, was), (_, now) in zip(gone, came):
            op("update", was, now)
        for _, was in gone[len(came):]:
            op("delete", was)
        for j, now in came[len(gone):]:
            op("add", now=now, section=_section_of(new_lines, j))
    return out


def records(ops: list[dict], run: str, at: str, where: str,
            how: str = "written in chat") -> Callable[[list[dict]], list[dict]]:
    """A function of the ledger's records as they are when the turn is saved: the
    proposal records of `ops`, numbered after the run's last one (`where`: the chat and
    turn they came from; `how`: what wrote them)."""
    def made(existing: list[dict]) -> list[dict]:
        last = max((int(r["n"]) for r in existing if r.get("run") == run
                    and isinstance(r.get("n"), int)), default=0)
        return [{"run": run, "at": at, "status": ledger.PROPOSED, "n": last + k,
                 "op": o["op"], "file": o["file"], "section": o.get("section", ""),
                 "line": o["new"] if o["op"] != "delete" else "", "old": o.get("old", ""),
                 "reason": f"{how} ({where})", "archive": [], "exact": True,
                 "chat": where}
                for k, o in enumerate(ops, 1)]
    return made


def append(state: Path, make: Callable[[list[dict]], list[dict]]) -> Callable[[str | None], str]:
    """The staged update of the ledger's text that appends `make`'s records (noted as
    made on this machine, `state`: its .agent/ folder)."""
    def update(text: str | None) -> str:
        text = text or ""
        existing = [r for r in (ledger.loads(x) for x in text.split("\n")) if r is not None]
        recs = make(existing)
        arrivals.made_here(state, recs)
        lines = "".join(ledger.dumps(r) + "\n" for r in recs)
        return text + ("" if not text or text.endswith("\n") else "\n") + lines
    return update


def describe(ops: list[dict]) -> str:
    """The held edits in a line each, for the model to tell the person."""
    said = []
    for o in ops:
        if o["op"] == "add":
            said.append(f"add {o['new']}")
        elif o["op"] == "update":
            said.append(f"change {o['old']} to {o['new']}")
        else:
            said.append(f"remove {o['old']}")
    return "; ".join(said)
