"""The three-way merges of the vault's own formats (agent/stores/merge.py), as tables of
(base, ours, theirs) -> the merged file: what two machines' edits become after a sync."""

from __future__ import annotations

import json

import pytest

from agent.stores.merge import (CONFLICT_END, CONFLICT_START, has_conflicts, merge_appended,
                                merge_cron, merge_facts, merge_set, merge_union_lines)

HEAD = "# 2030-01-01\n\n- 09:00 breakfast\n"

# ---- append-only files: daily notes and session JSONL ------------------------------------

NOTES = [
    # (name, base, ours, theirs, merged); None: a side rewrote the common start
    ("each side's new lines interleaved by time",
     HEAD, HEAD + "- 10:00 ours\n- 12:00 ours later\n", HEAD + "- 11:00 theirs\n",
     HEAD + "- 10:00 ours\n- 11:00 theirs\n- 12:00 ours later\n"),
    ("a line both sides appended is kept once",
     HEAD, HEAD + "- 10:00 same\n", HEAD + "- 10:00 same\n- 11:00 theirs\n",
     HEAD + "- 10:00 same\n- 11:00 theirs\n"),
    ("a note written twice in one minute on one side keeps both copies",
     HEAD, HEAD + "- 10:00 pills\n- 10:00 pills\n", HEAD + "- 10:00 pills\n- 11:00 walk\n",
     HEAD + "- 10:00 pills\n- 10:00 pills\n- 11:00 walk\n"),
    ("a new line equal to one of the start is a new line, not a duplicate",
     HEAD, HEAD + "- 09:00 breakfast\n", HEAD + "- 11:00 theirs\n",
     HEAD + "- 09:00 breakfast\n- 11:00 theirs\n"),
    ("a blank line a person appended is kept",
     HEAD, HEAD + "\n## Evening\n- 20:00 read\n", HEAD + "- 10:00 theirs\n",
     HEAD + "\n## Evening\n- 10:00 theirs\n- 20:00 read\n"),
    ("9:05 sorts as 09:05",
     HEAD, HEAD + "- 9:05 early\n", HEAD + "- 10:00 later\n",
     HEAD + "- 9:05 early\n- 10:00 later\n"),
    ("a wrapped line stays under the line it continues",
     HEAD, HEAD + "- 10:00 x\n  more of x\n", HEAD + "- 09:30 y\n  more of y\n",
     HEAD + "- 09:30 y\n  more of y\n- 10:00 x\n  more of x\n"),
    ("a missing last newline is added, never glued to the next line",
     "- 09:00 a", "- 09:00 a\n- 10:00 b", "- 09:00 a\n- 11:00 c",
     "- 09:00 a\n- 10:00 b\n- 11:00 c\n"),
    ("a file both sides made", "", "- 10:00 b\n", "- 09:00 c\n", "- 09:00 c\n- 10:00 b\n"),
    ("CRLF lines stay CRLF",
     "- 09:00 a\r\n", "- 09:00 a\r\n- 10:00 b\r\n", "- 09:00 a\r\n- 11:00 c\r\n",
     "- 09:00 a\r\n- 10:00 b\r\n- 11:00 c\r\n"),
    ("a side that rewrote the start cannot be merged by appending",
     HEAD, "# 2030-01-01\n\n- 09:00 brunch\n", HEAD + "- 11:00 theirs\n", None),
    ("a side that cut the file cannot be merged by appending",
     HEAD, "", HEAD + "- 11:00 theirs\n", None),
]


@pytest.mark.parametrize("name, base, ours, theirs, merged", NOTES, ids=[c[0] for c in NOTES])
def test_daily_notes_keep_every_line_either_side_appended(name, base, ours, theirs, merged):
    got = merge_appended(base.encode(), ours.encode(), theirs.encode(), jsonl=False)
    assert (got.decode() if got is not None else None) == merged
    # The order depends only on the lines, not on which machine merges.
    swapped = merge_appended(base.encode(), theirs.encode(), ours.encode(), jsonl=False)
    assert swapped == got


