"""The vault's trust boundary, end to end with the real CLI on a real vault: links out of
the vault, FIFOs and huge files are never read; nothing is committed during an
unfinished merge, rebase or cherry-pick, on a detached HEAD or under a person's own
`git commit`; the model cannot rewrite the vault's control files; `.agent/` is never
committed; git's fsmonitor and filter drivers never run for the agent's git calls."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import TODAY_NOTE, subjects
from fakeanthropic import reply, tool_use

SECRET = "sk-ant-VERY-SECRET-KEY"


def git(vault, *args, check=True, env=None):
    full = {**os.environ, **(env or {})}
    return subprocess.run(["git", *args], cwd=vault.root, capture_output=True, text=True,
                          check=check, env=full)


def request_text(call) -> str:
    return json.dumps(call.body)


def tool_results(call) -> list[dict]:
    return [b for b in call.body["messages"][-1]["content"] if b.get("type") == "tool_result"]


def tree(vault) -> dict[str, bytes]:
    """Every file of the work tree (not .git, not .agent) with its bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(vault.root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".agent")]
        for f in filenames:
            p = os.path.join(dirpath, f)
            if os.path.isfile(p) and not os.path.islink(p):
                out[os.path.relpath(p, vault.root)] = open(p, "rb").read()
    return out


# ---- links, FIFOs and size: one safe read -------------------------------------------------


@pytest.fixture
def secret_file(tmp_path):
    p = tmp_path / "outside-secret.txt"
    p.write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    return p


def test_user_md_linking_out_of_the_vault_is_not_sent(fake_anthropic, vault, run, secret_file):
    (vault.root / "USER.md").unlink()
    os.symlink(secret_file, vault.root / "USER.md")
    fake_anthropic.add(reply("hi"))
    r = run("chat", "-m", "hello")
    assert r.exit_code == 1
    assert "USER.md leads outside the vault" in r.output
    assert "Traceback" not in r.output
    assert all(SECRET not in request_text(c) for c in fake_anthropic.calls())


def test_memory_md_linking_out_is_refused_by_status_and_dream(fake_anthropic, vault, run,
                                                             secret_file):
    (vault.root / "MEMORY.md").unlink()
    os.symlink(secret_file, vault.root / "MEMORY.md")
    r = run("status")
    assert r.exit_code == 0
    assert "MEMORY.md leads outside the vault" in r.output
    r = run("dream", "--sync")
    assert "Traceback" not in r.output
    assert all(SECRET not in request_text(c) for c in fake_anthropic.calls())


def test_a_skill_linking_out_is_unusable_and_not_loaded(fake_anthropic, vault, run, secret_file):
    (vault.root / "skills" / "leak").mkdir(parents=True)
    os.symlink(secret_file, vault.root / "skills" / "leak" / "SKILL.md")
    fake_anthropic.add(reply(tool_use("load_skill", {"name": "leak"}, id="t1")), reply("done"))
    r = run("chat", "-m", "load the leak skill")
    assert r.exit_code == 0, r.output
    for call in fake_anthropic.calls():
        assert SECRET not in request_text(call)
    result = tool_results(fake_anthropic.calls()[1])[0]
    assert result.get("is_error") and "leads outside the vault" in json.dumps(result)


def test_a_fifo_in_the_vault_is_refused_not_waited_on(fake_anthropic, vault, run):
    os.mkfifo(vault.root / "pipe.md")
    fake_anthropic.add(reply(tool_use("read_file", {"path": "pipe.md"}, id="t1"),
                             tool_use("memory_get", {"path": "pipe.md"}, id="t2")),
                       reply("ok"))
    r = run("chat", "-m", "read pipe.md")
    assert r.exit_code == 0, r.output
    results = tool_results(fake_anthropic.calls()[1])
    assert all(b.get("is_error") and "FIFO" in json.dumps(b) for b in results)
    assert run("status").exit_code == 0
    assert run("note", "still fine").exit_code == 0


def test_memory_md_as_fifo_refuses_chat_with_one_line(fake_anthropic, vault, run):
    (vault.root / "MEMORY.md").unlink()
    os.mkfifo(vault.root / "MEMORY.md")
    r = run("chat", "-m", "hello")
    assert r.exit_code == 1 and "MEMORY.md is a FIFO" in r.output
    assert fake_anthropic.calls() == []


def test_a_huge_memory_md_is_not_sent_whole(fake_anthropic, vault, run):
    with open(vault.root / "MEMORY.md", "a") as f:
        f.write("- filler fact number\n" * 40_000)       # ~840 KB
    vault.git("commit", "-qam", "big memory", env={"GIT_AUTHOR_NAME": "t"})
    r = run("chat", "-m", "hello")
    assert r.exit_code == 1
    assert "MEMORY.md is" in r.output and "over the" in r.output and "limit" in r.output
    assert fake_anthropic.calls() == []


