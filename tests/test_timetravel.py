"""Time travel (issue 26): `agent show --as-of`, `agent search --as-of`, `agent why
--history`, `agent restore`, and the MCP tools show_as_of and restore."""

from __future__ import annotations

import json

import pytest
from mcp import MCPError

from conftest import subjects
from helpers import drive, text_of

MEMORY = "# Memory\n\n## Travel\n\n- Plans a trip to Kyoto in April 2027\n- Prefers window seats\n"


def hand_edit(vault, run, new_text: str, when: str):
    """A hand edit of MEMORY.md, committed (as `agent note` commits hand edits first) at
    the time `when`."""
    (vault.root / "MEMORY.md").write_text(new_text)
    r = run("note", f"note at {when}")
    assert r.exit_code == 0, r.output


@pytest.fixture
def story(vault, run, monkeypatch):
    """MEMORY.md through four days: the Kyoto fact added (Nov 1), updated (Nov 5),
    removed (Nov 9); a talk about ramen noted on Nov 7."""
    def at(day):
        stamp = f"2026-11-{day:02d}T12:00:00+00:00"
        for var in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
            monkeypatch.setenv(var, stamp)
    at(1)
    hand_edit(vault, run, MEMORY, "day 1")
    at(5)
    hand_edit(vault, run, MEMORY.replace("April", "May"), "day 5")
    at(7)
    assert run("note", "we talked about the best ramen in Osaka").exit_code == 0
    at(9)
    hand_edit(vault, run, MEMORY.replace("- Plans a trip to Kyoto in April 2027\n", ""), "day 9")
    for var in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        monkeypatch.delenv(var)
    return vault


def test_show_prints_a_file_as_it_was(story, run):
    r = run("show", "MEMORY.md", "--as-of", "2026-11-03")
    assert r.exit_code == 0, r.output
    assert "Kyoto in April 2027" in r.output and "MEMORY.md as of" in r.output
    r = run("show", "MEMORY.md", "--as-of", "2026-11-06", "--json")
    assert "Kyoto in May 2027" in json.loads(r.output)["text"]
    assert "Kyoto" not in run("show", "MEMORY.md").output
    r = run("show", "MEMORY.md", "--as-of", "1999-01-01")
    assert r.exit_code == 1 and "no commit at or before '1999-01-01'" in r.output
    r = run("show", "nosuch.md", "--as-of", "2026-11-06")
    assert r.exit_code == 1 and "nosuch.md did not exist as of 2026-11-06" in r.output


def test_search_as_of_searches_what_the_agent_knew_then(story, run):
    r = run("search", "kyoto", "--as-of", "2026-11-06")
    assert r.exit_code == 0, r.output
    assert "Kyoto] in May 2027" in r.output
    assert "No matches" in run("search", "kyoto").output            # removed since
    assert "No matches" in run("search", "ramen", "--as-of", "2026-11-06").output
    assert "ramen" in run("search", "ramen", "--as-of", "2026-11-08").output
    assert not (story.state / "as-of").exists() or not list((story.state / "as-of").iterdir())


def test_why_history_tells_the_timeline(story, run):
    r = run("why", "--history", "kyoto")
    assert r.exit_code == 0, r.output
    kinds = [line.split()[2] for line in r.output.splitlines() if line.startswith("2026-")]
    assert kinds == ["added", "updated", "removed"]
    assert "by Test User <test@example.com>" in r.output
    events = json.loads(run("why", "--history", "--json", "kyoto").output)
    assert events[1]["old"].endswith("April 2027") and events[1]["new"].endswith("May 2027")
    assert run("why", "--history", "nothing-like-it").exit_code == 1


def test_restore_brings_back_the_removed_line_as_one_commit(story, run):
    removed_in = story.git("log", "-1", "--format=%h", "--", "MEMORY.md").strip()
    r = run("restore", "kyoto")
    assert r.exit_code == 0, r.output
    assert "Restored to MEMORY.md: - Plans a trip to Kyoto in May 2027" in r.output
    text = (story.root / "MEMORY.md").read_text()
    assert "- Plans a trip to Kyoto in May 2027" in text.split("## Travel")[1]
    assert subjects(story)[0] == "restore: Plans a trip to Kyoto in May 2027"
    assert removed_in in story.git("log", "-1", "--format=%B")
    r = run("why", "--history", "kyoto")
    assert r.output.splitlines()[-3].split()[2] == "restored"
    again = run("restore", "kyoto")
    assert again.exit_code == 1 and "still has it" in again.output


def test_mcp_show_as_of_and_restore(story):
    async def steps(c):
        shown = text_of(await c.call_tool("show_as_of", {"path": "MEMORY.md",
                                                         "when": "2026-11-03"}))
        restored = text_of(await c.call_tool("restore", {"text": "kyoto"}))
        return shown, restored
    shown, restored = drive(story, steps)
    assert "Kyoto in April 2027" in shown
    assert "Restored to MEMORY.md" in restored and "Kyoto" in (story.root / "MEMORY.md").read_text()

    async def readonly(c):
        names = {t.name for t in (await c.list_tools()).tools}
        with pytest.raises(MCPError) as e:
            await c.call_tool("restore", {"text": "window"})
        return names, e.value
    names, err = drive(story, readonly, "--read-only")
    assert "show_as_of" in names and "restore" not in names and "--read-only" in err.message


def test_a_when_that_is_no_date_is_refused_not_read_as_now(story, run):
    """git reads an unknown word as "now": `show --as-of banana` printed HEAD with exit 0,
    and `log --since banana` said there were no changes."""
    r = run("show", "MEMORY.md", "--as-of", "banana")
    assert r.exit_code == 1
    assert "--as-of 'banana': neither a commit nor a date git understands" in r.output
    assert "Kyoto" not in r.output
    r = run("log", "--since", "banana")
    assert r.exit_code == 1 and "--since 'banana': not a date git understands" in r.output
    r = run("show", "MEMORY.md", "--as-of", "HEAD~1")        # a commit is still taken
    assert r.exit_code == 0 and "MEMORY.md as of" in r.output
    r = run("log", "--since", "2026-11-04", "--oneline")
    assert r.exit_code == 0 and "edit: MEMORY.md by hand" in r.output


def test_a_precise_time_a_few_seconds_ago_is_a_date(vault, run, monkeypatch):
    """A time written out to the second, just now, was read as a word git did not
    understand (git's reading of it was within 5 s of now)."""
    from datetime import datetime, timedelta, timezone

    now = datetime.now(timezone.utc)
    for var in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        monkeypatch.setenv(var, (now - timedelta(minutes=1)).isoformat(timespec="seconds"))
    hand_edit(vault, run, MEMORY, "a minute ago")
    for var in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        monkeypatch.delenv(var)
    when = (now - timedelta(seconds=2)).strftime("%Y-%m-%d %H:%M:%S +0000")
    r = run("show", "MEMORY.md", "--as-of", when)
    assert r.exit_code == 0, r.output
    assert "Kyoto in April 2027" in r.output
    r = run("log", "--since", when)
    assert r.exit_code == 0, r.output
    assert run("show", "MEMORY.md", "--as-of", "banana").exit_code == 1    # still refused
