"""Forgetting played by an attacker and by kill -9 (issue 31).

- A tombstone (`.forgotten`) another machine sends is held: `agent sync` shows it, with
  its text's length and the commits it would rewrite here, and nothing is rewritten
  until `agent sync accept`; one below the local minimum length is never applied.
- `agent forget` killed at any git step leaves a vault the next command finishes or
  rolls back: never old history beside new, never the phrase in `.agent/`.
- After a forget, `git fsck` is clean and `agent doctor` reports no damage.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from fakeanthropic import reply
from helpers import agent, clone  # remote: a fixture of conftest


def git(where, *args, input=None) -> str:
    return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True,
                          check=True, input=input).stdout


def history(vault) -> list[str]:
    return vault.git("log", "--format=%H", "--all").split()


def transcripts(vault) -> dict[str, str]:
    return {str(p.relative_to(vault.root)): p.read_text()
            for p in sorted((vault.root / "sessions").rglob("*.jsonl"))}


def forged_stone(repo: Path, phrase: str, path: str) -> dict:
    """A tombstone for `phrase` as anyone with plain git can make one in `repo`: HEAD
    paired with a commit made to look like its rewrite (the phrase in `path` replaced),
    so that a vault can "recover" the phrase from its own copy."""
    x = git(repo, "rev-parse", "HEAD").strip()
    text = git(repo, "show", f"{x}:{path}")
    assert phrase in text
    blob = git(repo, "hash-object", "-w", "--stdin",
               input=text.replace(phrase, "[forgotten]")).strip()
    env = {**os.environ, "GIT_INDEX_FILE": str(repo / ".git" / "forge-index")}
    for args in (["read-tree", x], ["update-index", "--cacheinfo", f"100644,{blob},{path}"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True,
                          text=True, check=True).stdout.strip()
    message = git(repo, "log", "-1", "--format=%B", x)
    parents = git(repo, "rev-list", "--parents", "-n", "1", x).split()[1:]
    n = git(repo, "commit-tree", tree, *[a for p in parents for a in ("-p", p)], "-m",
            message).strip()
    salt = secrets.token_hex(16)
    return {"id": f"f-{secrets.token_hex(6)}", "at": "2026-11-26T10:00:00+00:00",
            "salt": salt, "length": len(phrase), "rewrote": {x: n},
            "hash": hashlib.pbkdf2_hmac("sha256", phrase.encode(), bytes.fromhex(salt),
                                        20_000).hex()}


def forge_tombstone(tmp_path: Path, bare: Path, phrase: str = '"') -> str:
    """What an attacker with a plain git clone of the remote does: a merge that adds a
    `.forgotten` tombstone for `phrase` (in agent.toml) and its made-up rewrite, pushed.
    The tombstone's id."""
    atk = tmp_path / "attacker"
    subprocess.run(["git", "clone", "-q", str(bare), str(atk)], check=True)
    git(atk, "config", "user.name", "Mallory")
    git(atk, "config", "user.email", "m@example.com")
    stone = forged_stone(atk, phrase, "agent.toml")
    (atk / ".forgotten").write_text(json.dumps({"version": 1, "forgotten": [stone]}))
    git(atk, "add", ".forgotten")
    git(atk, "commit", "-q", "-m", "forget: a phrase removed")
    git(atk, "merge", "-q", "-s", "ours", "--no-edit", *stone["rewrote"].values())
    git(atk, "push", "-q", "origin", "HEAD:main")
    return stone["id"]


def test_a_remotes_forged_tombstone_is_held_and_never_rewrites_history(
        fake_anthropic, tmp_path, vault, remote):  # noqa: F811
    fake_anthropic.add(reply("Noted."))
    agent(vault.root, "chat", "-m", 'my favourite quote is "carpe diem"')
    agent(vault.root, "note", 'she said "hello"')
    agent(vault.root, "sync")
    ids, toml, talk = history(vault), (vault.root / "agent.toml").read_text(), transcripts(vault)
    assert '"' in toml and any('\\"' in t for t in talk.values())
    stone = forge_tombstone(tmp_path, remote)

    r = agent(vault.root, "sync")
    assert "forget: applied" not in r.output
    assert f"held: forgotten phrase {stone} (1 character, would rewrite " in r.output
    assert "from origin (this machine keeps its own version" in r.output
    assert "under the 4-character minimum: never applied here" in r.output
    assert "nothing was merged or pushed" in r.output
    assert [c for c in history(vault) if c in ids] == ids
    assert vault.head() == ids[0]
    assert (vault.root / "agent.toml").read_text() == toml
    tomllib.loads(toml)
    assert transcripts(vault) == talk
    assert '[forgotten]' not in vault.git("log", "-p", "HEAD")

    r = agent(vault.root, "sync", "held")
    assert f"held: forgotten phrase {stone}" in r.output and "1 character" in r.output
    assert f".forgotten#{stone}" in agent(vault.root, "status", "--json").output

    r = agent(vault.root, "sync", "accept", ok=False)      # whatever is accepted: never
    assert r.exit_code == 1
    assert "under the 4-character minimum" in r.output
    assert vault.head() == ids[0] and (vault.root / "agent.toml").read_text() == toml

    r = agent(vault.root, "sync", "reject")
    assert f"Rejected forgotten phrase {stone}" in r.output
    r = agent(vault.root, "sync")                  # the rest of what came in is merged
    assert "forget: applied" not in r.output and "held" not in r.output
    assert vault.head() != ids[0] and ids[0] in history(vault)
    assert (vault.root / "agent.toml").read_text() == toml
    assert transcripts(vault) == talk


