"""Three-way merges of the vault's own formats, for a sync between machines.

Pure functions over bytes: (base, ours, theirs) -> the merged file, or None when the
format's rule cannot merge them (the caller then keeps both versions another way).
Every rule keeps every line either side wrote and never writes git's conflict markers.

- Append-only files (session JSONL, daily notes): the common start, then the lines
  each side appended, interleaved by time; a line both sides appended is kept once
  (as often as the side that appended it more often did).
  The order depends only on the lines, not on which machine merges, so two machines
  that merge the same pair of histories write the same file.
- Fact files (`MEMORY.md`, `USER.md`): a line-level three-way merge; a fact added on
  both sides appears once; where one fact was changed differently on each side (or
  changed on one and deleted on the other), its versions, and only those, are kept
  between two comment lines (`CONFLICT_START` ...
  `CONFLICT_END`) that a person sees in the file and the dream is told to resolve.
- `cron.json`: merged job by job (see `merge_cron`); a job names the one machine that
  runs it (`host`), so two machines never both run it and its state (last run)
  changes on that machine only.
- A set file (`.dream_cursor`): the union of both sides' lines, sorted.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime

from agent.stores import archive, memory
from agent.fs import boundedjson

CONFLICT_START = ("<!-- sync conflict: this was changed differently on two machines; "
                  "both versions are kept below. Keep the right one and delete the "
                  "rest (the next dream will). -->")
CONFLICT_END = "<!-- end of sync conflict -->"
CONFLICT_RE = re.compile(r"^<!-- sync conflict:.*?-->$")

_TIME = re.compile(rb"^\s*-\s*(\d{1,2}:\d{2})")
_TS = re.compile(rb'"ts"\s*:\s*"([^"]*)"')


def _lines(data: bytes) -> list[bytes]:
    if not data:
        return []
    lines = data.splitlines(keepends=True)
    if not lines[-1].endswith(b"\n"):
        lines[-1] += b"\n"
    return lines


# ---- append-only files ------------------------------------------------------------


def _keys(lines: list[bytes], jsonl: bool) -> list[bytes]:
    """A time for each line; a line without one (a marker, a wrapped note line) takes
    the time of the line before it, so it stays with its neighbour."""
    keys, last = [], b""
    for line in lines:
        m = (_TS if jsonl else _TIME).search(line)
        if m:
            last = m.group(1)
            if not jsonl and len(last) == 4:  # 9:05 sorts as 09:05
                last = b"0" + last
        keys.append(last)
    return keys


def merge_appended(base: bytes, ours: bytes, theirs: bytes, *, jsonl: bool) -> bytes | None:
    """Both sides' appended lines after the common start; None if a side rewrote it."""
    b, o, t = _lines(base), _lines(ours), _lines(theirs)
    if o[:len(b)] != b or t[:len(b)] != b:
        return None
    new_o, new_t = o[len(b):], t[len(b):]
    ko, kt = _keys(new_o, jsonl), _keys(new_t, jsonl)
    # A line both sides appended is one line, kept as many times as the side that
    # appended it more often did (a note made twice in a minute is two notes); a new
    # line equal to one of the start (a blank line, "- 09:00 pills" again) is new.
    count_o, count_t = Counter(new_o), Counter(new_t)
    room = {x: max(count_o[x], count_t[x]) for x in count_o.keys() & count_t.keys()}
    out = list(b)
    i = j = 0
    while i < len(new_o) or j < len(new_t):
        take_o = j >= len(new_t) or (i < len(new_o) and (ko[i], new_o[i]) <= (kt[j], new_t[j]))
        line = new_o[i] if take_o else new_t[j]
        if take_o:
            i += 1
        else:
            j += 1
        if line in room:
            if not room[line]:
                continue
            room[line] -= 1
        out.append(line)
    return b"".join(out)


def merge_union_lines(base: bytes, ours: bytes, theirs: bytes) -> bytes:
    """A line-level three-way merge where both sides of a clash are kept (ours first)
    and a line added identically by both is kept once. For append-only files a person
    edited in the middle."""
    return b"".join(_merge3(_lines(base), _lines(ours), _lines(theirs), lambda _, o, t: o + [
        x for x in t if x not in o]))


# ---- fact files -------------------------------------------------------------------


def _norm_fact(line: bytes) -> str:
    return memory.normalise(line.decode("utf-8", "replace").strip())


def merge_facts(base: bytes, ours: bytes, theirs: bytes, counts: dict | None = None) -> bytes:
    """MEMORY.md / USER.md: clean changes merged, clashes kept both ways and marked; a
    fact deleted on one side and changed on the other is kept as changed (nothing is
    lost, and there is no second version to choose). `counts`, when given, is told how
    many stretches were each: "both" (kept both ways), "deleted_ours", "deleted_theirs"."""
    b = _lines(base)
    tally = counts if counts is not None else {}

    merged = _merge3(b, _lines(ours), _lines(theirs),
                     lambda was, o, t: _fact_clash(was, o, t, tally))
    # A fact both sides added (in different places) appears once: the first copy stays.
    base_norm = {_norm_fact(x) for x in b}
    out, seen = [], set()
    for line in merged:
        if memory.FACT.match(line.decode("utf-8", "replace")):
            key = _norm_fact(line)
            if key not in base_norm:
                if key in seen:
                    continue
                seen.add(key)
        out.append(line)
    return b"".join(out)


