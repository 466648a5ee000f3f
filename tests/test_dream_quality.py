"""The dream's quality, as scenarios: facts planted, later updated, later retracted,
among distractors, and one stated on two machines; a scripted model that follows rules
(dreamrules.py) stands in for the analyst and the editor. Real CLI, real git, real
clones, review on (its default) with every proposal accepted."""

from __future__ import annotations

import json
import subprocess

import pytest

from agent.stores.memory import FACT, normalise
from agent.vault.repo import Vault
from dreamkit import write_entries
from dreamrules import respond

STEPS = [
    ["SET city = Berlin", "Talked about the weather in general.", "SET pet = a cat named Ada",
     "SET editor = vim", "SET language = Python", "The person asked for a joke."],
    ["SET city = Lisbon", "A long chat about films; nothing to keep.", "SET pet = a cat named Ada",
     "SET team = platform"],
    ["UNSET pet", "Small talk about trains.", "SET drink = green tea"],
]
FINAL = {"- city: Lisbon", "- editor: vim", "- language: Python", "- team: platform",
         "- drink: green tea"}


def facts(vault) -> list[str]:
    return [line for line in (vault.root / "MEMORY.md").read_text().splitlines() if FACT.match(line)]


def dream(run):
    # Batches are polled at once: the fake ends one at its second poll, and the default
    # five seconds between polls would be most of this file's time.
    r = run("dream", "--poll-interval", "0.01")
    assert r.exit_code == 0, r.output
    accepted = run("review", "accept", "--all")
    assert accepted.exit_code == 0, accepted.output
    return r


def entries(vault, step: int, texts: list[str], base: int = 100):
    return write_entries(vault, [{"summary": t, "message": f"(said) {t}"} for t in texts],
                         start=base * (step + 1))


@pytest.fixture
def rules(fake_anthropic):
    fake_anthropic.default_reply = respond
    return fake_anthropic


@pytest.mark.slow
def test_planted_updated_retracted_facts_end_right_and_a_second_dream_changes_nothing(
        vault, run, rules):
    for step, texts in enumerate(STEPS):
        entries(vault, step, texts)
        dream(run)
    got = facts(vault)
    assert set(got) == FINAL
    # Superseded and retracted facts are gone; no near-duplicates.
    text = (vault.root / "MEMORY.md").read_text()
    assert "Berlin" not in text and "pet" not in text
    assert len({normalise(x) for x in got}) == len(got)
    # Every fact resolves through `agent why` to the message that stated it.
    for line in got:
        story = json.loads(run("why", "--json", line[2:]).output)
        assert story["text"] == line
        said = [m["text"] for e in story["steps"][0]["source"]["archive"] for m in e["messages"]]
        key, value = line[2:].split(": ", 1)
        assert any(f"SET {key} = {value}" in s for s in said), (line, said)
    # A second dream over the same archive (the record of what was consolidated
    # cleared by hand) changes nothing in memory.
    before = text
    (vault.root / ".dream_cursor").write_text("")
    dream(run)
    assert (vault.root / "MEMORY.md").read_text() == before
    assert run("review").output.strip() == "Nothing waits for review."


@pytest.mark.slow
@pytest.mark.parametrize("chunk_tokens", [60000, 60])
def test_batch_order_does_not_matter(vault, run, rules, chunk_tokens):
    """All steps dreamed at once, in one analyst request or one per entry, end where
    the step-by-step dreams end."""
    text = (vault.root / "agent.toml").read_text()
    (vault.root / "agent.toml").write_text(
        text.replace('review = "changes"', f'review = "changes"\nchunk_tokens = {chunk_tokens}'))
    for step, texts in enumerate(STEPS):
        entries(vault, step, texts)
    dream(run)
    assert set(facts(vault)) == FINAL
    analysts = [c for c in rules.calls("/v1/messages/batches")]
    n = len(analysts[0].body["requests"])
    assert (n == 1) if chunk_tokens == 60000 else (n > 1)


@pytest.mark.slow
def test_a_fact_stated_on_two_machines_is_kept_once(tmp_path, vault, run, rules):
    from helpers import agent, clone

    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    vault.git("remote", "add", "origin", str(bare))
    agent(vault.root, "sync")
    b = clone(tmp_path, bare, "b")
    write_entries(vault, [{"summary": "SET editor = helix", "session": "cli/laptop",
                           "message": "I switched to helix"}], start=202611240100000001)
    write_entries(b, [{"summary": "SET editor = helix", "session": "telegram/42",
                       "message": "helix is my editor now"}], start=202611240100000002)
    agent(b.root, "sync")
    agent(vault.root, "sync")
    dream(run)
    assert facts(vault) == ["- editor: helix"]
    agent(vault.root, "sync")
    agent(b.root, "sync")
    assert facts(Vault.open(b.root)) == ["- editor: helix"]