def test_a_tombstone_committed_here_by_anyone_but_agent_forget_waits_too(vault, remote):  # noqa: F811
    # A hand edit (or a turn's write) of .forgotten: the vault did not make that forget.
    agent(vault.root, "note", "the gate code is orchid-lantern-77")
    path = vault.git("grep", "-l", "orchid-lantern-77", "HEAD").split(":", 1)[1].strip()
    stone = forged_stone(vault.root, "orchid-lantern-77", path)
    (vault.root / ".forgotten").write_text(json.dumps({"version": 1, "forgotten": [stone]}))
    agent(vault.root, "note", "another line")          # commits it as a hand edit
    ids = history(vault)
    r = agent(vault.root, "sync")
    assert f"held: forgotten phrase {stone['id']} (17 characters, would rewrite " in r.output
    assert "nothing was merged or pushed" in r.output and history(vault) == ids
    r = agent(vault.root, "sync", "accept", stone["id"])      # the person's yes: applied
    assert f"Accepted forgotten phrase {stone['id']}" in r.output
    assert "orchid-lantern-77" not in vault.git("log", "--all", "-p")
    r = agent(vault.root, "sync")
    assert "held" not in r.output and "not pushed" not in r.output
    assert vault.head() == git(remote, "rev-parse", "main").strip()


def graph_written(vault) -> bool:
    info = vault.git_dir / "objects" / "info"
    return (info / "commit-graph").exists() or (info / "commit-graphs").exists()


def test_after_forget_the_repository_is_sound_for_fsck_and_doctor(vault, run):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- The alarm code is 80417 at home\n")
    for i in range(3):
        run("note", f"a line {i}")
    assert run("why", "alarm code").exit_code == 0
    # `agent why` writes the commit-graph in the background: it names every commit.
    from conftest import wait_for
    wait_for(lambda: graph_written(vault) and not (
        vault.git_dir / "objects" / "info" / "commit-graph.lock").exists(), "the commit-graph")
    r = run("forget", "--yes", "alarm code is 80417")
    assert r.exit_code == 0, r.output
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=vault.root, capture_output=True,
                          text=True, check=False)
    assert fsck.returncode == 0, fsck.stderr
    r = run("doctor")
    assert "damaged" not in r.output and "git fsck" in r.output
    assert run("why", "alarm").exit_code in (0, 1)       # history reads work after it


# ---- kill -9 at each step of `agent forget` --------------------------------------------

KILLER = """#!/bin/sh
# git, except that the call whose arguments hold $KILL_BEFORE kills its caller's process
# group (the agent and every git it runs) with SIGKILL before it starts.
case "$*" in *"$KILL_BEFORE"*)
    read -r _ _ _ _ pgid _ < /proc/$$/stat
    kill -KILL -"$pgid";;
esac
exec {git} "$@"
"""
SECRET = "the locker code is 5521-alpha"
# Each step is the git command the kill comes just before, and what the next command
# then does: roll the forget back (nothing forgotten, the history as it was) or finish it.
STEPS = {
    "fast-export --show-original-ids": "undone",     # journalled, nothing moved yet
    "update-ref --no-deref --stdin": "undone",       # filter-repo about to move the refs
    "reset --quiet --hard": "undone",                # refs moved, the work tree still old
    "commit-tree": "undone",                         # the tombstone commit being made
    "update-ref -m commit: forget": "undone",        # made, HEAD not yet on it
    "reflog expire": "finished",                     # the new history whole: pruning
    "gc --quiet --prune=now": "finished",            # git packs what a ref reaches
    "push --quiet": "finished",                      # all done here, the remote not told
}


