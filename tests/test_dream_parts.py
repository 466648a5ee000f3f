"""The dream's parts that need no server: choosing entries, chunking, prompts, reply
checks, the apply step and the price estimate."""

from __future__ import annotations

import json

import pytest

from agent.stores import archive
from agent.dream import prompts, reading
from agent.dream.cost import estimate, prices
from agent.dream.edits import apply_ops
from agent.llm.records import END, MAX_TOKENS, REFUSAL, CacheHint, Reply, Text
from agent.llm.structured import plain
from dreamkit import ANALYST_SCHEMA, EDITOR_SCHEMA, finding, op, write_entries


# ---- choosing and chunking entries -------------------------------------------------------


def test_select_sets_aside_heartbeat_and_dream_sessions_but_covers_them(vault):
    write_entries(vault, ["a", {"summary": "hb", "session": "heartbeat/morning"}, "b",
                          {"summary": "d", "session": "dream/nightly"}])
    sel = reading.select(vault.root, archive.Consolidated.parse('0'))
    assert [e.id for e in sel.entries] == [1, 3]
    assert [e.id for e in sel.skipped] == [2, 4]
    assert (sel.first, sel.through) == (1, 4)
    assert reading.select(vault.root, archive.Consolidated.parse('4')).empty
    bounded = reading.select(vault.root, archive.Consolidated.parse('1'), max_entries=2)
    assert [e.id for e in bounded.entries] == [3] and bounded.through == 3


def test_chunks_respect_the_token_budget_and_keep_order():
    lines = [(i, "x" * 400) for i in range(1, 8)]          # about 100 tokens each
    chunks = reading.chunk(lines, 250)
    assert [c.ids for c in chunks] == [[1, 2], [3, 4], [5, 6], [7]]
    assert [c.custom_id for c in chunks] == ["analyst-1-2", "analyst-3-4", "analyst-5-6", "analyst-7-7"]
    assert all(c.tokens <= 250 for c in chunks)
    big = reading.chunk([(1, "y" * 4000), (2, "z")], 250)     # too big alone: goes alone
    assert [c.ids for c in big] == [[1], [2]]


def test_raw_messages_stay_within_their_budget(vault):
    write_entries(vault, [{"summary": "s", "message": "w" * 1000}], messages_per_entry=6)
    entry = reading.select(vault.root, archive.Consolidated.parse('0')).entries[0]
    cache = reading.SessionCache(vault.root)
    obj = json.loads(reading.render_entry(entry, cache, raw_tokens=500))
    assert sum(len(m["text"]) for m in obj["messages"]) <= 500 * 4 + 10
    assert obj["messages_left_out"] == 4
    assert "messages" not in json.loads(reading.render_entry(entry, cache, raw_tokens=0))


def test_an_entry_spanning_two_month_files_gets_both_ranges(vault):
    from agent.stores import archive
    nov, dec = "sessions/cli/default/2026-11.jsonl", "sessions/cli/default/2026-12.jsonl"
    line = '{{"id":"{0}","ts":"2026-11-30T23:59:00+00:00","role":"user","content":"{0} text","turn":1}}'
    vault.append_lines(nov, [line.format(i) for i in ("a", "b", "c")])
    vault.append_lines(dec, [line.format(i) for i in ("d", "e")])
    meta = {"session": "cli/default", "created": "2026-12-01T00:10:00+00:00",
            "source": [{"file": nov, "from": "b", "through": "c"},
                       {"file": dec, "from": "d", "through": "d"}]}
    vault.write_text("archive/2026/12/1.md", archive.render(1, meta, "s"))
    entry = reading.select(vault.root, archive.Consolidated.parse('0')).entries[0]
    obj = json.loads(reading.render_entry(entry, reading.SessionCache(vault.root)))
    assert [m["text"] for m in obj["messages"]] == ["b text", "c text", "d text"]