def test_a_session_file_linking_out_is_refused(fake_anthropic, vault, run, secret_file):
    d = vault.root / "sessions" / "cli" / "default"
    d.mkdir(parents=True)
    os.symlink(secret_file, d / "2026-11.jsonl")
    r = run("chat", "-m", "hello")
    assert r.exit_code == 1 and "leads outside the vault" in r.output
    assert fake_anthropic.calls() == []
    assert secret_file.read_text().startswith("ANTHROPIC_API_KEY")   # never truncated


# ---- unfinished git operations: nothing is committed ---------------------------------------


def _conflicted_merge(vault):
    # AGENTS.md has no merge driver of ours, so git really stops on the clash.
    git(vault, "switch", "-q", "-c", "other")
    (vault.root / "AGENTS.md").write_text("# Agent\n\nother side\n")
    git(vault, "commit", "-qam", "other")
    git(vault, "switch", "-q", "main")
    (vault.root / "AGENTS.md").write_text("# Agent\n\nmain side\n")
    git(vault, "commit", "-qam", "main")
    p = git(vault, "merge", "other", check=False)
    assert p.returncode != 0 and (vault.git_dir / "MERGE_HEAD").exists()


def test_note_during_a_conflicted_merge_is_refused_and_changes_nothing(vault, run):
    _conflicted_merge(vault)
    head, files = vault.head(), tree(vault)
    r = run("note", "x")
    assert r.exit_code == 1
    assert "merge is unfinished" in r.output and "git merge --continue" in r.output
    assert "git merge --abort" in r.output
    assert vault.head() == head and tree(vault) == files
    git(vault, "merge", "--abort")
    r = run("note", "after the merge")
    assert r.exit_code == 0 and subjects(vault)[0].startswith("note:")


def test_note_with_conflicted_files_left_by_stash_pop_is_refused(vault, run):
    # `git stash pop` that clashes leaves conflicted files and no MERGE_HEAD: only the
    # index says so, and the lock's `git status` must see it.
    (vault.root / "AGENTS.md").write_text("# Agent\n\nstashed side\n")
    git(vault, "stash", "-q")
    (vault.root / "AGENTS.md").write_text("# Agent\n\ncommitted side\n")
    git(vault, "commit", "-qam", "committed side")
    assert git(vault, "stash", "pop", check=False).returncode != 0
    assert not (vault.git_dir / "MERGE_HEAD").exists()
    head, files = vault.head(), tree(vault)
    before = (vault.root / "AGENTS.md").read_text()
    r = run("note", "x")
    assert r.exit_code == 1
    assert "conflicted files (AGENTS.md)" in r.output and "git add" in r.output
    assert vault.head() == head and tree(vault) == files
    assert (vault.root / "AGENTS.md").read_text() == before


def test_chat_during_a_rebase_is_refused_before_the_model_is_called(fake_anthropic, vault, run):
    git(vault, "switch", "-q", "-c", "other")
    (vault.root / "AGENTS.md").write_text("# Agent\n\nother side\n")
    git(vault, "commit", "-qam", "other")
    git(vault, "switch", "-q", "main")
    (vault.root / "AGENTS.md").write_text("# Agent\n\nmain side\n")
    git(vault, "commit", "-qam", "main")
    assert git(vault, "rebase", "other", check=False).returncode != 0
    head = vault.head()
    r = run("chat", "-m", "hello")
    assert r.exit_code == 1 and "rebase is unfinished" in r.output
    assert fake_anthropic.calls() == []
    assert vault.head() == head


def test_cherry_pick_and_detached_head_are_refused(vault, run):
    git(vault, "switch", "-q", "-c", "other")
    (vault.root / "AGENTS.md").write_text("# Agent\n\nother side\n")
    git(vault, "commit", "-qam", "other")
    git(vault, "switch", "-q", "main")
    (vault.root / "AGENTS.md").write_text("# Agent\n\nmain side\n")
    git(vault, "commit", "-qam", "main")
    assert git(vault, "cherry-pick", "other", check=False).returncode != 0
    r = run("note", "x")
    assert r.exit_code == 1 and "cherry-pick is unfinished" in r.output
    git(vault, "cherry-pick", "--abort")
    git(vault, "switch", "-q", "--detach", "HEAD~1")
    head = vault.head()
    r = run("note", "x")
    assert r.exit_code == 1 and "detached HEAD" in r.output and "git switch" in r.output
    assert vault.head() == head
    assert git(vault, "status", "--porcelain").stdout == ""


