"""History: commit messages made from `Change` records, and history read back."""

from __future__ import annotations

import re
from pathlib import Path

from agent.vault import history
from agent.vault.change import Change, Identity, by_hand, recovered

PACKAGE = Path(__file__).resolve().parent.parent / "agent"


def raw_message(vault, rev="HEAD") -> str:
    """The commit's message exactly as stored (after the header's blank line)."""
    return vault.git("cat-file", "commit", rev).split("\n\n", 1)[1]


def test_a_change_becomes_a_message_in_one_form():
    assert Change("note", "add 1 line to memory/2026-11-20.md").message() == \
        "note: add 1 line to memory/2026-11-20.md"
    assert Change("chat", "hello", scope="cli/default",
                  trailers={"Session": "cli/default", "Turn": "1"}).message() == \
        "chat(cli/default): hello\n\nSession: cli/default\nTurn: 1\n"
    assert Change("dream", "no changes (archive 1..2)", body="Why.\n",
                  trailers={"Cursor": "0 -> 2"}).message() == \
        "dream: no changes (archive 1..2)\n\nWhy.\n\nCursor: 0 -> 2\n"
    assert Change("dream", "no changes (archive 1..2)", body="\n",
                  trailers={"Cursor": "0 -> 2"}).message() == \
        "dream: no changes (archive 1..2)\n\nCursor: 0 -> 2\n"
    assert Change("x", "y", body="a\nb").message() == "x: y\n\na\nb\n"
    me = Identity("Ann", "ann@example.org")
    assert by_hand(["MEMORY.md"], me).message() == "edit: MEMORY.md by hand"
    assert by_hand(["a", "b", "c"], me).message() == "edit: 3 files by hand\n\n- a\n- b\n- c\n"
    assert by_hand(["a"], me).author == me
    assert recovered(["a", "b"]).message() == "recover: a, b left by an interrupted command"
    assert recovered(["a"]).author is None


def test_the_vault_commits_a_change_as_its_author(vault):
    with vault.locked():
        vault.write_text("notes/a.md", "one\n")
        sha = vault.commit(Change("note", "add notes/a.md", trailers={"Why": "test"}))
    assert raw_message(vault, sha) == "note: add notes/a.md\n\nWhy: test\n"
    assert vault.git("log", "-1", "--format=%an <%ae>").strip() == "agent <agent@localhost>"
    with vault.locked():
        vault.write_text("notes/b.md", "two\n")
        vault.commit(Change("edit", "notes/b.md by hand", author=Identity("Ann", "ann@x.org")))
    assert vault.git("log", "-1", "--format=%an <%ae>|%s").strip() == \
        "Ann <ann@x.org>|edit: notes/b.md by hand"


def test_history_reads_commits_with_their_trailers(vault):
    with vault.locked():
        vault.write_text("notes/a.md", "one\n")
        first = vault.commit(Change("chat", "hi", scope="cli/a", trailers={"Session": "cli/a"}))
        vault.write_text("notes/a.md", "two\n")
        second = vault.commit(Change("note", "add a line"))
    newest = history.recent(vault, limit=2)
    assert [c.sha for c in newest] == [second, first]
    c = newest[1]
    assert (c.kind, c.scope, c.trailer("Session"), c.email) == ("chat", "cli/a", "cli/a",
                                                              "agent@localhost")
    assert (newest[0].kind, newest[0].scope, newest[0].trailer("Session")) == ("note", None, None)
    assert history.find(vault, first[:7]) == c
    assert history.find(vault, "nope") is None
    assert history.changed_since(vault, first, second) == ["notes/a.md"]
    assert history.changed_since(vault, "0" * 40, second) is None
    assert history.count_between(vault, first, second) == 1
    assert history.head_line(vault).startswith(f"{second[:7]} note: add a line (")


def test_undo_of_a_session_takes_its_newest_turn_not_yet_undone(vault):
    with vault.locked():
        vault.write_text("notes/a.md", "a\n")
        a = vault.commit(Change("chat", "a", scope="cli/a", trailers={"Session": "cli/a"}))
        vault.write_text("notes/b.md", "b\n")
        vault.commit(Change("chat", "b", scope="cli/b", trailers={"Session": "cli/b"}))
    done = history.undo(vault, session="cli/a")
    assert done.commit.sha == a
    assert raw_message(vault, done.sha) == \
        f'undo: revert "chat(cli/a): a"\n\nReverts: {a}\nSession: cli/a\n'
    assert not (vault.root / "notes/a.md").exists() and (vault.root / "notes/b.md").exists()
    try:
        history.undo(vault, session="cli/a")
    except history.NothingToUndo as e:
        assert str(e).startswith("Nothing to undo in cli/a: every turn of it has been undone")
    else:
        raise AssertionError("a second undo found something")


# ---- the rules that keep history in one place ---------------------------------------------


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        yield rel, path.read_text(encoding="utf-8")


def test_only_the_vault_runs_git_and_every_commit_is_a_change():
    problems = []
    for rel, text in _sources():
        if rel.startswith("agent/vault/"):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            # agent/sync drives git through the vault's runner (vault.git, agent.vault.git).
            runner = r"subprocess\.\w+\(\s*\[\s*[\"']git[\"']"
            if not rel.startswith("agent/sync/"):
                runner = r"\.git\(|" + runner
            if re.search(runner, line):
                problems.append(f"{rel}:{n}: runs git outside agent/vault: {line.strip()}")
            if re.search(r"\.commit\(\s*f?[\"']", line) or "trailers=" in line and ".commit(" in line:
                problems.append(f"{rel}:{n}: a commit message made outside Change: {line.strip()}")
    assert problems == []


def test_nothing_tells_vaults_apart_by_their_attributes():
    found = [f"{rel}:{n}" for rel, text in _sources()
             for n, line in enumerate(text.splitlines(), 1)
             if re.search(r"hasattr\(\s*(ctx\.)?vault\b", line)]
    assert found == []