def test_a_missing_session_file_does_not_stop_the_dream(vault):
    write_entries(vault, ["s"])
    (vault.root / "sessions/cli/default/2026-11.jsonl").unlink()
    entry = reading.select(vault.root, archive.Consolidated.parse('0')).entries[0]
    obj = json.loads(reading.render_entry(entry, reading.SessionCache(vault.root)))
    assert obj["messages"] == [] and "is missing" in obj["messages_unavailable"]
    assert obj["summary"] == "s"


def test_entry_data_cannot_close_its_tag():
    line = reading.data_json({"summary": "</archive_data> & <findings>"})
    assert "<" not in line and ">" not in line and "&" not in line
    assert json.loads(line)["summary"] == "</archive_data> & <findings>"


# ---- prompts ----------------------------------------------------------------------------


def test_both_phases_start_with_the_same_cached_bytes():
    memory = prompts.memory_block("# Memory\n\n## Facts\n- a\n", "# User\n")
    c = reading.chunk([(5, reading.data_json({"id": 5})), (6, reading.data_json({"id": 6}))], 1000)[0]
    a = prompts.analyst_request(memory, c, "2026-11-20")
    e = prompts.editor_request(memory, [finding("f")], 5, 6, "2026-11-20", 200, 4)
    assert a.system == e.system
    assert a.messages[0].blocks[0] == e.messages[0].blocks[0]
    assert a.system[0].cache == CacheHint(ttl="1h")
    assert a.messages[0].blocks[0].cache == CacheHint(ttl="1h")
    assert "4\t- a\n" in memory
    assert "Today is 2026-11-20" in a.messages[0].blocks[1].text
    assert "budget of 200 lines and has 4 now" in e.messages[0].blocks[1].text
    # The schemas, and their bounds for a local server's grammar: as many findings as
    # the two entries may hold, as many edits as the one finding may take.
    assert plain(a.schema) == ANALYST_SCHEMA and plain(e.schema) == EDITOR_SCHEMA
    assert a.schema["properties"]["findings"]["maxItems"] == 4 * 2 + 3
    assert e.schema["properties"]["ops"]["maxItems"] == 1 + 3


# ---- replies ----------------------------------------------------------------------------


def message(text, stop=END):
    return Reply([Text(text)], stop_reason=stop)


def test_replies_are_checked_against_the_schema():
    good = {"findings": [finding("x", date="2026-12-03")]}
    assert prompts.parse_reply(message(json.dumps(good)), prompts.AnalystReply) == good
    cases = {
        json.dumps({"findings": [dict(finding("x"), kind="guess")]}): "is not one of",
        json.dumps({"findings": [dict(finding("x"), extra=1)]}): "unexpected 'extra'",
        json.dumps({"ops": [{"op": "add"}]}): "missing 'file'",
        json.dumps({"ops": [op("add", new=3)]}): "expected a string",
        "[1, 2": "not JSON",
        "": "holds no text",
    }
    for text, says in cases.items():
        schema = prompts.EditorReply if "ops" in text else prompts.AnalystReply
        with pytest.raises(prompts.ReplyError, match=says):
            prompts.parse_reply(message(text), schema)
    with pytest.raises(prompts.ReplyError, match="max_tokens"):
        prompts.parse_reply(message('{"findings": []}', MAX_TOKENS), prompts.AnalystReply)
    with pytest.raises(prompts.ReplyError, match="declined"):
        prompts.parse_reply(message("", REFUSAL), prompts.AnalystReply)


def test_relative_dates_do_not_reach_the_editor():
    out = prompts.clean_findings([finding("a", date="next Friday"), finding("b", date="2026-12-03")])
    assert [f["date"] for f in out] == ["", "2026-12-03"]


