"""What the vault does when something that came in cannot be taken: a sync's checkout
git refuses (a tree with an entry named `..`) stops no one for good and loses nothing,
and what the model writes to workspace/ is committed within a quota and never as a
link leading out of the vault. Real git, the real CLI, the fake Anthropic API, real bwrap."""

from __future__ import annotations

import json
import os
import subprocess


from conftest import agent_proc, subjects
from fakeanthropic import reply, tool_use
from helpers import history, needs_bwrap, tool_result


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


def test_a_refused_first_sync_into_a_vault_with_no_commit_is_given_up_without_a_traceback(
        tmp_path):
    """A clone's first checkout (HEAD had no commit yet) refused by git: `doctor --fix`
    gives it up and says the vault has no commit, the person's agent.toml kept."""
    from agent.vault.repo import Vault

    root = tmp_path / "fresh"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    (root / "agent.toml").write_text("[agent]\n")
    vault = Vault.open(root)
    evil = vault.git("hash-object", "-w", "--stdin", input="evil\n").strip()
    tree = vault.git("mktree", input=f"100644 blob {evil}\t..\n").strip()
    new = vault.git("commit-tree", tree, "-m", "from the remote").strip()
    vault.state.mkdir()
    (vault.state / "checkout.json").write_text(json.dumps(
        {"old": None, "new": new, "reflog": "sync: first checkout"}))

    f = agent_proc("doctor", "--fix", vault=root)
    assert "Traceback" not in f.stderr, f.stderr
    assert (f"gave up the interrupted sync to {new[:7]}, which git refuses to check out: "
            f"the vault stays with no commit") in f.stdout
    assert (root / "agent.toml").read_text() == "[agent]\n"
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


# ---- what the model's commands may commit ---------------------------------------------

def set_exec(vault, key: str, value: str) -> None:
    toml = vault.root / "agent.toml"
    text = toml.read_text()
    assert f"\n{key} = " in text
    toml.write_text("\n".join(f"{key} = {value}" if l.startswith(f"{key} = ") else l
                              for l in text.split("\n")))


@needs_bwrap
def test_a_turn_commits_workspace_only_within_its_quota(fake_anthropic, vault, run):
    ws = vault.root / "workspace"
    fake_anthropic.add(
        reply(tool_use("exec", {"command": "head -c 60M /dev/zero > big.bin; echo 42 > small.txt"})),
        reply("Done."))
    r = run("chat", "-m", "make the data")
    assert r.exit_code == 0, r.output
    told = tool_result(fake_anthropic, 1)
    assert "not saved with this turn" in told
    assert ("workspace/big.bin: 60 MiB, past the 50 MiB one turn may add to the vault "
            "([exec] workspace_quota)") in told
    assert "Not committed, left in place: workspace/big.bin: 60 MiB" in r.output
    assert subjects(vault)[0] == "chat(cli/default): make the data"
    assert "workspace/small.txt" in vault.git("show", "--name-only", "--format=", "HEAD")
    assert "big.bin" not in history(vault)
    assert (ws / "big.bin").stat().st_size == 60 * 1024 * 1024        # left in place

    r = run("note", "after the turn")
    assert r.exit_code == 0, r.output
    assert "big.bin" not in history(vault) and "big.bin" not in r.output
    assert vault.git("status", "--porcelain").strip() == "?? workspace/big.bin"
    status = run("status").output
    assert "hand edits: none" in status
    assert "left out:   1 file no commit takes (workspace/big.bin: 60 MiB, past" in status

    # A later turn's commands do not sweep it in either, nor does a change to a small file.
    fake_anthropic.add(reply(tool_use("exec", {"command": "echo 43 > small.txt"})),
                       reply("Again."))
    assert run("chat", "-m", "again").exit_code == 0
    assert "big.bin" not in history(vault) and "big.bin" not in tool_result(fake_anthropic, 3)
    assert vault.git("show", "--name-only", "--format=", "HEAD").split() == [
        next(p for p in vault.git("show", "--name-only", "--format=", "HEAD").split()
             if p.startswith("sessions/")), "workspace/small.txt"]


@needs_bwrap
def test_the_overflow_past_the_quota_is_left_out_in_name_order(fake_anthropic, vault, run):
    set_exec(vault, "workspace_quota", '"1M"')
    vault.git("commit", "-qam", "a small quota")
    fake_anthropic.add(reply(tool_use("exec", {
        "command": "head -c 600K /dev/zero > a.bin; head -c 600K /dev/zero > b.bin; "
                   "echo c > c.txt"})), reply("Done."))
    assert run("chat", "-m", "three files").exit_code == 0
    committed = vault.git("show", "--name-only", "--format=", "HEAD").split()
    assert "workspace/a.bin" in committed and "workspace/c.txt" in committed
    assert "workspace/b.bin" not in committed
    assert "workspace/b.bin: 600 KiB, past the 1 MiB" in tool_result(fake_anthropic, 1)


