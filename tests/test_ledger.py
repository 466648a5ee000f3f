"""The dream ledger (agent/stores/ledger.py) as tables: which records are read from
`.dream_ledger.jsonl`, which edit a fact line came from, which proposals still wait."""

from __future__ import annotations

import pytest

from agent.stores import ledger
from agent.stores.ledger import LEDGER, dumps


def written(tmp_path, text: str):
    (tmp_path / LEDGER).write_text(text, encoding="utf-8")
    return tmp_path


EDIT = {"run": "1..3", "op": "add", "file": "MEMORY.md", "line": "- likes tea"}

READS = [
    # (name, the file's text, the records read)
    ("one record a line", dumps(EDIT) + "\n" + dumps({**EDIT, "run": "4..5"}) + "\n",
     [EDIT, {**EDIT, "run": "4..5"}]),
    ("no file", None, []),
    ("blank lines and a torn last line skipped",
     "\n" + dumps(EDIT) + "\n\n" + '{"run": "4..5", "op"', [EDIT]),
    ("a line that is JSON but not an object skipped", '[1, 2]\n"text"\n' + dumps(EDIT) + "\n", [EDIT]),
    ("a last line without its newline read", dumps(EDIT), [EDIT]),
    ("CRLF line ends", dumps(EDIT) + "\r\n" + dumps(EDIT) + "\r\n", [EDIT, EDIT]),
    # JSON keeps U+2028, U+0085 and U+001C raw inside strings: they end no record.
    ("a fact holding a Unicode line separator is one record",
     dumps({**EDIT, "line": "- tea\u2028coffee\x85milk\x1cwater"}) + "\n",
     [{**EDIT, "line": "- tea\u2028coffee\x85milk\x1cwater"}]),
    ("bytes that are not UTF-8 replaced, the rest read",
     None, [{**EDIT, "line": "- caf\ufffd"}]),
]


@pytest.mark.parametrize("name, text, records", READS, ids=[r[0] for r in READS])
def test_read_returns_every_record_it_can(tmp_path, name, text, records):
    if name.startswith("bytes"):
        (tmp_path / LEDGER).write_bytes(dumps({**EDIT, "line": "- caf"}).encode()[:-2]
                                        + b'\xe9"}\n')
    elif text is not None:
        written(tmp_path, text)
    assert ledger.read(tmp_path) == records


def test_dumps_is_one_line_of_compact_json_keeping_non_ascii():
    assert dumps({"line": "- café\n2", "n": 1}) == '{"line":"- café\\n2","n":1}'


PROPOSAL = {"run": "1..3", "n": 1, "status": "proposed", "file": "MEMORY.md", "line": "- a"}
ACCEPTED = {"run": "1..3", "n": 1, "decision": "accepted", "line": "- a"}
REJECTED = {"run": "1..3", "n": 2, "decision": "rejected"}
SECOND = {**PROPOSAL, "n": 2, "line": "- b"}
OTHER_RUN = {**PROPOSAL, "run": "4..5"}

PENDING = [
    # (name, records, the proposals still waiting)
    ("none", [], []),
    ("one waiting", [PROPOSAL], [PROPOSAL]),
    ("accepted: no longer waiting", [PROPOSAL, ACCEPTED], []),
    ("a decision before its proposal (a merge's order) counts", [ACCEPTED, PROPOSAL], []),
    ("rejected one of two", [PROPOSAL, SECOND, REJECTED], [PROPOSAL]),
    ("the same number in another run is another proposal", [PROPOSAL, OTHER_RUN, ACCEPTED],
     [OTHER_RUN]),
    ("recorded twice by a union merge: once", [PROPOSAL, PROPOSAL], [PROPOSAL]),
    ("a decision of another word is no decision",
     [PROPOSAL, {**ACCEPTED, "decision": "maybe"}], [PROPOSAL]),
    ("an applied edit is not a proposal", [EDIT], []),
    # A hand-mangled (or hostile, synced from a remote) record never breaks the review.
    ("a record whose run or number is a list or an object",
     [{**PROPOSAL, "n": [1]}, {**PROPOSAL, "run": {"a": 1}}, {**ACCEPTED, "n": [1]}, SECOND],
     [SECOND]),
]


@pytest.mark.parametrize("name, records, waiting", PENDING, ids=[p[0] for p in PENDING])
def test_proposals_are_those_without_a_decision_oldest_first(name, records, waiting):
    assert ledger.proposals(records) == waiting


@pytest.mark.parametrize("run, n, found", [
    ("1..3", 1, PROPOSAL), ("1..3", 2, SECOND), ("1..3", 3, None), ("9..9", 1, None),
])
def test_proposal_finds_a_proposal_by_run_and_number(run, n, found):
    assert ledger.proposal([EDIT, PROPOSAL, SECOND, ACCEPTED], run, n) == found


def test_decision_is_the_newest_for_that_proposal():
    again = {**ACCEPTED, "decision": "rejected"}
    assert ledger.decision([ACCEPTED, again, PROPOSAL], "1..3", 1) == again
    assert ledger.decision([ACCEPTED], "1..3", 2) is None


NEWER = {**EDIT, "run": "4..5", "op": "update", "old": "- likes coffee"}
FOR_LINE = [
    # (name, run, file, line, the record found)
    ("the newest edit that wrote the line", None, "MEMORY.md", "- likes tea", NEWER),
    ("of one run", "1..3", "MEMORY.md", "- likes tea", EDIT),
    ("surrounding spaces ignored", None, "MEMORY.md", "  - likes tea \n", NEWER),
    ("another file", None, "USER.md", "- likes tea", None),
    ("a line no dream wrote", None, "MEMORY.md", "- likes cake", None),
    ("a proposal or a decision is not an edit a dream made", None, "MEMORY.md", "- a", None),
]


@pytest.mark.parametrize("name, run, file, line, found", FOR_LINE, ids=[f[0] for f in FOR_LINE])
def test_for_line_finds_the_edit_that_wrote_a_fact(tmp_path, name, run, file, line, found):
    records = [EDIT, PROPOSAL, ACCEPTED, NEWER]
    assert ledger.for_line(tmp_path, run, file, line, records) == found
    written(tmp_path, "".join(dumps(r) + "\n" for r in records))
    assert ledger.for_line(tmp_path, run, file, line) == found        # read from the file


@pytest.mark.parametrize("name, records, waiting", PENDING, ids=[p[0] for p in PENDING])
def test_waiting_reads_the_proposals_that_wait_from_the_file(tmp_path, name, records, waiting):
    written(tmp_path, "".join(dumps(r) + "\n" for r in [EDIT, *records, NEWER]))
    assert ledger.waiting(tmp_path) == waiting


def test_waiting_sees_a_proposal_and_a_decision_written_with_escapes(tmp_path):
    # Only lines that can be a proposal or a decision are parsed (a ledger is mostly
    # edits): one whose words are spelled with JSON escapes still counts.
    escaped = (dumps(PROPOSAL).replace('"proposed"', '"propos\\u0065d"') + "\n"
               + dumps(SECOND) + "\n"
               + dumps(REJECTED).replace('"decision"', '"\\u0064ecision"') + "\n")
    assert ledger.read(written(tmp_path, escaped))[0]["status"] == "proposed"
    assert ledger.waiting(tmp_path) == [PROPOSAL]