def test_a_finding_said_again_reaches_the_editor_once():
    # A small model held to its list's bounds fills the list with the same finding.
    said = [finding("Ana lives in Porto."), finding("Ana  lives in\nPorto."),
            finding("Ana lives in Porto.", file="USER.md"), finding("Ana lives in Porto.")]
    out = prompts.clean_findings(said)
    assert [(f["file"], f["statement"]) for f in out] == [
        ("MEMORY.md", "Ana lives in Porto."), ("USER.md", "Ana lives in Porto.")]


# ---- the apply step ----------------------------------------------------------------------

MEMORY = "# Memory\n\nIntro paragraph  \nwith trailing spaces.\n\n## Facts\n\n* Uses star bullets\n- Likes Postgres\n\n## Work\n- At Acme\n"
USER = "# User\r\n\r\n## About\r\n- Lives in Berlin\r\n- Prefers tea\r\n- Has a cat\r\n- Runs on Sundays\r\n"


def apply(ops, **kw):
    return apply_ops({"MEMORY.md": MEMORY, "USER.md": USER}, ops, **kw)


def test_add_goes_under_its_heading_and_keeps_every_other_byte():
    a = apply([op("add", section="Facts", new="Flies to Kyoto on 2026-12-03"),
               op("add", section="## work", new="- Team of five")])
    assert a.texts["MEMORY.md"] == MEMORY.replace(
        "- Likes Postgres\n", "- Likes Postgres\n- Flies to Kyoto on 2026-12-03\n") + "- Team of five\n"
    assert a.texts["USER.md"] == USER
    assert a.changed == ["MEMORY.md"] and a.added == 2


def test_add_creates_a_missing_heading_and_fills_an_empty_one():
    a = apply_ops({"MEMORY.md": "# Memory\n\n## Facts\n## Later\n- x\n", "USER.md": "# User"},
                  [op("add", section="Facts", new="a"), op("add", section="Travel", new="b"),
                   op("add", "USER.md", section="About", new="c")])
    assert a.texts["MEMORY.md"] == "# Memory\n\n## Facts\n\n- a\n\n## Later\n- x\n\n## Travel\n\n- b\n"
    assert a.texts["USER.md"] == "# User\n\n## About\n\n- c\n"


def test_adds_find_their_section_after_edits_above_moved_it():
    # Each add goes under its heading wherever earlier edits of the run moved it: a
    # conflict block settled into one line, a line deleted, a section made, a subsection.
    text = ("# Memory\n\n## Home\n<!-- sync conflict: MEMORY.md changed on two machines -->\n"
            "- Lives in Berlin\n- Lives in Lisbon\n<!-- end of sync conflict -->\n- Has a cat\n\n"
            "## Work\n- At Acme\n- Team of five\n\n### Projects\n- Builds a shed\n\n"
            "## Travel\n- Flies often\n")
    a = apply_ops({"MEMORY.md": text, "USER.md": ""}, [
        op("update", old="- Lives in Berlin", new="Lives in Lisbon"),
        op("delete", old="- Team of five"),
        op("add", section="Travel", new="Flies to Kyoto on 2026-12-03"),
        op("add", section="Home", new="Has a garden"),
        op("add", section="Work", new="Works from home on Fridays"),
        op("add", section="Projects", new="Paints the fence"),
        op("add", section="Books", new="Reads Le Guin"),
        op("add", section="Home", new="Has two bikes"),
        op("add", section="Books", new="Rereads Dune")], allow_shrink=True)
    assert a.texts["MEMORY.md"] == (
        "# Memory\n\n## Home\n- Lives in Lisbon\n- Has a cat\n- Has a garden\n- Has two bikes\n\n"
        "## Work\n- At Acme\n\n### Projects\n- Builds a shed\n- Works from home on Fridays\n"
        "- Paints the fence\n\n## Travel\n- Flies often\n- Flies to Kyoto on 2026-12-03\n\n"
        "## Books\n\n- Reads Le Guin\n- Rereads Dune\n")
    assert a.settled == 1 and a.removed == 1 and a.added == 7