def line(i: str, ts: str) -> str:
    return json.dumps({"id": i, "ts": ts, "role": "user", "content": i}) + "\n"


START = line("1.0-a", "2030-01-01T09:00:00+00:00")
SESSIONS = [
    ("lines ordered by their ts",
     START, START + line("2.0-o", "2030-01-01T10:00:00+00:00"),
     START + line("2.0-t", "2030-01-01T09:30:00+00:00"),
     START + line("2.0-t", "2030-01-01T09:30:00+00:00") + line("2.0-o", "2030-01-01T10:00:00+00:00")),
    ("a marker without ts stays after the line before it",
     START, START + line("2.0-o", "2030-01-01T10:00:00+00:00") + '{"type": "compact"}\n',
     START + line("2.0-t", "2030-01-01T11:00:00+00:00"),
     START + line("2.0-o", "2030-01-01T10:00:00+00:00") + '{"type": "compact"}\n'
     + line("2.0-t", "2030-01-01T11:00:00+00:00")),
]


@pytest.mark.parametrize("name, base, ours, theirs, merged", SESSIONS, ids=[c[0] for c in SESSIONS])
def test_session_lines_are_interleaved_by_their_time(name, base, ours, theirs, merged):
    got = merge_appended(base.encode(), ours.encode(), theirs.encode(), jsonl=True)
    assert got.decode() == merged
    assert merge_appended(base.encode(), theirs.encode(), ours.encode(), jsonl=True) == got


UNION = [
    ("both sides' versions of a clash, ours first", "a\nb\n", "a\nX\n", "a\nY\n", "a\nX\nY\n"),
    ("a line both added is kept once", "a\n", "a\nb\nc\n", "a\nb\nd\n", "a\nb\nc\nd\n"),
    ("one side's change where the other changed nothing", "a\nb\nc\n", "a\nB\nc\n", "a\nb\nc\nd\n",
     "a\nB\nc\nd\n"),
    ("a deletion on one side", "a\nb\nc\n", "a\nc\n", "a\nb\nc\n", "a\nc\n"),
]


@pytest.mark.parametrize("name, base, ours, theirs, merged", UNION, ids=[c[0] for c in UNION])
def test_an_append_only_file_edited_in_the_middle_keeps_both_versions(name, base, ours, theirs,
                                                                     merged):
    got = merge_union_lines(base.encode(), ours.encode(), theirs.encode()).decode()
    assert got == merged
    assert "<<<<<<<" not in got


# ---- fact files: MEMORY.md, USER.md ------------------------------------------------------

FACT_MERGES = [
    # (name, base, ours, theirs, expected)
    ("one fact changed both ways, ours also added facts after it",
     "## Facts\n- likes tea\n- lives in Paris\n",
     "## Facts\n- likes tea\n- lives in Lyon\n- has a cat named Tom\n- plays chess\n- learns Japanese\n",
     "## Facts\n- likes tea\n- lives in Berlin\n- drives a red car\n",
     "## Facts\n- likes tea\nSTART\n- lives in Lyon\n- lives in Berlin\nEND\n"
     "- has a cat named Tom\n- plays chess\n- learns Japanese\n- drives a red car\n"),
    ("two adjacent facts changed on ours, one of them differently on theirs",
     "- lives in Paris\n- works at Acme\n",
     "- lives in Lyon\n- works at Initech\n",
     "- lives in Berlin\n- works at Acme\n",
     "START\n- lives in Lyon\n- lives in Berlin\nEND\n- works at Initech\n"),
    ("the same change on both sides",
     "- lives in Paris\n", "- lives in Lyon\n- plays chess\n", "- lives in Lyon\n",
     "- lives in Lyon\n- plays chess\n"),
    ("deleted on ours, changed on theirs: the change is kept, with no block of one version",
     "- a\n- lives in Paris\n- b\n", "- a\n- b\n- c\n", "- a\n- lives in Berlin\n- b\n",
     "- a\n- lives in Berlin\n- b\n- c\n"),
    ("ours deleted a fact theirs left alone, both changed another",
     "- likes tea\n- lives in Paris\n",
     "- lives in Lyon\n",
     "- likes tea\n- lives in Berlin\n",
     "START\n- lives in Lyon\n- lives in Berlin\nEND\n"),
    ("both added different facts at one place",
     "- a\n", "- a\n- b\n", "- a\n- c\n", "- a\n- b\n- c\n"),
    ("a fact both added in different places appears once",
     "- a\n- b\n", "- new\n- a\n- b\n", "- a\n- b\n- new\n", "- new\n- a\n- b\n"),
    ("a fact both added differing only in spacing and case appears once",
     "- a\n", "- a\n- Likes  Tea\n", "- a\n- likes tea\n", "- a\n- Likes  Tea\n"),
    ("a deletion on both sides", "- a\n- b\n", "- a\n", "- a\n", "- a\n"),
]


