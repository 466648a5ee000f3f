"""The dream at the scale of a life: what one run records per edit stays the same size
however many entries it consolidates (the ledger's records were once as long as the
run, and linking them cost entries x findings)."""

from __future__ import annotations

import json
import re

from dreamkit import set_review, write_entries
from fakeanthropic import json_reply


def alike_model(params: dict):
    """Analyst: one finding per entry, all worded alike; editor: one add per finding."""
    tail = params["messages"][0]["content"][-1]["text"]
    if "Phase 1, analyst" in tail:
        first, last = map(int, re.search(r"\(ids (\d+) to (\d+)\)", tail).groups())
        return json_reply({"findings": [
            {"kind": "new", "file": "MEMORY.md", "statement": f"Move step {i} is planned",
             "evidence": [f"archive:{i}"], "date": "2026-11-20"} for i in range(first, last + 1)]})
    data = tail.split("<findings>\n")[1].split("\n</findings>")[0].splitlines()
    return json_reply({"ops": [
        {"op": "add", "file": "MEMORY.md", "section": "Move", "old": "",
         "new": f"- {json.loads(line)['statement']}", "reason": "archive"} for line in data]})


def test_each_edit_names_its_own_entry_and_a_few_findings_not_the_whole_run(
        vault, run, fake_anthropic):
    set_review(vault, "off")
    write_entries(vault, [f"Step {i} of the house move was planned." for i in range(1, 41)],
                  start=1)
    fake_anthropic.default_reply = alike_model
    r = run("dream", "--poll-interval", "0.01", "--allow-shrink")
    assert r.exit_code == 0, r.output
    ledger = [json.loads(x) for x in (vault.root / ".dream_ledger.jsonl").read_text().splitlines()]
    assert len(ledger) == 40
    for rec in ledger:
        step = int(re.search(r"step (\d+)", rec["line"]).group(1))
        assert rec["archive"] == [step] and rec["exact"] is True
        assert rec["findings"][0]["statement"] == f"Move step {step} is planned"
        assert len(rec["findings"]) <= 3


def test_a_dream_over_more_entries_than_a_run_takes_goes_on_run_after_run_oldest_first(
        vault, run, fake_anthropic, monkeypatch):
    from agent.dream import run as dream_run

    monkeypatch.setattr(dream_run, "RUN_ENTRIES", 2)    # 1,000 in a vault; 2 here
    set_review(vault, "off")
    write_entries(vault, [f"Step {i} of the house move was planned." for i in range(1, 6)],
                  start=1)
    fake_anthropic.default_reply = alike_model
    r = run("dream", "--poll-interval", "0.01")
    assert r.exit_code == 0, r.output
    assert "3 entries still wait; the next run takes them, oldest first." in r.output
    log = vault.git("log", "--format=%s").splitlines()
    assert [s for s in log if s.startswith("dream:")] == [
        "dream: +1 fact, 0 updated, 0 removed (archive 5..5)",
        "dream: +2 facts, 0 updated, 0 removed (archive 3..4)",
        "dream: +2 facts, 0 updated, 0 removed (archive 1..2)"]