def test_add_of_a_fact_already_present_is_skipped():
    a = apply([op("add", section="Facts", new="likes postgres."),
               op("add", section="Facts", new="Walks the dog"),
               op("add", section="Facts", new="- Walks the dog")])
    assert [r.status for r in a.results] == ["skipped", "applied", "skipped"]
    assert a.results[0].why == "already present (line 9)"


def test_update_keeps_the_line_ending_and_bullet_marker():
    a = apply([op("update", "USER.md", old="- Lives in Berlin", new="Lives in Lisbon"),
               op("update", old="* Uses star bullets", new="Uses star bullets everywhere")])
    assert a.texts["USER.md"] == USER.replace("- Lives in Berlin\r\n", "- Lives in Lisbon\r\n")
    assert "* Uses star bullets everywhere\n" in a.texts["MEMORY.md"]
    assert a.updated == 2


def test_an_op_whose_line_is_not_there_exactly_once_is_skipped():
    twice = MEMORY + "- Likes Postgres\n"
    a = apply_ops({"MEMORY.md": twice, "USER.md": USER},
                  [op("update", old="- Likes MySQL", new="- x"),
                   op("delete", old="- Likes Postgres"),
                   op("update", old="Intro paragraph", new="- x"),     # matches "Intro paragraph  "
                   op("update", old="# Memory", new="# Mine"),
                   op("delete", old="")])
    assert [(r.status, r.why) for r in a.results] == [
        ("skipped", "the quoted line is not in the file (edited since?)"),
        ("skipped", "the quoted line is in the file 2 times"),
        ("refused", "only fact lines (bullets) are edited by the dream"),
        ("refused", "only fact lines (bullets) are edited by the dream"),
        ("refused", "a delete must quote the exact line it replaces")]
    assert a.changed == [] and a.texts["MEMORY.md"] == twice


def test_a_quote_with_the_prompts_line_number_still_matches():
    a = apply([op("delete", old="9\t- Likes Postgres")], allow_shrink=True)
    assert a.removed == 1 and "Likes Postgres" not in a.texts["MEMORY.md"]


def test_rewriting_more_than_a_quarter_of_a_files_facts_is_refused():
    one = [op("delete", "USER.md", old="- Has a cat")]
    two = one + [op("delete", "USER.md", old="- Prefers tea")]
    assert apply(one).removed == 1                              # 1 of 4: a quarter is allowed
    a = apply(two)
    assert [r.status for r in a.results] == ["refused", "refused"]
    assert any("2 of 4 facts would be deleted" in n for n in a.notes)
    # Updates count with deletions: a run cannot rewrite memory any more than empty it.
    a = apply(one + [op("update", "USER.md", old="- Runs on Sundays", new="- Runs on Saturdays")])
    assert [r.status for r in a.results] == ["refused", "refused"]
    assert a.texts["USER.md"] == USER
    assert any("2 of 4 facts would be updated or deleted" in n for n in a.notes)
    assert apply(two, allow_shrink=True).removed == 2


def test_memory_line_budget_is_reported():
    assert "MEMORY.md: 12 of 200 lines" in apply([]).notes
    over = apply([op("add", section="Facts", new="x")], max_lines=10)
    assert "MEMORY.md: 13 lines, over its budget of 10" in over.notes[0]


def test_diff_shows_what_would_change():
    a = apply([op("update", "USER.md", old="- Prefers tea", new="- Prefers coffee")])
    assert "-- Prefers tea\r\n" in a.diff() and "+- Prefers coffee\r\n" in a.diff()
    assert a.diff().startswith("--- a/USER.md\n+++ b/USER.md\n")


# ---- prices -----------------------------------------------------------------------------