def test_a_persons_git_commit_waiting_in_its_editor_is_left_alone(vault, run, tmp_path):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- staged by the person\n")
    git(vault, "add", "MEMORY.md")
    gate = tmp_path / "editor-may-finish"
    editor = tmp_path / "editor.sh"
    editor.write_text(f"#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.05; done\n"
                      f"echo 'my own message' > \"$1\"\n")
    editor.chmod(0o755)
    person = subprocess.Popen(["git", "commit"], cwd=vault.root,
                              env={**os.environ, "GIT_EDITOR": str(editor)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        msg = vault.git_dir / "COMMIT_EDITMSG"
        while not (msg.exists() and "Please enter" in msg.read_text()):
            assert person.poll() is None
        head = vault.head()
        r = run("note", "while the person commits")
        assert r.exit_code == 1 and "git commit" in r.output and "waiting" in r.output
        assert vault.head() == head
    finally:
        gate.touch()
        person.wait()
    assert person.returncode == 0
    assert subjects(vault)[0] == "my own message"
    assert run("note", "now it works").exit_code == 0


# ---- the model's writes and the agent's own git calls --------------------------------------


@pytest.mark.parametrize("path", [".gitignore", ".gitattributes", "agent.toml", "AGENTS.md"])
def test_the_model_cannot_rewrite_control_files(fake_anthropic, vault, run, path):
    before = (vault.root / path).read_bytes()
    fake_anthropic.add(reply(tool_use("write_file", {"path": path, "content": "*.md\n"}, id="t1"),
                             tool_use("edit_file", {"path": path, "old": before.decode()[:5] or "x",
                                                    "new": "zz"}, id="t2")),
                       reply("done"))
    r = run("chat", "-m", "rewrite it")
    assert r.exit_code == 0, r.output
    results = tool_results(fake_anthropic.calls()[1])
    assert all(b.get("is_error") and "the person's to change" in json.dumps(b) for b in results)
    assert (vault.root / path).read_bytes() == before
    fake_anthropic.add(reply(tool_use("read_file", {"path": path}, id="t3")), reply("ok"))
    run("chat", "-m", "read it")
    assert not tool_results(fake_anthropic.calls()[-1])[0].get("is_error")


def test_agent_state_is_never_committed_whatever_gitignore_says(vault, run):
    (vault.root / ".gitignore").write_text("")         # a person (or a sync) drops .agent/
    assert run("note", "one").exit_code == 0
    assert run("note", "two").exit_code == 0
    tracked = vault.git("ls-files").split()
    assert not any(p.startswith(".agent") for p in tracked)
    assert "edit: .gitignore by hand" in subjects(vault)


def test_fsmonitor_and_filter_drivers_never_run_for_agent_git_calls(vault, run, tmp_path):
    ran = tmp_path / "ran.txt"
    hook = tmp_path / "fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\necho fsmonitor >> {ran}\n")
    hook.chmod(0o755)
    filt = tmp_path / "filter.sh"
    filt.write_text(f"#!/bin/sh\necho filter >> {ran}\ncat\n")
    filt.chmod(0o755)
    git(vault, "config", "core.fsmonitor", str(hook))
    git(vault, "config", "filter.evil.clean", str(filt))
    git(vault, "config", "filter.evil.smudge", str(filt))
    git(vault, "config", "filter.evil.required", "true")
    with open(vault.root / ".gitattributes", "a") as f:
        f.write("*.md filter=evil\n")
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- a hand edit\n")
    r = run("note", "hello")
    assert r.exit_code == 0, r.output
    assert not ran.exists()
    noted = next(line for line in r.output.splitlines() if line.startswith("memory/"))
    # A .gitattributes naming a filter is left uncommitted (another clone's sync would
    # refuse it: agent/vault/kinds.py), and said so; the hand edit beside it is committed.
    assert "filter" in r.output and ".gitattributes" in r.output
    assert subjects(vault)[:2] == ["note: add 1 line to " + noted.split(":")[0],
                                   "edit: MEMORY.md by hand"]
    assert ".gitattributes" in vault.dirty_paths()


def test_note_to_a_daily_note_linking_out_changes_nothing(vault, run, secret_file, fixed_now):
    rel = TODAY_NOTE                                  # the day the note is written to
    (vault.root / "memory").mkdir(exist_ok=True)
    os.symlink(secret_file, vault.root / rel)
    head = vault.head()
    r = run("note", "x")
    assert r.exit_code == 1 and "outside the vault" in r.output
    assert vault.head() == head
    assert secret_file.read_text().startswith("ANTHROPIC_API_KEY")


def test_a_turns_staged_vault_offers_no_git_revert_or_checkout(vault):
    """What a tool is handed (a StagedVault) offers what a turn may do, and nothing of
    the real vault by forwarding: no git, no revert, no checkout, no lock or journal."""
    from agent.vault.staged import StagedVault

    staged = StagedVault(vault)
    for name in ("git", "revert", "checkout_commit", "identity", "journal", "lock",
                 "commit_paths", "init"):
        assert not hasattr(staged, name), name
    assert staged.head() == vault.head() and staged.host() == vault.host()
    staged.write_text("notes.md", "staged\n")
    assert not (vault.root / "notes.md").exists()
