"""History: commit messages made from `Change` records, and history read back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.vault import history
from agent.vault.change import Change, Identity, by_hand, read_tokens, recovered, tokens

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


# ---- the Tokens trailer, and only Change makes a commit ------------------------------


USAGE = {"input_tokens": 12, "output_tokens": 5, "cache_read_input_tokens": 3,
         "cache_creation_input_tokens": 0}


@pytest.mark.parametrize("usage, text", [
    (USAGE, "12 in, 5 out, 3 cache read, 0 cache write"),
    ({"analyst": USAGE, "editor": {**USAGE, "input_tokens": 40}},
     "analyst: 12 in, 5 out, 3 cache read, 0 cache write; "
     "editor: 40 in, 5 out, 3 cache read, 0 cache write"),
])
def test_the_tokens_trailer_has_one_syntax_and_reads_back(usage, text):
    assert tokens(usage) == text
    back = read_tokens(text)
    assert back == ({"": usage} if "analyst" not in text else usage)


@pytest.mark.parametrize("text, usage", [
    ("analyst in=719 out=92 cache_write=593 cache_read=0; editor in=545 out=55 "
     "cache_write=0 cache_read=593",
     {"analyst": {"input_tokens": 719, "output_tokens": 92, "cache_creation_input_tokens": 593,
                  "cache_read_input_tokens": 0},
      "editor": {"input_tokens": 545, "output_tokens": 55, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 593}}),
    ("7 in, 2 out, 0 cache read, 1 cache write",
     {"": {"input_tokens": 7, "output_tokens": 2, "cache_read_input_tokens": 0,
           "cache_creation_input_tokens": 1}}),
    ("", {}),
    ("garbage; more garbage", {}),
])
def test_tokens_trailers_of_older_commits_still_read(text, usage):
    assert read_tokens(text) == usage


def test_a_commit_is_only_ever_a_change(vault):
    before = vault.git("rev-parse", "HEAD").strip()
    with vault.locked():
        vault.write_text("notes/a.md", "a\n")
        with pytest.raises(TypeError, match="a commit is a Change"):
            vault.commit("test: a message made by hand")
        assert vault.git("rev-parse", "HEAD").strip() == before
        sha = vault.commit(Change("test", "a message made by Change"))
    assert vault.git("log", "-1", "--format=%s", sha).strip() == "test: a message made by Change"