@needs_bwrap
def test_a_link_out_made_by_a_command_is_left_out_and_the_turn_saved(fake_anthropic, vault, run):
    fake_anthropic.add(reply(tool_use("exec", {
        "command": "ln -s /etc/hostname host; ln -s ../../outside up; "
                   "ln -s ../.git/config gitconf; ln -s ../MEMORY.md memory-link; "
                   "echo 42 > answer.txt"})), reply("Linked."))
    r = run("chat", "-m", "link things")
    assert r.exit_code == 0, r.output
    assert "Error" not in r.output
    committed = vault.git("show", "--name-only", "--format=", "HEAD").split()
    assert "workspace/answer.txt" in committed
    assert "workspace/memory-link" in committed                  # inside the vault: fine
    for name in ("host", "up", "gitconf"):
        assert f"workspace/{name}" not in history(vault)
        assert os.path.islink(vault.root / "workspace" / name)    # left in place
    told = tool_result(fake_anthropic, 1)
    assert "workspace/host: a symlink leading out of the vault (to '/etc/hostname')" in told
    assert "workspace/gitconf: a symlink into .git/" in told
    assert "Not committed, left in place: workspace/up: a symlink leading out" in r.output
    # The next command's own commit of what it finds does not take them either.
    r = run("note", "after")
    assert r.exit_code == 0, r.output
    assert "workspace/host" not in history(vault)
    assert "host" not in r.output                        # said once, with the turn


def test_a_link_out_is_never_committed_by_the_hand_edit_or_recovery_commit(vault, run, tmp_path):
    ws = vault.root / "workspace"
    ws.mkdir(exist_ok=True)
    os.symlink("/etc/passwd", ws / "planted")               # by hand
    os.symlink("../USER.md", ws / "user")                   # by hand, inside: committed
    r = run("note", "one")
    assert r.exit_code == 0, r.output
    assert ("workspace/planted: a symlink leading out of the vault (to '/etc/passwd'); "
            "not committed") in r.output
    assert "workspace/planted" not in history(vault)
    assert "workspace/user" in vault.git("ls-files")
    r = run("note", "two")
    assert r.exit_code == 0 and "planted" not in r.output    # said once
    # A turn killed while its commands wrote workspace/: its claim's process is gone, so
    # the next command recovers those files as the agent's, by the turn's own rule.
    import subprocess
    gone = subprocess.Popen(["true"])
    gone.wait()
    claims = vault.state / "claims"
    claims.mkdir(exist_ok=True)
    (claims / "dead.json").write_text(json.dumps(
        {"pid": gone.pid, "prefix": "workspace", "quota": 1024}))
    os.symlink(str(tmp_path), ws / "escape")
    (ws / "a.txt").write_text("x" * 800)
    (ws / "b.txt").write_text("y" * 800)
    r = run("note", "three")
    assert r.exit_code == 0, r.output
    assert "workspace/escape: a symlink leading out" in r.output
    assert "workspace/b.txt: 800 bytes, past the 1 KiB one turn may add" in r.output
    tracked = vault.git("ls-files").split()
    assert "workspace/a.txt" in tracked
    assert "workspace/b.txt" not in tracked and "workspace/escape" not in tracked
    assert "recover" in vault.git("log", "--format=%s").split("\n")[1]
    # A file left out is judged again once it changes: made small, it is committed.
    (ws / "b.txt").write_text("small now\n")
    assert run("note", "four").exit_code == 0
    assert "workspace/b.txt" in vault.git("ls-files").split()


def test_a_pushed_tree_git_refuses_leaves_the_vault_working(tmp_path, vault, run):
    """The whole path: a second clone made with plain git pushes a commit whose tree has
    an entry named `..`; the sync that takes it fails, and the vault is as it was."""
    import subprocess
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    vault.git("remote", "add", "origin", str(bare))
    assert run("sync").exit_code == 0
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(bare), str(other)], check=True)

    def git(*args, input=None):
        return subprocess.run(["git", "-C", str(other), *args], input=input, text=True,
                              capture_output=True, check=True).stdout.strip()
    blob = git("hash-object", "-w", "--stdin", input="pwned\n")
    memory = git("hash-object", "-w", "--stdin", input="# Memory\n\n- the remote's fact\n")
    listing = "".join(l + "\n" for l in git("ls-tree", "HEAD").splitlines()
                      if not l.endswith("\tMEMORY.md"))
    tree = git("mktree", input=listing + f"100644 blob {memory}\tMEMORY.md\n"
                                         f"100644 blob {blob}\t..\n")
    commit = git("commit-tree", tree, "-p", "HEAD", "-m", "innocent")
    git("push", "-q", "origin", f"{commit}:refs/heads/main")

    before, memory_before = vault.head(), (vault.root / "MEMORY.md").read_text()
    p = agent_proc("sync", vault=vault.root)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert vault.head() == before
    assert (vault.root / "MEMORY.md").read_text() == memory_before
    assert not (tmp_path / "pwned").exists() and not (vault.root.parent / "..").is_file()
    assert not (vault.state / "checkout.json").exists()
    d = agent_proc("doctor", vault=vault.root)
    assert "sync journal" not in d.stdout
    p = agent_proc("note", "still works", vault=vault.root)
    assert p.returncode == 0, p.stderr
    assert vault.git("rev-parse", "HEAD~1").strip() == before
    assert vault.dirty_paths() == []
