"""Memory search: `agent search`, `agent index`, and `agent.search.index.search` on real vaults."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import date

import pytest

from agent.vault.change import Change
from agent.search import index
from conftest import agent_proc
from helpers import write_import


TALK = [
    {"session": "import/trip", "id": "m1", "ts": "2025-03-02T10:00:00+00:00", "role": "user",
     "speaker": "Ada", "content": "I booked the ferry to Hydra for the second week of April."},
    {"session": "import/trip", "id": "m2", "ts": "2025-03-02T10:01:00+00:00", "role": "assistant",
     "speaker": "Bo", "content": "Lovely. Remember the harbour closes early on Sundays."},
    {"session": "import/trip", "id": "m3", "ts": "2025-06-10T09:00:00+00:00", "role": "user",
     "speaker": "Ada", "content": "The violin teacher moved our lesson to Thursday."},
]


@pytest.fixture
def filled(vault, run, tmp_path):
    """A vault with an imported conversation, a fact, a daily note and an archive entry."""
    r = run("import", str(write_import(tmp_path, TALK)))
    assert r.exit_code == 0, r.output
    with vault.locked():
        text = vault.read_text("MEMORY.md")
        vault.write_text("MEMORY.md", text + "- Allergic to penicillin (told the pharmacist)\n")
        vault.write_text("archive/2025/06/1.md",
                         "---\nid: 1\nsession: import/trip\ncreated: '2025-06-11T08:00:00+00:00'\n"
                         "source:\n  file: sessions/import/trip/2025-03.jsonl\n  from: m1\n"
                         "  through: m2\ntopic: Greek island holiday\nimportance: 0.8\ntokens: 40\n"
                         "---\nAda planned a trip by boat; the port shuts early on Sundays.\n")
        vault.commit(Change("test", "a fact and an archive entry"))
    r = run("note", "bought", "oat", "milk", "and", "saffron")
    assert r.exit_code == 0, r.output
    index.refresh(vault)     # as any search or turn does first (`note` leaves it to them)
    return vault


def ids(hits):
    return [m for h in hits for m in h.message_ids]


def words(hits):
    """The hits that hold a query word (dense retrieval may add hits close in meaning)."""
    return [h for h in hits if h.why != "meaning"]


def first(hits):
    """The ids of the best hit (the messages around a hit follow it, by design)."""
    return hits[0].message_ids if hits else None


# ---- finding each kind ------------------------------------------------------------------

def test_finds_a_message_a_fact_a_note_and_an_archive_summary(filled, run):
    hits = index.search(filled, "when is the ferry to Hydra?")
    top = hits[0]
    assert (top.kind, top.path, top.line) == ("sessions", "sessions/import/trip/2025-03.jsonl", 1)
    assert top.message_ids == ["m1"] and top.speaker == "Ada" and top.session == "import/trip"
    assert top.ts.startswith("2025-03-02T10:00") and "[ferry]" in top.snippet and "[Hydra]" in top.snippet

    fact = index.search(filled, "penicillin")[0]
    lines = (filled.root / "MEMORY.md").read_text().splitlines()
    assert fact.kind == "memory" and fact.path == "MEMORY.md"
    assert lines[fact.line - 1] == "- Allergic to penicillin (told the pharmacist)"

    note = index.search(filled, "saffron")[0]
    assert note.kind == "notes" and note.path.startswith("memory/") and "[saffron]" in note.snippet

    entry = index.search(filled, "port boat", kinds={"archive"})[0]
    assert entry.path == "archive/2025/06/1.md" and entry.topic == "Greek island holiday"
    assert entry.message_ids == ["m1", "m2"]          # the source range it summarises

    r = run("search", "penicillin")
    assert r.exit_code == 0
    assert "MEMORY.md:" in r.output and "[penicillin]" in r.output
    r = run("search", "violin", "lesson")
    assert "sessions/import/trip/2025-06.jsonl:1  2025-06-10 09:00  Ada" in r.output
    assert "[violin] teacher moved our [lesson]" in r.output


def test_no_hits_is_a_clear_message_and_exit_1_as_grep(filled, run):
    r = run("search", "xylophone")
    assert r.exit_code == 1
    assert r.output.strip() == "No matches for 'xylophone'."


def test_a_memory_file_with_a_byte_that_is_not_utf8_is_named_with_the_byte(filled, run):
    # Written by another editor in Latin-1: the search reads the rest and says which
    # file, line and byte it could not read, rather than only "No matches".
    path = filled.root / "MEMORY.md"
    path.write_bytes(path.read_bytes() + b"- Drinks oat milk at the caf\xe9 on Elm street\n")
    lines = path.read_bytes().count(b"\n")
    r = run("search", "xylophone")
    assert r.exit_code == 1
    assert f"MEMORY.md line {lines}: byte 0xe9 is not UTF-8" in r.stderr
    assert r.stdout.strip() == "No matches for 'xylophone'."
    r = run("search", "oat", "milk")
    assert r.exit_code == 0 and "MEMORY.md" in r.stdout and "byte 0xe9" in r.stderr


def test_json_output_is_one_object_per_hit(filled, run):
    r = run("search", "--json", "harbour", "ferry")
    assert r.exit_code == 0
    rows = [json.loads(line) for line in r.output.splitlines()]
    assert {tuple(row["message_ids"]) for row in rows[:2]} == {("m1",), ("m2",)}
    assert {"kind", "path", "line", "ts", "speaker", "session", "snippet", "text", "score"} <= set(rows[0])
    # (By meaning, a made-up word may land near something, labelled so: words only here.)
    r = run("search", "--json", "--mode", "words", "nothingmatchesthis")
    assert r.exit_code == 1 and r.stdout == ""


def test_since_and_in_narrow_the_hits(filled, run):
    both = index.search(filled, "ferry violin")
    assert ids(both)[:2] in (["m1", "m3"], ["m3", "m1"])   # then m2, as m1's neighbour
    later = index.search(filled, "ferry violin", since=date(2025, 5, 1))
    assert [h.message_ids for h in later] == [["m3"]]

    r = run("search", "--since", "2025-05-01", "ferry", "violin")
    assert "2025-06.jsonl:1" in r.output and "2025-03.jsonl" not in r.output
    r = run("search", "--in", "notes", "saffron", "ferry")
    assert r.output.count("memory/") == 1 and "sessions/" not in r.output
    r = run("search", "--in", "memory", "--in", "archive", "penicillin", "boat")
    assert "MEMORY.md" in r.output and "archive/2025/06/1.md" in r.output and "sessions/" not in r.output
    r = run("search", "--in", "letters", "ferry")
    assert r.exit_code == 2 and "letters" in r.output


def test_exclude_ids_leaves_out_messages_already_in_the_window(filled):
    hits = index.search(filled, "ferry harbour Sundays", kinds={"sessions"}, exclude_ids={"m1"})
    assert "m1" not in ids(hits) and "m2" in ids(hits)


# ---- staying current --------------------------------------------------------------------

def test_hand_edits_are_picked_up_before_the_next_search(filled, run):
    assert index.search(filled, "penicillin")
    mem = filled.root / "MEMORY.md"
    mem.write_text(mem.read_text().replace("penicillin", "ibuprofen"))        # not committed
    assert not words(index.search(filled, "penicillin"))     # close in meaning at most
    assert index.search(filled, "ibuprofen")[0].path == "MEMORY.md"

    # A line appended to a session file by hand, then a rewrite of an earlier line.
    session = filled.root / "sessions/import/trip/2025-06.jsonl"
    with open(session, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "m4", "ts": "2025-06-10T09:05:00+00:00", "role": "assistant",
                            "content": "Thursday works; bring the metronome.", "turn": 2}) + "\n")
    assert first(index.search(filled, "metronome")) == ["m4"]
    text = session.read_text().replace("violin", "cello")
    session.write_text(text)
    assert not words(index.search(filled, "violin"))
    assert first(index.search(filled, "cello")) == ["m3"]
    assert first(index.search(filled, "metronome")) == ["m4"]

    # Once committed (by the next agent command) the index still agrees.
    run("note", "practise", "scales")
    assert index.search(filled, "ibuprofen") and not words(index.search(filled, "penicillin"))
    r = run("index", "status")
    assert "up to date" in r.output


def test_a_hand_edit_of_an_earlier_session_line_that_keeps_the_length_is_seen(filled, run):
    session = filled.root / "sessions/import/trip/2025-03.jsonl"
    assert first(index.search(filled, "Hydra", mode="words")) == ["m1"]
    before = session.stat().st_size
    session.write_text(session.read_text().replace("Hydra", "Paros"))      # same length
    assert session.stat().st_size == before
    assert first(index.search(filled, "Paros", mode="words")) == ["m1"]
    assert not index.search(filled, "Hydra", mode="words")
    # And a line appended after it is still read as an append.
    with open(session, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "m9", "ts": "2025-03-02T10:05:00+00:00", "role": "user",
                            "content": "Pack the snorkel.", "turn": 3}) + "\n")
    assert first(index.search(filled, "snorkel", mode="words")) == ["m9"]
    assert first(index.search(filled, "Paros", mode="words")) == ["m1"]


def _bytes_read() -> int:
    """What this process has read so far (Linux: rchar of /proc/self/io)."""
    with open("/proc/self/io", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_a_session_file_that_grew_is_read_from_where_the_index_left_it(vault, run, tmp_path):
    # A month of long messages (about 1 MB), indexed; one line appended: the refresh that
    # follows reads that line (and a few KB before it), not the month again.
    talk = [{"session": "import/long", "id": f"m{i}", "ts": "2025-03-02T10:00:00+00:00",
             "role": "user", "content": f"entry {i} " + "lorem ipsum dolor " * 600}
            for i in range(100)]
    assert run("import", str(write_import(tmp_path, talk))).exit_code == 0
    session = vault.root / "sessions/import/long/2025-03.jsonl"
    assert session.stat().st_size > 1_000_000
    index.refresh(vault)
    with open(session, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "m100", "ts": "2025-03-03T10:00:00+00:00", "role": "user",
                            "content": "Pack the snorkel."}) + "\n")
    before = _bytes_read()
    index.refresh(vault, dirty=["sessions/import/long/2025-03.jsonl"])
    assert _bytes_read() - before < 200_000
    assert first(index.search(vault, "snorkel", mode="words")) == ["m100"]
    assert first(index.search(vault, "entry 99", mode="words"))[0] == "m99"


def _opens(paths: list, action) -> dict:
    """How many times each file was opened while `action` ran (inotify, any process)."""
    import ctypes
    import struct
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    assert fd >= 0
    try:
        # IN_OPEN and IN_CLOSE_NOWRITE: two opens in a row are two events, not one merged.
        watches = {libc.inotify_add_watch(fd, str(p).encode(), 0x20 | 0x10): p for p in paths}
        action()
        counts = dict.fromkeys(paths, 0)
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            data = b""
        at = 0
        while at < len(data):
            wd, mask, _, size = struct.unpack_from("iIII", data, at)
            counts[watches[wd]] += bool(mask & 0x20)
            at += 16 + size
        return counts
    finally:
        os.close(fd)


def test_the_index_reads_each_changed_file_once_through_the_safe_reader(filled):
    # Checked and read are one open descriptor: a file swapped for a link to a secret
    # between a check and a second open by path could not be read into the index.
    rels = ["sessions/import/trip/2025-06.jsonl", "MEMORY.md", "archive/2025/06/1.md"]
    paths = [filled.root / rel for rel in rels]
    with open(paths[0], "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "m5", "ts": "2025-06-10T09:07:00+00:00", "role": "user",
                            "content": "And the rosin.", "turn": 3}) + "\n")
    paths[1].write_text(paths[1].read_text() + "- Plays the cello on Sundays\n")
    paths[2].write_text(paths[2].read_text().replace("boat", "ferry boat"))
    counts = _opens(paths, lambda: index.refresh(filled, dirty=rels))
    assert list(counts.values()) == [1, 1, 1]
    assert first(index.search(filled, "rosin", mode="words")) == ["m5"]
    assert index.search(filled, "cello Sundays", mode="words")[0].path == "MEMORY.md"
    assert index.search(filled, "ferry boat", kinds={"archive"}, mode="words")


def _seen(vault) -> bool:
    """Whether the index holds a record of the tree that lets a search skip git."""
    import sqlite3
    db = sqlite3.connect(index.db_path(vault))
    try:
        row = db.execute("SELECT value FROM meta WHERE key='seen'").fetchone()
    finally:
        db.close()
    return bool(row and row[0])


def _past_racy_window():
    # The window is wall time by design and a file's ctime cannot be set back, so only
    # waiting it out makes the files old enough for a record to be kept.
    time.sleep(index.RACY_NS / 1e9 + 0.2)


def _settled(vault):
    """Files older than the racy window, and a search that records the tree."""
    _past_racy_window()
    index.search(vault, "ferry", mode="words")
    assert _seen(vault)


def test_a_search_after_a_commit_walks_no_tree_and_the_next_at_that_head_does(filled, run):
    _past_racy_window()
    assert run("note", "call", "the", "plumber").exit_code == 0     # a commit, as a turn's
    index.search(filled, "plumber", mode="words")
    assert not _seen(filled)            # its record would be stale at the next commit
    _past_racy_window()
    index.search(filled, "plumber", mode="words")
    assert _seen(filled)                # searches follow one another: the next skips git
    assert index.search(filled, "plumber", mode="words")[0].path.startswith("memory/")


@pytest.mark.slow
def test_a_search_that_skips_git_still_sees_every_kind_of_hand_change(filled, run):
    mem = filled.root / "MEMORY.md"
    # HEAD's branch packed (as `git gc` leaves it); the hand commit below makes it loose.
    subprocess.run(["git", "pack-refs", "--all"], cwd=filled.root, check=True, capture_output=True)
    _settled(filled)
    assert index.search(filled, "penicillin", mode="words")      # nothing changed: same answer
    # An edit in place that keeps the file's size.
    mem.write_text(mem.read_text().replace("penicillin", "ampicillin"))
    assert index.search(filled, "ampicillin", mode="words")[0].path == "MEMORY.md"
    assert not index.search(filled, "penicillin", mode="words")
    # A new file in a new folder, not committed.
    _settled(filled)
    (filled.root / "garden").mkdir()
    (filled.root / "garden" / "beds.md").write_text("Plant the kohlrabi in May.\n")
    assert index.search(filled, "kohlrabi", mode="words")[0].path == "garden/beds.md"
    # A folder git ignored, then no longer.
    _settled(filled)
    (filled.root / ".gitignore").write_text("private/\n")
    (filled.root / "private").mkdir()
    (filled.root / "private" / "x.md").write_text("The quince tree is secret.\n")
    assert not index.search(filled, "quince", mode="words")
    _settled(filled)
    (filled.root / ".gitignore").write_text("other/\n")
    assert index.search(filled, "quince", mode="words")[0].path == "private/x.md"
    # Committed by hand with git, then the file put back as it was: HEAD moved.
    _settled(filled)
    subprocess.run(["git", "add", "-A"], cwd=filled.root, check=True, capture_output=True)
    subprocess.run(["git", "commit", "-qm", "by hand"], cwd=filled.root, check=True, capture_output=True)
    subprocess.run(["git", "rm", "-q", "garden/beds.md"], cwd=filled.root, check=True, capture_output=True)
    assert not index.search(filled, "kohlrabi", mode="words")
    _settled(filled)
    subprocess.run(["git", "checkout", "-q", "HEAD", "--", "garden/beds.md"], cwd=filled.root, check=True,
                   capture_output=True)
    assert index.search(filled, "kohlrabi", mode="words")
    assert "up to date" in run("index", "status").output


def test_a_file_put_back_as_committed_is_picked_up(filled):
    mem = filled.root / "MEMORY.md"
    committed = mem.read_text()
    mem.write_text(committed + "- Plays the oboe\n")
    assert index.search(filled, "oboe")
    mem.write_text(committed)          # back to HEAD: neither dirty nor changed in git now
    assert not words(index.search(filled, "oboe"))


def test_undo_is_picked_up(filled, run):
    run("note", "the", "quokka", "photo")
    assert index.search(filled, "quokka")
    r = run("undo")
    assert r.exit_code == 0, r.output
    assert not words(index.search(filled, "quokka"))
    assert index.search(filled, "saffron")             # the earlier note is still there


def test_undo_of_an_import_drops_its_messages(vault, run, tmp_path):
    run("import", str(write_import(tmp_path, TALK[:1])))
    run("import", str(write_import(tmp_path, TALK[1:2], "more.jsonl")))
    assert set(ids(index.search(vault, "harbour ferry"))) == {"m1", "m2"}
    assert run("undo").exit_code == 0
    assert ids(index.search(vault, "harbour ferry")) == ["m1"]


def test_deleting_the_state_folder_is_harmless(filled, run):
    index.search(filled, "ferry")
    shutil.rmtree(filled.root / ".agent")
    r = run("index", "status")
    assert r.exit_code == 0 and "No index yet" in r.output
    r = run("search", "ferry")
    assert r.exit_code == 0 and "2025-03.jsonl:1" in r.output
    assert (filled.root / ".agent" / "index.sqlite").exists()


def test_a_damaged_index_file_is_rebuilt(filled):
    index.search(filled, "ferry")
    for suffix in ("-wal", "-shm"):
        (filled.root / f".agent/index.sqlite{suffix}").unlink(missing_ok=True)
    (filled.root / ".agent/index.sqlite").write_bytes(b"this is not a database" * 100)
    assert first(index.search(filled, "ferry")) == ["m1"]


def test_index_status_and_rebuild(filled, run):
    run("search", "ferry")
    r = run("index", "status")
    assert r.exit_code == 0
    head = filled.head()[:7]
    assert f"commit:     {head} (HEAD {head})" in r.output
    assert "documents:  6 (sessions 3, memory 1, notes 1, archive 1)" in r.output
    (filled.root / "USER.md").write_text("# User\n\n- Prefers tea\n")
    r = run("index", "status")
    assert "0 commits and 1 file behind (USER.md)" in r.output
    r = run("index", "rebuild")
    assert r.exit_code == 0 and r.output.startswith("Indexed 7 documents")
    assert "up to date" in run("index", "status").output


def test_a_broken_session_line_does_not_stop_search(filled):
    session = filled.root / "sessions/import/trip/2025-06.jsonl"
    with open(session, "a", encoding="utf-8") as f:
        f.write("{not json\n")
        f.write(json.dumps({"id": "m9", "ts": "2025-06-11T09:00:00+00:00", "role": "user",
                            "content": "the tuba arrived", "turn": 3}) + "\n")
    assert first(index.search(filled, "tuba")) == ["m9"]


# ---- languages and hostile queries ------------------------------------------------------

def test_chinese_and_japanese_two_character_words_are_found(vault, run, tmp_path):
    talk = [
        {"session": "import/zh", "id": "z1", "ts": "2025-01-05T08:00:00+08:00", "role": "user",
         "content": "我明天要去北京开会，然后买咖啡豆。"},
        {"session": "import/zh", "id": "z2", "ts": "2025-01-05T08:01:00+08:00", "role": "assistant",
         "content": "好的，记得带上你的 MacBook 充电器。"},
        {"session": "import/ja", "id": "j1", "ts": "2025-01-06T09:00:00+09:00", "role": "user",
         "content": "来週の金曜日に東京タワーへ行きます。"},
        {"session": "import/ja", "id": "j2", "ts": "2025-01-06T09:01:00+09:00", "role": "user",
         "content": "ｶﾀｶﾅの半角テキストもあります。"},
    ]
    run("import", str(write_import(tmp_path, talk)))
    assert first(index.search(vault, "北京")) == ["z1"]           # a word inside a sentence
    assert first(index.search(vault, "咖啡")) == ["z1"]
    assert first(index.search(vault, "豆")) == ["z1"]            # one character, ending a run
    assert first(index.search(vault, "充电器")) == ["z2"]
    assert first(index.search(vault, "macbook 充电")) == ["z2"]   # mixed Chinese and English
    assert first(index.search(vault, "東京")) == ["j1"]
    assert first(index.search(vault, "金曜日")) == ["j1"]
    assert first(index.search(vault, "カタカナ")) == ["j2"]        # half-width written, full-width asked
    assert not words(index.search(vault, "上海"))
    r = run("search", "北京")
    assert "[北京]" in r.output


HOSTILE = ['"ferry', 'ferry"', 'ferry AND', 'AND OR NOT', 'NOT ferry', 'ferry NEAR/2 Hydra',
           'NEAR(ferry Hydra)', 'ferr*', '*', '-ferry', 'ferry -Hydra', '^ferry', '(ferry',
           'ferry)', 'body:ferry', '{ferry}', 'ferry + Hydra', "ferry's", '\\', "'", '""',
           'ferry; DROP TABLE docs;--', '%', '_', ':', 'ferry:', '‘ferry’', '#ferry', 'f\x00erry']


@pytest.mark.parametrize("query", HOSTILE)
def test_query_syntax_is_taken_as_text(filled, query):
    hits = index.search(filled, query)          # never raises
    if "ferry" in query.lower() and "f\x00" not in query:
        assert "m1" in ids(hits)                # operators never exclude or reinterpret words


def test_hostile_queries_through_the_cli(filled, run):
    for q in ('NOT ferry', 'ferry AND -Hydra', '"unbalanced (paren', 'NEAR(x y)', '^*:'):
        r = run("search", "--", q)
        assert r.exit_code in (0, 1) and "Traceback" not in r.output, (q, r.output)
    assert "[ferry]" in run("search", "--", "NOT ferry").output
    r = run("search", "--", "-Hydra")
    assert "[Hydra]" in r.output


def test_stop_words_only_query_still_searches(filled):
    assert index.search(filled, "the") is not None
    # "say" is how the question is put (QUESTION_WORDS), not what it asks about.
    assert index.query_terms("what did we say about the ferry?") == ["ferry"]


# ---- start-up cost ----------------------------------------------------------------------

def test_search_does_not_import_anthropic(filled):
    code = ("import sys\nfrom agent.cli.app import cli\n"
            "try:\n    cli(['--vault', sys.argv[1], 'search', 'ferry'])\n"
            "except SystemExit:\n    pass\n"
            "bad = [m for m in ('anthropic', 'croniter', 'yaml', 'frontmatter') if m in sys.modules]\n"
            "print('LOADED', bad)\n")
    p = subprocess.run([sys.executable, "-c", code, str(filled.root)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "2025-03.jsonl:1" in p.stdout and "LOADED []" in p.stdout


def test_search_as_a_separate_process(filled):
    p = agent_proc("search", "--json", "violin", vault=filled.root)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[0])["message_ids"] == ["m3"]


RACE = """
import sys, threading
from pathlib import Path
from agent.search import index
from agent.vault.repo import Vault
vault = Vault(Path(sys.argv[1]))
failed = []
for _ in range(30):
    index._remove_db(index.db_path(vault))
    gate = threading.Barrier(4)
    def search():
        gate.wait()
        try:
            hits = index.search(vault, "plumber")
            assert [h.path for h in hits] == ["MEMORY.md"], hits
        except Exception as e:
            failed.append(repr(e))
    threads = [threading.Thread(target=search) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
print(len(failed), failed[:3])
"""


def test_threads_that_make_the_index_at_once_all_find_what_it_holds(vault):
    # `agent serve` runs two conversations' first turns at once: each searches a vault
    # whose index is not made yet. In a process of its own: the race crashed it (SIGBUS).
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- The plumber comes on Tuesday.\n",
                                          encoding="utf-8")
    r = subprocess.run([sys.executable, "-c", RACE, str(vault.root)], capture_output=True,
                       text=True, env={**os.environ, "AGENT_EMBED": "off"}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split(maxsplit=1)[0] == "0", r.stdout


# ---- import: a byte order mark, an empty file ----------------------------------------


def test_import_accepts_a_byte_order_mark_and_names_an_empty_file(vault, run, tmp_path):
    f = tmp_path / "bom.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps({"session": "telegram/me", "role": "user",
                                                 "content": "hi", "ts": "2024-03-01T10:00:00+09:00",
                                                 "id": "t1"}).encode() + b"\n")
    r = run("import", str(f))
    assert r.exit_code == 0 and "Imported 1 message into 1 session" in r.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    r = run("import", str(empty))
    assert r.exit_code == 0 and "Nothing to import: empty.jsonl is empty." in r.output


def test_search_until_a_moment_keeps_that_second_and_no_match_exits_1(vault, run, tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(m) + "\n" for m in [
        {"session": "import/x", "role": "user", "content": "the walrus sings at dawn",
         "ts": "2026-11-24T01:48:27+00:00", "id": "a"},
        {"session": "import/x", "role": "assistant", "content": "a walrus sings at noon",
         "ts": "2026-11-24T01:48:28+00:00", "id": "b"}]))
    assert run("import", str(src)).exit_code == 0
    for until in ("2026-11-24T01:48:27+00:00", "2026-11-24T02:48:27+01:00"):
        r = run("search", "--mode", "words", "--json", "--until", until, "walrus")
        assert r.exit_code == 0, r.output
        assert [json.loads(x)["message_ids"] for x in r.output.splitlines()] == [["a"]]
    r = run("search", "--mode", "words", "--json", "--since", "2026-11-24T01:48:28+00:00", "walrus")
    assert [json.loads(x)["message_ids"] for x in r.output.splitlines()] == [["b"]]
    r = run("search", "--mode", "words", "--until", "2026-11-24", "walrus")
    assert r.exit_code == 0 and "dawn" in r.output and "noon" in r.output
    r = run("search", "--mode", "words", "--until", "2026-11-24T01:48:26Z", "walrus")
    assert r.exit_code == 1
    assert "No matches for 'walrus' until 2026-11-24T01:48:26+00:00." in r.output
    assert run("search", "xylophone").exit_code == 1


def test_an_archive_summary_lifts_the_messages_it_covers(vault, run, tmp_path):
    from dataclasses import replace
    talk = [{"session": "import/isle", "id": "k1", "ts": "2025-03-02T10:00:00+00:00",
             "role": "user", "content": "We took the ferry at dawn, tired but happy."},
            {"session": "import/isle", "id": "k2", "ts": "2025-05-02T10:00:00+00:00",
             "role": "user", "content": "Ferry timetable changed."}]
    assert run("import", str(write_import(tmp_path, talk))).exit_code == 0
    with vault.locked():
        vault.write_text("archive/2025/03/1.md",
                         "---\nid: 1\nsession: import/isle\ncreated: '2025-03-03T08:00:00+00:00'\n"
                         "source:\n  file: sessions/import/isle/2025-03.jsonl\n  from: k1\n"
                         "  through: k1\ntopic: Island holiday\nimportance: 0.5\ntokens: 20\n"
                         "---\nAda's island holiday: the dawn ferry to Hydra.\n")
        vault.commit(Change("test", "an archive entry"))
    messages = lambda hits: [m for h in hits if h.kind == "sessions" for m in h.message_ids]
    # The shorter message ranks first by its words alone; the summary that covers the
    # other is a second key to it.
    plain = replace(index.RANKING, keys=0.0)
    assert messages(index.search(vault, "island ferry", mode="words", ranking=plain)) == ["k2", "k1"]
    assert messages(index.search(vault, "island ferry", mode="words")) == ["k1", "k2"]


def test_a_question_naming_a_day_ranks_what_was_said_that_day_first(vault, run, tmp_path):
    # Both messages fall in the days a dated question looks around (plans a few days
    # before, reports after); the one said on the very day named comes first, though
    # the other is newer and as close in words.
    talk = [{"session": "import/diary", "id": "d1", "ts": "2023-06-03T19:00:00+00:00",
             "role": "user", "content": "Cooked a new pasta recipe tonight."},
            {"session": "import/diary", "id": "d2", "ts": "2023-06-05T19:00:00+00:00",
             "role": "user", "content": "Cooked a new curry recipe tonight."}]
    assert run("import", str(write_import(tmp_path, talk))).exit_code == 0
    for question in ("What recipe did I cook on 3 June, 2023?", "what recipe on 2023-06-03"):
        r = run("search", "--mode", "words", "--json", question)
        assert r.exit_code == 0, r.output
        assert [json.loads(x)["message_ids"] for x in r.output.splitlines()] == [["d1"], ["d2"]]


def test_the_words_a_question_is_put_in_do_not_rank_the_answer(vault, run, tmp_path):
    # "What kind of ..." asks about music, not kindness (porter makes both "kind").
    talk = [{"session": "import/chat", "id": "m1", "ts": "2024-02-01T10:00:00+00:00",
             "role": "user", "content": "Jazz is the music I grew up with."},
            {"session": "import/chat", "id": "m2", "ts": "2024-02-03T10:00:00+00:00",
             "role": "user", "content": "So kind of you to share that music playlist, such kindness."}]
    assert run("import", str(write_import(tmp_path, talk))).exit_code == 0
    r = run("search", "--mode", "words", "--json", "What kind of music does Sam like?")
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["message_ids"] for x in r.output.splitlines()][0] == ["m1"]
    # A query of such words alone still searches them.
    r = run("search", "--mode", "words", "--json", "kind")
    assert [json.loads(x)["message_ids"] for x in r.output.splitlines()] == [["m2"]]


def test_a_message_that_asks_ranks_under_one_that_tells(vault, run, tmp_path):
    # Both hold the query's words, the question a little more densely; the answer is
    # in the message that says it. The question's reply still comes under it as its context.
    talk = [{"session": "import/chat", "id": "q1", "ts": "2024-05-01T10:00:00+00:00",
             "role": "assistant", "content": "Nice! Which bicycle shop did you pick in the end?"},
            {"session": "import/chat", "id": "q2", "ts": "2024-05-01T10:01:00+00:00",
             "role": "user", "content": "Still deciding."},
            {"session": "import/chat", "id": "t1", "ts": "2024-05-09T10:00:00+00:00",
             "role": "user", "content": "I picked the bicycle shop by the station, they "
                                        "fixed my brakes."}]
    assert run("import", str(write_import(tmp_path, talk))).exit_code == 0
    r = run("search", "--mode", "words", "--json", "Which bicycle shop?")
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.output.splitlines()]
    assert [row["message_ids"] for row in rows] == [["t1"], ["q1"]]
    assert [c["message_ids"] for c in rows[1]["context"]] == [["q2"]]


def test_a_message_that_asks_in_chinese_ranks_under_one_that_tells(vault, run, tmp_path):
    # Full-width question marks, and no spaces to count words by.
    talk = [{"session": "import/chat", "id": "q1", "ts": "2024-05-01T10:00:00+00:00",
             "role": "assistant", "content": "你最后选了哪家自行车店？"},
            {"session": "import/chat", "id": "t1", "ts": "2024-05-09T10:00:00+00:00",
             "role": "user", "content": "我选了车站旁边那家自行车店，老板还修好了刹车。"}]
    assert run("import", str(write_import(tmp_path, talk))).exit_code == 0
    r = run("search", "--mode", "words", "--json", "自行车店")
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["message_ids"] for x in r.output.splitlines()] == [["t1"], ["q1"]]
