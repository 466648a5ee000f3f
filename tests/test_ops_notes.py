"""agent/ops/notes.py called directly: a note is one line in the day's file and one
commit; a fact goes under its heading once; a secret never reaches the vault."""

from __future__ import annotations

from datetime import datetime, timezone

from agent.ops import notes
from agent.vault.change import Change
from conftest import subjects

T0 = datetime(2030, 1, 1, 10, 0, tzinfo=timezone.utc)
KEY = "sk-ant-api03-" + "Zq7_" * 20 + "AA"


def test_a_note_is_one_line_in_the_days_file_and_one_commit(vault):
    noted = notes.note(vault, "call the\ndentist", T0)
    assert (noted.rel, noted.line) == ("memory/2030-01-01.md", "- 10:00 call the dentist")
    assert (vault.root / "memory/2030-01-01.md").read_text() == \
        "# 2030-01-01\n\n- 10:00 call the dentist\n"
    assert noted.sha == vault.git("rev-parse", "HEAD").strip()
    assert subjects(vault)[0] == "note: add 1 line to memory/2030-01-01.md"


def test_the_commit_says_who_asked_when_a_front_end_says_so(vault):
    def via(rel, text):
        return Change("mcp", f"note in {rel}: {text}", scope="claude-code",
                      trailers={"Client": "Claude Code"})
    notes.note(vault, "buy milk", T0, via=via)
    assert subjects(vault)[0] == "mcp(claude-code): note in memory/2030-01-01.md: buy milk"
    assert "Client: Claude Code" in vault.git("log", "-1", "--format=%b")


def test_a_fact_goes_under_its_heading_once(vault):
    done = notes.remember(vault, "Prefers  green tea", "user", T0, section="Preferences")
    assert done.added and done.rel == "USER.md" and done.line == "Prefers green tea"
    text = (vault.root / "USER.md").read_text()
    assert "## Preferences\n" in text and "- Prefers green tea" in text
    assert subjects(vault)[0] == "remember: add 1 fact to USER.md"
    n = len(subjects(vault))
    again = notes.remember(vault, "Prefers green tea", "user", T0, section="Preferences")
    assert not again.added and again.sha is None and len(subjects(vault)) == n
    assert (vault.root / "USER.md").read_text() == text


def test_a_pasted_key_is_kept_out_of_notes_and_facts(vault):
    noted = notes.note(vault, f"the key is {KEY}", T0)
    fact = notes.remember(vault, f"API key {KEY}", "memory", T0)
    assert noted.kept and fact.kept
    assert KEY not in (vault.root / "memory/2030-01-01.md").read_text()
    assert KEY not in (vault.root / "MEMORY.md").read_text()
    assert KEY not in vault.git("log", "-p", "--all")