def _fact_clash(was: list[bytes], o: list[bytes], t: list[bytes], tally: dict) -> list[bytes]:
    """A stretch of a fact file changed on both sides, settled line by line: a fact one
    side added, changed or deleted while the other left it alone goes in as that side
    made it; a base line one side changed and the other deleted is kept as changed
    (nothing lost, no second version to choose); only a base line both sides changed
    differently becomes a conflict block holding its two versions. Ours' order, then
    theirs'. `tally` counts the stretches settled each way (see merge_facts)."""
    def count(key):
        tally[key] = tally.get(key, 0) + 1
    o_norm = {_norm_fact(x) for x in o}
    t_only = [x for x in t if _norm_fact(x) not in o_norm]
    if not t_only:
        if was and not t:
            count("deleted_theirs")
        return o
    if not was:  # both sides only added lines here: keep both, ours first
        return o + t_only
    if not o:
        count("deleted_ours")
        return t
    norm = {x: _norm_fact(x) for x in [*was, *o, *t]}
    was_norm, t_norm = {norm[x] for x in was}, {norm[x] for x in t}
    o_new = [x for x in o if norm[x] not in was_norm and norm[x] not in t_norm]
    t_new = [x for x in t_only if norm[x] not in was_norm]
    # The base line each side's new line replaces (the most alike), if any.
    o_for, t_for = _replacements(was, o, o_new), _replacements(was, t, t_new)
    blocks: dict[int, list[bytes]] = {}
    block_of: dict[bytes, int] = {}
    for i, line in enumerate(was):
        if norm[line] in o_norm or norm[line] in t_norm:
            continue                     # one side kept it: the other side's change wins
        ov, tv = o_for.get(i, []), t_for.get(i, [])
        if (ov or tv) and [norm[x] for x in ov] != [norm[x] for x in tv]:
            if not (ov and tv):          # changed on one side, deleted on the other
                count("deleted_theirs" if ov else "deleted_ours")
                continue
            count("both")
            blocks[i] = [CONFLICT_START.encode() + b"\n", *ov, *tv, CONFLICT_END.encode() + b"\n"]
            block_of.update({x: i for x in ov + tv})
    base_at = {norm[x]: i for i, x in enumerate(was)}
    out: list[bytes] = []

    def emit(lines, once):
        for x in lines:
            if x in block_of:
                out.extend(blocks.pop(block_of[x], []))
            elif not (once and x in out):
                out.append(x)
    for x in o:
        if norm[x] in was_norm and norm[x] not in t_norm:
            emit(t_for.get(base_at[norm[x]], []), True)   # theirs changed (or deleted) it
        else:
            emit([x], False)
    emit(t_new, True)
    return out


def _replacements(was: list[bytes], side: list[bytes], new: list[bytes]) -> dict[int, list[bytes]]:
    """{index in `was` of a line the side dropped: the new line that replaced it}, pairing
    each dropped line with its most alike new line (a fact reworded keeps most of its
    words); a new line alike to none is an addition of its own."""
    import difflib

    side_norm = {_norm_fact(x) for x in side}
    gone = [i for i, x in enumerate(was) if _norm_fact(x) not in side_norm]
    free = list(new)
    out: dict[int, list[bytes]] = {}
    for i in gone:
        scored = [(difflib.SequenceMatcher(None, _norm_fact(was[i]), _norm_fact(x)).ratio(), k)
                  for k, x in enumerate(free)]
        if scored:
            score, k = max(scored)
            if score >= 0.5 or len(gone) == len(new) == 1:
                out[i] = [free.pop(k)]
    return out


def has_conflicts(text: str) -> int:
    """How many sync-conflict blocks a fact file holds."""
    return sum(1 for line in text.splitlines() if CONFLICT_RE.match(line.strip()))


# ---- cron.json --------------------------------------------------------------------

# What a person or a tool sets; everything else of a job is its state (runs).
_DEFINITION = ("name", "enabled", "schedule", "message", "session", "delete_after_run",
               "deliver", "host")


def _stamp(job: dict, key: str) -> str:
    value = job.get(key) or ""
    if isinstance(value, dict):  # a state block
        return ""
    return str(value)


def _later(a: str, b: str) -> bool:
    """Whether time `a` is after `b`: by the instant when both are ISO times with an
    offset (two machines, or one on a trip, write different offsets: 08:00-05:00 is
    after 12:00+01:00), else as text (an empty one is before any)."""
    try:
        ta, tb = datetime.fromisoformat(a), datetime.fromisoformat(b)
    except ValueError:
        return a > b
    if ta.tzinfo is None or tb.tzinfo is None:
        return a > b
    return ta > tb


