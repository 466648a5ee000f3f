"""AGENT_NOW fixes the clock of every command: the day's note, the session's month file
and the schedule's times are the ones it names; a bad value is a one-line error."""

from __future__ import annotations

import json

import pytest

from conftest import agent_proc, subjects
from fakeanthropic import reply


def test_agent_now_names_the_day_a_note_is_written_to(vault):
    r = agent_proc("note", "renew the passport", vault=vault.root,
                   env={"AGENT_NOW": "2030-01-01T10:00:00+00:00"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("memory/2030-01-01.md: - 10:00 renew the passport")
    assert (vault.root / "memory/2030-01-01.md").read_text() == (
        "# 2030-01-01\n\n- 10:00 renew the passport\n")
    assert subjects(vault)[0] == "note: add 1 line to memory/2030-01-01.md"


def test_the_day_is_the_one_of_the_offset_given_not_utc(vault, run, monkeypatch):
    # 23:30 in New York is already the next day in UTC: the note belongs to the
    # person's day, the one their offset names.
    monkeypatch.setenv("AGENT_NOW", "2030-03-31T23:30:00-04:00")
    assert run("note", "late thought").exit_code == 0
    assert (vault.root / "memory/2030-03-31.md").read_text().endswith("- 23:30 late thought\n")
    assert not (vault.root / "memory/2030-04-01.md").exists()


def test_a_utc_z_suffix_is_an_offset_too(vault, run, monkeypatch):
    monkeypatch.setenv("AGENT_NOW", "2031-07-04T08:15:00Z")
    assert run("note", "fireworks").exit_code == 0
    assert (vault.root / "memory/2031-07-04.md").exists()


@pytest.mark.parametrize("value, problem", [
    ("tomorrow", "is not a time"),
    ("2030-13-01T10:00:00+00:00", "is not a time"),
    ("2030-01-01T10:00:00", "has no offset"),
    ("2030-01-01", "has no offset"),
])
def test_a_bad_agent_now_is_one_line_naming_the_variable_and_the_form(vault, value, problem):
    before = subjects(vault)
    r = agent_proc("note", "x", vault=vault.root, env={"AGENT_NOW": value})
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"Error: AGENT_NOW={value!r} {problem}: give ISO 8601 with an offset, as in "
        f"2030-01-01T10:00:00+00:00 (or unset AGENT_NOW to use the real clock)."]
    assert subjects(vault) == before
    assert list((vault.root / "memory").glob("20*.md")) == []


def test_an_empty_agent_now_is_the_real_clock(vault, monkeypatch):
    from agent import clock

    monkeypatch.setenv("AGENT_NOW", "  ")
    t = clock.now()
    assert t.tzinfo is not None and t.year >= 2025


def test_a_chat_turn_is_saved_in_the_month_file_agent_now_names(vault, run, fake_anthropic,
                                                                 monkeypatch):
    fake_anthropic.add(reply("Noted."))
    monkeypatch.setenv("AGENT_NOW", "2030-02-28T21:00:00+01:00")
    r = run("chat", "-m", "hello")
    assert r.exit_code == 0, r.output
    months = sorted(p.relative_to(vault.root).as_posix()
                    for p in (vault.root / "sessions").rglob("*.jsonl"))
    assert len(months) == 1 and months[0].endswith("2030-02.jsonl"), months
    lines = [json.loads(x) for x in (vault.root / months[0]).read_text().splitlines()]
    assert {line["ts"] for line in lines if "ts" in line} == {"2030-02-28T21:00:00+01:00"}
