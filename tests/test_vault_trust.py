"""What the vault does when something that came in cannot be taken: a sync's checkout
git refuses (a tree with an entry named `..`) stops no one for good and loses nothing,
and what the model writes to workspace/ is committed within a quota and never as a
link leading out of the vault. Real git, the real CLI, the fake Anthropic API, real bwrap."""

from __future__ import annotations

import json
import os

import pytest

from agent import sandbox
from conftest import agent_proc, subjects
from fakeanthropic import reply, tool_use


def refused_sync(vault, **changed: str) -> str:
    """Leave the checkout journal of a sync to a commit holding an entry named `..` (a
    malicious remote's tree, made with plain git plumbing) and changing `changed`
    files, as a sync leaves it when `git read-tree` fails on it. The commit's sha."""
    listing = vault.git("ls-tree", "HEAD")
    for name, text in changed.items():
        blob = vault.git("hash-object", "-w", "--stdin", input=text).strip()
        listing = "".join(line for line in listing.splitlines(keepends=True)
                          if not line.endswith(f"\t{name}\n"))
        listing += f"100644 blob {blob}\t{name}\n"
    evil = vault.git("hash-object", "-w", "--stdin", input="evil\n").strip()
    listing += f"100644 blob {evil}\t..\n"
    tree = vault.git("mktree", input=listing).strip()
    new = vault.git("commit-tree", tree, "-p", "HEAD", "-m", "from the remote").strip()
    vault.state.mkdir(exist_ok=True)
    (vault.state / "checkout.json").write_text(json.dumps(
        {"old": vault.head(), "new": new, "reflog": "sync: fast-forward"}))
    return new


def test_a_refused_sync_stops_commands_with_the_fix_and_the_fix_loses_nothing(vault, run):
    before = vault.head()
    memory_before = (vault.root / "MEMORY.md").read_text()
    new = refused_sync(vault, **{"MEMORY.md": "# Memory\n\n- the remote's fact\n"})
    # The checkout had written MEMORY.md before it failed; the person edited USER.md and
    # added a file since.
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- the remote's fact\n")
    with open(vault.root / "USER.md", "a") as f:
        f.write("- typed by hand while the vault was stuck\n")
    (vault.root / "ideas.md").write_text("an idea\n")

    p = agent_proc("note", "buy milk", vault=vault.root)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    assert "stuck in an interrupted sync" in p.stderr and "invalid path '..'" in p.stderr
    assert ".agent/checkout.json" in p.stderr and "agent doctor --fix" in p.stderr
    assert "Your note was not saved: buy milk" in p.stderr
    assert vault.head() == before

    d = agent_proc("doctor", vault=vault.root)
    assert d.returncode == 1 and "Traceback" not in d.stderr
    line = next(l for l in d.stdout.splitlines() if "sync journal" in l)
    assert line.startswith("FAIL") and new[:7] in line
    assert "-> agent doctor --fix" in d.stdout

    f = agent_proc("doctor", "--fix", vault=vault.root)
    assert "Traceback" not in f.stderr
    assert f"gave up the interrupted sync to {new[:7]}" in f.stdout
    assert "1 file that sync had written put back: MEMORY.md" in f.stdout
    assert "USER.md" in f.stdout and "ideas.md" in f.stdout
    assert "sync journal" not in f.stdout

    p = agent_proc("note", "buy milk", vault=vault.root)
    assert p.returncode == 0, p.stderr
    assert (vault.root / "MEMORY.md").read_text() == memory_before
    assert "typed by hand while the vault was stuck" in (vault.root / "USER.md").read_text()
    assert (vault.root / "ideas.md").read_text() == "an idea\n"
    log = subjects(vault)
    assert log[0].startswith("note: add 1 line") and log[1].startswith("edit:")
    assert set(vault.git("show", "--name-only", "--format=", "HEAD~1").split()) == \
        {"USER.md", "ideas.md"}
    assert vault.git("rev-parse", "HEAD~2").strip() == before
    assert vault.dirty_paths() == []
    assert not (vault.state / "checkout.json").exists()


def test_a_turn_answered_while_the_vault_cannot_commit_is_saved_and_said_so(
        fake_anthropic, vault, run):
    before = vault.head()
    refused_sync(vault)
    fake_anthropic.add(reply("Noted, see you at six."))
    r = run("chat", "-m", "meet Ana at six")
    assert r.exit_code == 1
    assert "Noted, see you at six." in r.output          # it was answered (streamed)...
    error = next(l for l in r.output.splitlines() if l.startswith("Error:"))
    assert "This turn is saved in sessions/cli/default/" in error      # ...and kept
    assert "not committed" in error and "agent doctor --fix" in error
    assert vault.head() == before
    month = next((vault.root / "sessions" / "cli" / "default").glob("*.jsonl"))
    said = [json.loads(l) for l in month.read_text().splitlines()]
    assert [(l["role"], l["content"]) for l in said] == [
        ("user", "meet Ana at six"), ("assistant", "Noted, see you at six.")]

    assert run("doctor", "--fix").output.startswith("Fixed: gave up")
    r = run("note", "after the fix")
    assert r.exit_code == 0, r.output
    assert subjects(vault)[:2] == ["note: add 1 line to " + r.output.split(":")[0],
                                   "chat(cli/default): meet Ana at six"]
    assert "Recovered:" in vault.git("log", "-1", "--format=%B", "HEAD~1")
    assert month.relative_to(vault.root).as_posix() in vault.git(
        "show", "--name-only", "--format=", "HEAD~1").split()