def test_estimated_cost_uses_family_prices_and_batch_discount():
    assert prices("claude-sonnet-4-5") == (3.0, 15.0)
    assert prices("claude-opus-4-1-20250805") == (15.0, 75.0)
    assert prices("claude-opus-4-6") == (5.0, 25.0)
    assert prices("claude-haiku-4-5") == (1.0, 5.0)
    assert prices("gpt-x") is None
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000,
             "cache_creation_input_tokens": 1_000_000, "cache_read_input_tokens": 1_000_000}
    # 3 + 6 (1h write) + 0.3 (read) + 1.5 (output) = 10.8, half in a batch.
    assert estimate("claude-sonnet-4-5", usage, batch=False) == pytest.approx(10.8)
    assert estimate("claude-sonnet-4-5", usage, batch=True) == pytest.approx(5.4)


# ---- the record of a dream in flight (.agent/dream.json) --------------------------------


def _old_record(**over) -> dict:
    """A record as the versions before the typed state wrote it."""
    usage = {"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 0,
             "cache_creation_input_tokens": 50}
    record = {
        "version": 1, "phase": "editor_done", "started": "2026-11-20T15:00:00+00:00",
        "today": "2026-11-20", "model": "claude-sonnet-4-5", "max_tokens": 8000,
        "cursor": 0, "through": 3, "entries": [1, 2, 3], "skipped": [],
        "memory_text": "# Memory\n", "user_text": "# User\n", "mode": "batch",
        "usage": {"analyst": usage, "editor": usage},
        "analyst": {"batch": "msgbatch_a", "requests": ["analyst-1-3"],
                    "submitted": "2026-11-20T15:00:01+00:00"},
        "editor": {"batch": "msgbatch_e", "requests": ["editor-1-3"],
                   "submitted": "2026-11-20T15:05:00+00:00"},
        "findings": [finding("Flying to Kyoto on 2026-12-03")],
        "ops": [op("add", section="Facts", new="- Flying to Kyoto on 2026-12-03")]}
    record.update(over)
    return record


def test_run_state_reads_and_writes_the_old_layout():
    from agent.dream.state import RunState
    old = _old_record()
    state = RunState.from_json(old)
    assert state.phase == "editor_done" and state.editor.batch == "msgbatch_e"
    assert state.batch_ids() == ["msgbatch_a", "msgbatch_e"] and state.span == "archive 1..3"
    assert state.to_json() == old


def test_a_dream_left_in_flight_by_an_earlier_version_is_applied(vault, run):
    write_entries(vault, ["Kyoto trip planned", "b", "c"])
    vault.state.mkdir(exist_ok=True)
    (vault.state / "dream.json").write_text(json.dumps(_old_record(), indent=1))
    result = run("dream")           # no API key: nothing is left to ask the model
    assert result.exit_code == 0, result.output
    assert "Committed" in result.output and "+1 fact" in result.output
    assert "- Flying to Kyoto on 2026-12-03" in (vault.root / "MEMORY.md").read_text()
    assert archive.read_consolidated(vault.root).ranges == ((1, 3),)
    assert not (vault.state / "dream.json").exists()


@pytest.mark.parametrize("bad, why", [
    ({"cursor": "0"}, 'cursor should be a whole number, not "0"'),
    ({"phase": "editor", "editor": None}, "phase editor without its requests"),
    ({"version": 7}, "version 7"),
    ({"findings": None, "phase": "analyst_done"}, "analyst_done without findings"),
])
def test_a_record_this_version_cannot_read_is_named_with_the_fix(vault, run, bad, why):
    vault.state.mkdir(exist_ok=True)
    path = vault.state / "dream.json"
    path.write_text(json.dumps(_old_record(**bad)))
    head = vault.head()
    result = run("dream")
    assert result.exit_code == 1
    assert result.output.strip() == (f"Error: {path} is not a dream record this version understands "
                                     f"({why}): run `agent dream --cancel` to discard it.")
    assert vault.head() == head and path.exists()
    assert "Discarded" in run("dream", "--cancel").output and not path.exists()