def secret_in(path: Path) -> list[str]:
    """The files under `path` (recursively) that hold the secret."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")
                  if p.is_file() and SECRET.encode() in p.read_bytes())


def killed(tmp_path: Path, vault, step: str, *args: str) -> None:
    """Run `agent ARGS` and kill it with SIGKILL just before its git command whose
    arguments hold `step`."""
    bin_dir = tmp_path / "killer"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "git").write_text(KILLER.format(git=shutil.which("git")))
    (bin_dir / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KILL_BEFORE": step,
           "AGENT_EMBED": "off"}
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), *args],
                       env=env, capture_output=True, text=True, start_new_session=True,
                       check=False)
    assert p.returncode == -9, p.stdout + p.stderr               # killed at that step


def by_hand(vault) -> list[str]:
    return [s for s in vault.git("log", "--format=%s").splitlines()
            if s.startswith(("edit", "recover"))]


def objects_hold(where) -> bool:
    out = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=where,
                         capture_output=True, check=True).stdout
    return SECRET.encode() in out


@pytest.mark.parametrize("step", list(STEPS))
def test_forget_killed_at_any_step_is_finished_or_undone_by_the_next_command(
        tmp_path, vault, remote, step):  # noqa: F811
    (vault.root / "MEMORY.md").write_text(f"# Memory\n\n- {SECRET}\n")
    agent(vault.root, "note", f"told it {SECRET}")
    agent(vault.root, "note", "an unrelated line")
    agent(vault.root, "sync")
    vault.git("remote", "set-head", "origin", "main")      # a symbolic ref, as a clone has
    before, remote_before = history(vault), git(remote, "rev-parse", "main").strip()
    edits = by_hand(vault)
    killed(tmp_path, vault, step, "forget", "--yes", SECRET)

    r = agent(vault.root, "sync")                    # the next command: a plain sync
    assert vault.dirty_paths() == []
    assert by_hand(vault) == edits, "the old tree committed as a hand edit"
    assert not (vault.root / ".agent" / "forget").exists()
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=vault.root, capture_output=True,
                          text=True, check=False)
    assert fsck.returncode == 0, fsck.stderr
    if STEPS[step] == "undone":
        assert "an interrupted `agent forget` was undone" in r.output
        assert history(vault) == before and git(remote, "rev-parse", "main").strip() == \
            remote_before
        assert [f for f in secret_in(vault.root / ".agent")
                if not f.startswith("index.sqlite")] == []
        r = agent(vault.root, "forget", "--yes", SECRET)          # and it can be run again
        assert "every object: 0  ✓" in r.output
    else:
        if step != "push --quiet":
            assert "an interrupted `agent forget` was finished" in r.output
        assert len(history(vault)) <= len(before) + 1             # never old beside new
        assert secret_in(vault.root / ".agent") == []
    assert SECRET not in vault.git("log", "--all", "-p")
    assert not objects_hold(vault.root) and not objects_hold(remote)
    assert SECRET not in (vault.root / "MEMORY.md").read_text()


def test_an_accept_killed_mid_rewrite_is_undone_and_still_waits(tmp_path, vault, remote):  # noqa: F811
    agent(vault.root, "note", f"told it {SECRET}")
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    agent(vault.root, "forget", "--yes", SECRET)
    assert "held: forgotten phrase" in agent(b.root, "sync").output
    ids = history(b)
    killed(tmp_path, b, "reset --quiet --hard", "sync", "accept")
    r = agent(b.root, "sync")
    assert "an interrupted `agent sync accept` was undone" in r.output
    assert "held: forgotten phrase" in r.output and history(b) == ids
    assert b.dirty_paths() == []
    agent(b.root, "sync", "accept")
    agent(b.root, "sync")
    assert SECRET not in b.git("log", "--all", "-p") and not objects_hold(b.root)
    assert b.head() == git(remote, "rev-parse", "main").strip()


def test_a_forget_here_never_pushes_over_a_forget_that_waits(tmp_path, vault, remote):  # noqa: F811
    agent(vault.root, "note", f"told it {SECRET}")
    agent(vault.root, "note", "and the bike lock is 0451-moss")
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    agent(vault.root, "forget", "--yes", SECRET)
    pushed, head = git(remote, "rev-parse", "main").strip(), b.head()
    r = agent(b.root, "forget", "--yes", "0451-moss", ok=False)
    assert r.exit_code == 1 and "Nothing was forgotten: a forget made on another machine " \
        "waits for your decision here" in r.output
    assert git(remote, "rev-parse", "main").strip() == pushed and b.head() == head
    assert "0451-moss" in b.git("log", "-p")