@pytest.mark.parametrize("name,base,ours,theirs,expected", FACT_MERGES, ids=[c[0] for c in FACT_MERGES])
def test_merge_facts_puts_only_the_lines_that_conflict_in_the_block(name, base, ours, theirs, expected):
    got = merge_facts(base.encode(), ours.encode(), theirs.encode()).decode()
    assert got.replace(CONFLICT_START, "START").replace(CONFLICT_END, "END") == expected


@pytest.mark.parametrize("base, ours, theirs, counts", [
    ("- lives in Paris\n", "- lives in Lyon\n", "- lives in Berlin\n", {"both": 1}),
    ("- a\n- lives in Paris\n", "- a\n", "- a\n- lives in Berlin\n", {"deleted_ours": 1}),
    ("- a\n- lives in Paris\n", "- a\n- lives in Berlin\n", "- a\n", {"deleted_theirs": 1}),
    ("- a\n", "- a\n- b\n", "- a\n- c\n", {}),
])
def test_merge_facts_counts_how_each_clash_was_settled(base, ours, theirs, counts):
    got: dict = {}
    merge_facts(base.encode(), ours.encode(), theirs.encode(), counts=got)
    assert got == counts


@pytest.mark.parametrize("text, blocks", [
    ("- a\n", 0),
    (f"{CONFLICT_START}\n- a\n- b\n{CONFLICT_END}\n", 1),
    (f"  {CONFLICT_START}  \n- a\n{CONFLICT_END}\n{CONFLICT_START}\n- c\n{CONFLICT_END}\n", 2),
    ("<!-- sync conflict: a person's own words -->\n", 1),
    ("- a fact mentioning <!-- sync conflict: x --> inline\n", 0),
])
def test_has_conflicts_counts_the_blocks_a_fact_file_holds(text, blocks):
    assert has_conflicts(text) == blocks


# ---- cron.json ---------------------------------------------------------------------------


def cron(*jobs: dict) -> bytes:
    return (json.dumps({"version": 1, "jobs": list(jobs)}, indent=2) + "\n").encode()


def job(jid: str, **fields) -> dict:
    return {"id": jid, "name": jid, "enabled": True, "message": f"do {jid}",
            "schedule": {"kind": "every", "every_seconds": 3600}, **fields}


def ran(at: str | None) -> dict:
    return {"next_run": None, "last_run": at, "last_status": "ok" if at else None}