def merge_cron(base: bytes, ours: bytes, theirs: bytes) -> bytes | None:
    """cron.json merged by job id: a job added on either side is kept; a job changed on
    both sides keeps the newer definition (by `updated`) and the newer state (by last
    run); a job deleted on one side and untouched on the other is gone; a job deleted on
    one side but changed on the other is kept (nothing is lost). None if a side is not
    a cron file."""
    try:
        docs = [boundedjson.loads(x.decode("utf-8")) if x.strip() else {"version": 1, "jobs": []}
                for x in (base, ours, theirs)]
        jobs = [{j["id"]: j for j in d["jobs"]} for d in docs]
        orders = [[j["id"] for j in d["jobs"]] for d in docs]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    jb, jo, jt = jobs
    result: dict[str, dict] = {}
    for jid in dict.fromkeys(orders[1] + orders[2]):
        b, o, t = jb.get(jid), jo.get(jid), jt.get(jid)
        if o is None or t is None:
            present = o if o is not None else t
            # Deleted on one side: gone only if the other side left it as it was.
            if b is not None and present == b:
                continue
            result[jid] = present
            continue
        if o == t:
            result[jid] = o
            continue
        result[jid] = _merge_job(b, o, t)
    # Jobs in base deleted on both sides are gone; keep ours' order, then theirs' new.
    doc = dict(docs[1])
    doc["jobs"] = list(result.values())
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _merge_job(b: dict | None, o: dict, t: dict) -> dict:
    def definition(j):
        return {k: j.get(k) for k in _DEFINITION}

    do, dt = definition(o), definition(t)
    if b is not None and definition(b) == do:
        winner = t
    elif b is not None and definition(b) == dt:
        winner = o
    elif _stamp(t, "updated") != _stamp(o, "updated"):
        winner = t if _later(_stamp(t, "updated"), _stamp(o, "updated")) else o
    else:
        # No way to tell which is newer (two machines that each gave a job without a
        # host to themselves): the same choice on every machine, so they agree at once
        # on the one machine that runs it.
        winner = min(o, t, key=lambda j: json.dumps(definition(j), sort_keys=True, default=str))
    job = dict(winner)
    # State: the side that ran the job last knows best.
    so, st = o.get("state") or {}, t.get("state") or {}
    if isinstance(so, dict) and isinstance(st, dict):
        newer = st if _later(str(st.get("last_run") or ""), str(so.get("last_run") or "")) else so
        if "state" in o or "state" in t:
            job["state"] = newer
    return job


# ---- set files --------------------------------------------------------------------


def merge_set(base: bytes, ours: bytes, theirs: bytes) -> bytes | None:
    """`.dream_cursor`: the entries either machine consolidated (an old single number
    on either side included); None if a side does not parse."""
    try:
        done = [archive.Consolidated.parse(x.decode("utf-8")) for x in (ours, theirs)]
    except (archive.ArchiveError, UnicodeDecodeError):
        return None
    return done[0].union(done[1]).render().encode("utf-8")


# ---- the line-level three-way merge -----------------------------------------------


def _merge3(base: list[bytes], ours: list[bytes], theirs: list[bytes], on_clash) -> list[bytes]:
    """A diff3 merge over lines; `on_clash(base_lines, ours_lines, theirs_lines)`
    settles a stretch changed differently on both sides."""
    def changes(side):
        import difflib
        sm = difflib.SequenceMatcher(None, base, side, autojunk=False)
        return [(i1, i2, side[j1:j2]) for tag, i1, i2, j1, j2 in sm.get_opcodes()
                if tag != "equal"]

    co, ct = changes(ours), changes(theirs)
    out: list[bytes] = []
    pos = 0
    a = b = 0
    while a < len(co) or b < len(ct):
        # Take the next change (or the next group of overlapping changes).
        if b >= len(ct) or (a < len(co) and co[a][0] <= ct[b][0]):
            start, end = co[a][0], co[a][1]
        else:
            start, end = ct[b][0], ct[b][1]
        group_o, group_t = [], []
        grew = True
        while grew:
            grew = False
            while a < len(co) and _overlaps(co[a], start, end):
                group_o.append(co[a]); end = max(end, co[a][1]); a += 1; grew = True
            while b < len(ct) and _overlaps(ct[b], start, end):
                group_t.append(ct[b]); end = max(end, ct[b][1]); b += 1; grew = True
        out.extend(base[pos:start])
        o_text = _apply(base, start, end, group_o)
        t_text = _apply(base, start, end, group_t)
        if not group_t:
            out.extend(o_text)
        elif not group_o:
            out.extend(t_text)
        elif o_text == t_text:
            out.extend(o_text)
        else:
            out.extend(on_clash(base[start:end], o_text, t_text))
        pos = end
    out.extend(base[pos:])
    return out


def _overlaps(change, start, end) -> bool:
    # Ranges that overlap are one stretch, and so are two insertions at one point; a
    # change that only touches another (the next line) is a separate one: facts are
    # lines of their own.
    i1, i2, _ = change
    return i1 < end or (i1 == end and i1 == i2 and start == end)


def _apply(base, start, end, group) -> list[bytes]:
    out, pos = [], start
    for i1, i2, lines in group:
        out.extend(base[pos:i1])
        out.extend(lines)
        pos = i2
    out.extend(base[pos:end])
    return out