CRON = [
    # (name, base, ours, theirs, the merged jobs)
    ("a job added on each side: both kept, ours first",
     [], [job("a")], [job("b")], [job("a"), job("b")]),
    ("deleted on one side, untouched on the other: gone",
     [job("a"), job("b")], [job("b")], [job("a"), job("b")], [job("b")]),
    ("deleted on one side, changed on the other: kept as changed",
     [job("a")], [], [job("a", enabled=False)], [job("a", enabled=False)]),
    ("deleted on both sides: gone", [job("a")], [], [], []),
    ("the definition one side changed wins",
     [job("a")], [job("a", message="new words")], [job("a")], [job("a", message="new words")]),
    ("the definition from ours and the state from theirs, who ran it last",
     [job("a", state=ran(None))], [job("a", enabled=False, state=ran(None))],
     [job("a", state=ran("2030-01-01T10:00:00+00:00"))],
     [job("a", enabled=False, state=ran("2030-01-01T10:00:00+00:00"))]),
    ("the run that is later in time wins, whatever offset each machine wrote",
     [job("a", state=ran(None))],
     [job("a", message="x", state=ran("2030-01-01T08:00:00-05:00"))],      # 13:00 UTC
     [job("a", state=ran("2030-01-01T12:00:00+01:00"))],                   # 11:00 UTC
     [job("a", message="x", state=ran("2030-01-01T08:00:00-05:00"))]),
    ("the definition changed later wins by `updated`, whatever its offset",
     [job("a")],
     [job("a", message="ours", updated="2030-01-01T08:00:00-05:00")],      # 13:00 UTC
     [job("a", message="theirs", updated="2030-01-01T12:00:00+01:00")],    # 11:00 UTC
     [job("a", message="ours", updated="2030-01-01T08:00:00-05:00")]),
]


@pytest.mark.parametrize("name, base, ours, theirs, merged", CRON, ids=[c[0] for c in CRON])
def test_cron_json_is_merged_job_by_job(name, base, ours, theirs, merged):
    got = merge_cron(cron(*base), cron(*ours), cron(*theirs))
    assert json.loads(got)["jobs"] == merged


def test_a_job_changed_both_ways_without_a_way_to_tell_is_the_same_choice_on_every_machine():
    ours, theirs = cron(job("a", host="laptop")), cron(job("a", host="server"))
    here, there = merge_cron(cron(job("a")), ours, theirs), merge_cron(cron(job("a")), theirs, ours)
    assert json.loads(here)["jobs"] == json.loads(there)["jobs"] == [job("a", host="laptop")]


@pytest.mark.parametrize("side", [
    b"not json", b'{"version": 1}', b'{"jobs": [{"name": "no id"}]}', b'{"jobs": {"a": 1}}',
    b'[1, 2]', b'{"jobs": [{"id": ["a list"]}]}', b"\xff\xfe",
])
def test_a_side_that_is_not_a_cron_file_is_not_merged(side):
    assert merge_cron(cron(), cron(job("a")), side) is None
    assert merge_cron(cron(), side, cron(job("a"))) is None


def test_an_empty_side_is_a_cron_file_without_jobs():
    assert json.loads(merge_cron(b"", cron(job("a")), b""))["jobs"] == [job("a")]


# ---- .dream_cursor -----------------------------------------------------------------------


@pytest.mark.parametrize("ours, theirs, ranges", [
    ("1-3\n", "5\n7\n", ["1-3", "5", "7"]),
    ("1-3\n", "5\n", ["1-5"]),              # an old single number: everything up to it
    ("1-3\n", "4-6\n", ["1-6"]),
    ("2\n", "", ["1-2"]),
    ("# a comment\n10-12\n", "11\n", ["1-12"]),
    ("3-1\n", "9\n", ["1-9"]),
])
def test_the_dream_cursor_is_the_union_of_both_sides(ours, theirs, ranges):
    got = merge_set(b"", ours.encode(), theirs.encode()).decode()
    assert [x for x in got.splitlines() if not x.startswith("#")] == ranges


@pytest.mark.parametrize("bad", [b"garbage\n", b"\xff\n"])
def test_a_dream_cursor_that_does_not_parse_is_not_merged(bad):
    assert merge_set(b"", b"1\n", bad) is None
    assert merge_set(b"", bad, b"1\n") is None
