"""The vault and its everyday commands, through the real CLI and real git."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.vault.change import Change
from agent.stores.archive import load as load_entry
from agent.stores.frontmatter_io import FrontmatterError
from agent.vault.repo import Vault
from conftest import TODAY_NOTE, agent_proc, authors, subjects, vault_lock_held, wait_for

# Every command here runs at conftest.NOW (2030-01-01 10:00 UTC), so a note's day is known.
pytestmark = pytest.mark.usefixtures("fixed_now")


def today_note(vault: Vault) -> Path:
    return vault.root / TODAY_NOTE


# ---- init ---------------------------------------------------------------------------


def test_init_makes_a_vault_from_the_template(tmp_path, run):
    target = tmp_path / "fresh"
    result = run("init", str(target))
    assert result.exit_code == 0, result.output
    assert "Created a new vault" in result.output
    for name in ("AGENTS.md", "MEMORY.md", "USER.md", "cron.json", "agent.toml",
                 ".gitignore", ".gitattributes"):
        assert (target / name).is_file(), name
    for folder in ("memory", "sessions", "archive", "heartbeat", "skills"):
        assert (target / folder).is_dir(), folder
    assert ".agent/" in (target / ".gitignore").read_text().splitlines()
    attrs = (target / ".gitattributes").read_text()
    assert "sessions/**/*.jsonl merge=agent-lines" in attrs and "memory/*.md merge=agent-lines" in attrs
    assert "MEMORY.md merge=agent-facts" in attrs
    beats = list((target / "heartbeat").glob("*.md"))
    assert beats and all("enabled: false" in b.read_text() for b in beats)
    v = Vault.open(target)
    assert subjects(v) == ["init: new vault"]
    assert authors(v) == ["agent <agent@localhost>"]
    assert v.dirty_paths() == []
    assert json.loads((target / "cron.json").read_text()) == {"version": 1, "jobs": []}


def test_init_on_an_existing_vault_changes_nothing(vault, run):
    before = vault.head()
    result = run("init", str(vault.root))
    assert result.exit_code == 0
    assert "already a vault" in result.output
    assert vault.head() == before


def test_init_adopts_a_folder_of_notes_without_overwriting(tmp_path, run):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "MEMORY.md").write_text("# Mine\n\n- I keep bees\n")
    (notes / "ideas.md").write_text("- a shed\n")
    result = run("init", str(notes))
    assert result.exit_code == 0, result.output
    assert "Adopted" in result.output
    assert (notes / "MEMORY.md").read_text() == "# Mine\n\n- I keep bees\n"
    assert (notes / "AGENTS.md").exists()
    v = Vault.open(notes)
    assert subjects(v)[-1] == "edit: adopt existing notes as a vault"
    assert subjects(v)[0].startswith("init: adopt this folder")
    # The user's notes are in the user's commit, the template in the agent's.
    first = v.git("log", "--reverse", "--format=%H", ).split()[0]
    assert "ideas.md" in v.git("show", "--name-only", "--format=", first)
    assert authors(v)[-1] == "Test User <test@example.com>"


def test_init_adopts_an_existing_repository(tmp_path, run):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "todo.md").write_text("- milk\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "mine"], check=True)
    assert run("init", str(repo)).exit_code == 0
    v = Vault.open(repo)
    assert subjects(v)[-1] == "mine"
    assert len(subjects(v)) == 2


def test_init_refuses_to_nest_a_repository(tmp_path, run):
    outer = tmp_path / "outer"
    outer.mkdir()
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    inner = outer / "inner"
    inner.mkdir()
    (inner / "a.md").write_text("x\n")
    result = run("init", str(inner))
    assert result.exit_code == 1
    assert "inside the git repository" in result.output
    assert not (inner / ".git").exists() and not (inner / "agent.toml").exists()


# ---- which vault --------------------------------------------------------------------


def test_default_vault_is_created_on_first_use(isolated_env):
    p = agent_proc("note", "first thing")
    assert p.returncode == 0, p.stderr
    default = isolated_env / ".agent" / "vault"
    assert f"Created a new vault at {default}" in p.stderr
    assert agent_proc("path").stdout.strip() == str(default)
    assert "first thing" in "".join(f.read_text() for f in (default / "memory").glob("*.md"))


def test_agent_vault_environment_variable(vault):
    p = agent_proc("path", env={"AGENT_VAULT": str(vault.root)})
    assert p.stdout.strip() == str(vault.root)
    p = agent_proc("note", "via env", env={"AGENT_VAULT": str(vault.root)})
    assert p.returncode == 0
    assert "via env" in today_note(vault).read_text()


def test_vault_option_after_the_command(vault):
    p = agent_proc("note", "--vault", str(vault.root), "late option")
    assert p.returncode == 0, p.stderr
    assert "late option" in today_note(vault).read_text()


def test_a_vault_path_that_is_a_file_or_not_a_vault(tmp_path, run):
    f = tmp_path / "file.txt"
    f.write_text("hello\n")
    r = run("status", vault_path=f)
    assert r.exit_code == 1 and "is a file" in r.output and "Traceback" not in r.output
    plain = tmp_path / "plain"
    plain.mkdir()
    r = run("note", "x", vault_path=plain)
    assert r.exit_code == 1 and "not a vault" in r.output and "agent init" in r.output
    assert list(plain.iterdir()) == []
    r = run("status", vault_path=tmp_path / "missing")
    assert r.exit_code == 1 and "No vault at" in r.output


# ---- note, hand edits -----------------------------------------------------------------


def test_note_appends_a_timestamped_bullet_and_commits(vault, run):
    r = run("note", "call", "the", "dentist")
    assert r.exit_code == 0, r.output
    note = today_note(vault)
    lines = note.read_text().splitlines()
    assert lines[0] == "# 2030-01-01"
    assert lines[-1] == "- 10:00 call the dentist"
    rel = f"memory/{note.name}"
    assert subjects(vault)[0] == f"note: add 1 line to {rel}"
    assert vault.git("show", "--stat", "--format=", "HEAD").count("|") == 1
    r = run("note", input="from stdin\n")
    assert r.exit_code == 0
    assert note.read_text().splitlines()[-1].endswith(" from stdin")


def test_note_with_no_text_is_refused(vault, run):
    head = vault.head()
    r = run("note", input="")
    assert r.exit_code == 1 and "Nothing to note" in r.output
    assert vault.head() == head


def test_hand_edits_are_committed_first_as_the_user(vault, run):
    mem = vault.root / "MEMORY.md"
    mem.write_text(mem.read_text() + "- The cat is called Miso\n")
    run("note", "fed the cat")
    assert subjects(vault)[:2][::-1] == ["edit: MEMORY.md by hand",
                                         f"note: add 1 line to memory/{today_note(vault).name}"]
    assert authors(vault)[:2] == ["agent <agent@localhost>", "Test User <test@example.com>"]
    assert "Miso" not in vault.git("show", "HEAD")
    assert vault.dirty_paths() == []


def test_hand_edit_without_a_git_identity_uses_a_clear_fallback(vault, run, monkeypatch, tmp_path):
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    (vault.root / "USER.md").write_text("# User\n\n- Lives in Lyon\n")
    assert run("note", "x").exit_code == 0
    name, email = vault.git("log", "-1", "--skip=1", "--format=%an|%ae").strip().split("|")
    assert name and "@" in email and email != "agent@localhost"


def test_commits_never_run_the_vaults_hooks(vault, run):
    hook = vault.root / ".git" / "hooks" / "pre-commit"
    marker = vault.root.parent / "hook-ran"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    hook.chmod(0o755)
    assert run("note", "hooks are off").exit_code == 0
    assert not marker.exists()


# ---- status and log ---------------------------------------------------------------------


def test_status_reports_head_edits_counts_and_cursor(vault, run):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n- a\n- b\n")
    r = run("status")
    assert r.exit_code == 0
    assert f"vault:      {vault.root}" in r.output
    assert "init: new vault" in r.output
    assert "hand edits: 1 uncommitted (MEMORY.md)" in r.output
    assert "2 facts in MEMORY.md" in r.output
    assert "cursor 0, newest archive 0" in r.output
    assert vault.dirty_paths() == ["MEMORY.md"]  # status changes nothing



def test_status_counts_the_archive_entries_the_dream_has_not_consolidated(vault, run):
    for i in range(1, 8):
        path = vault.root / f"archive/2026/0{1 + i % 2}/{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\nid: {i}\nsession: cli/default\ncreated: '2026-01-0{i}T10:00:00+00:00'\n"
                        f"topic: t{i}\nimportance: 0.5\n---\nSummary {i}.\n")
    (vault.root / ".dream_cursor").write_text("# consolidated\n1-2\n4\n6-6\n")
    r = run("status")
    assert r.exit_code == 0, r.output
    assert "archive:    7 entries" in r.output
    assert "dream:      cursor 6, newest archive 7 (3 waiting)" in r.output

def test_log_shows_memory_history_as_diffs(vault, run):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n- likes tea\n")
    run("note", "x")
    r = run("log")
    assert r.exit_code == 0
    assert "+- likes tea" in r.output and "edit: MEMORY.md by hand" in r.output
    r = run("log", "--oneline")
    assert "edit: MEMORY.md by hand" in r.output and "+- likes tea" not in r.output
    r = run("log", "-n", "1", "--oneline", "memory")
    assert len(r.output.strip().splitlines()) == 1 and "note:" in r.output


def test_git_passthrough_runs_in_the_vault(vault):
    p = agent_proc("git", "log", "--format=%s", vault=vault.root)
    assert p.returncode == 0 and p.stdout.strip() == "init: new vault"
    p = agent_proc("git", "rev-parse", "--verify", "nope", vault=vault.root)
    assert p.returncode != 0


# ---- undo -------------------------------------------------------------------------------


def test_undo_reverts_the_newest_agent_commit(vault, run):
    run("note", "one")
    run("note", "two")
    r = run("undo")
    assert r.exit_code == 0, r.output
    assert subjects(vault)[0].startswith('undo: revert "note: add 1 line')
    text = today_note(vault).read_text()
    assert "one" in text and "two" not in text
    # A second undo steps further back instead of redoing.
    run("undo")
    assert not today_note(vault).exists()  # the first note made the file
    assert "Reverts:" in vault.git("log", "-1", "--format=%B")


def test_undo_refuses_hand_edits_init_and_conflicts(vault, run):
    init_sha = vault.head()
    r = run("undo")
    assert r.exit_code == 1 and "Nothing to undo" in r.output
    r = run("undo", init_sha[:8])
    assert r.exit_code == 1 and "init commit" in r.output
    (vault.root / "MEMORY.md").write_text("# Memory\n- hand\n")
    run("note", "n")
    hand = vault.git("log", "-1", "--skip=1", "--format=%H").strip()
    r = run("undo", hand)
    assert r.exit_code == 1 and "not made by the agent" in r.output

    # An agent change to a line the user then rewrote cannot be reverted cleanly.
    with vault.locked():
        vault.write_text("USER.md", "# User\n\n- Lives in Oslo\n")
        agent_sha = vault.commit(Change("remember", "update USER.md"))
    (vault.root / "USER.md").write_text("# User\n\n- Lives in Bergen\n")
    run("note", "moved")
    head = vault.head()
    r = run("undo", agent_sha)
    assert r.exit_code == 1 and "conflicts" in r.output and "USER.md" in r.output
    assert vault.head() == head and vault.dirty_paths() == []
    assert "Bergen" in (vault.root / "USER.md").read_text()


# ---- import -----------------------------------------------------------------------------


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_import_keeps_ids_and_times_and_is_idempotent(vault, run, tmp_path):
    src = write_jsonl(tmp_path / "chat.jsonl", [
        {"session": "old/trip", "role": "user", "content": "Book Kyoto", "ts": "2024-03-01T10:00:00+09:00", "id": "D1:1"},
        {"session": "old/trip", "role": "assistant", "content": "Done", "ts": "2024-03-01T10:01:00+09:00", "id": "D1:2"},
        {"session": "old/trip", "role": "user", "content": "Thanks", "ts": "2024-04-02T09:00:00+09:00"},
    ])
    r = run("import", str(src))
    assert r.exit_code == 0, r.output
    assert subjects(vault)[0] == "import: add 3 messages to 1 session from chat.jsonl"
    march = vault.root / "sessions/old/trip/2024-03.jsonl"
    lines = [json.loads(x) for x in march.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["D1:1", "D1:2"]
    assert lines[0]["ts"] == "2024-03-01T10:00:00+09:00" and lines[0]["turn"] == 1
    assert (vault.root / "sessions/old/trip/2024-04.jsonl").exists()
    head = vault.head()
    r = run("import", str(src))
    assert r.exit_code == 0 and "Nothing to import" in r.output
    assert vault.head() == head


def test_import_with_malformed_lines_imports_nothing(vault, run, tmp_path):
    src = write_jsonl(tmp_path / "bad.jsonl", [
        {"session": "a/b", "role": "user", "content": "ok", "ts": "2024-01-01T00:00:00Z"},
        "{not json",
        {"session": "a/b", "role": "robot", "content": "x", "ts": "2024-01-01T00:00:00Z"},
        {"session": "a/b", "role": "user", "content": "x"},
    ])
    head = vault.head()
    r = run("import", str(src))
    assert r.exit_code == 1
    assert f"{src}:2: not valid JSON" in r.output
    assert f"{src}:3: role must be" in r.output
    assert f"{src}:4: missing ts" in r.output
    assert vault.head() == head and not (vault.root / "sessions/a").exists()


def test_a_malformed_session_line_is_named_with_its_file_and_line(vault, run, tmp_path):
    sess = vault.root / "sessions/cli/default"
    sess.mkdir(parents=True)
    (sess / "2026-01.jsonl").write_text('{"id":"1","ts":"2026-01-01T00:00:00Z","role":"user","content":"a","turn":1}\n{oops\n')
    vault.git("add", "-A")
    vault.git("commit", "-qm", "broken by hand")
    src = write_jsonl(tmp_path / "more.jsonl", [
        {"session": "cli/default", "role": "user", "content": "b", "ts": "2026-01-02T00:00:00Z"}])
    before = (sess / "2026-01.jsonl").read_bytes()
    r = run("import", str(src))
    assert r.exit_code == 1
    assert "sessions/cli/default/2026-01.jsonl:2: not valid JSON" in r.output
    assert (sess / "2026-01.jsonl").read_bytes() == before


def test_broken_frontmatter_is_named(vault):
    p = vault.root / "archive/2026/01/1.md"
    p.parent.mkdir(parents=True)
    p.write_text("---\nid: 1\ntopic: [unclosed\n---\nbody\n")
    with pytest.raises(FrontmatterError) as e:
        load_entry(vault.root, "archive/2026/01/1.md")
    assert "archive/2026/01/1.md" in str(e.value) and "broken frontmatter" in str(e.value)


# ---- concurrency and crashes --------------------------------------------------------------


def test_four_processes_six_notes_each(vault):
    script = ("import subprocess,sys\n"
              "for i in range(6):\n"
              "    p = subprocess.run([sys.executable,'-m','agent','--vault',sys.argv[1],'note',"
              "f'p{sys.argv[2]} n{i}'],capture_output=True,text=True)\n"
              "    if p.returncode:\n"
              "        sys.exit(f'note {i} of process {sys.argv[2]} failed: {p.stderr}')\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(vault.root), str(p)])
             for p in range(4)]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    # Every daily note: a run that crosses midnight writes to two days' notes.
    notes = sorted((vault.root / "memory").glob("*.md"))
    bullets = [l for n in notes for l in n.read_text().splitlines() if l.startswith("- ")]
    assert len(bullets) == 24
    assert sorted(b.split(" ", 2)[2] for b in bullets) == sorted(
        f"p{p} n{i}" for p in range(4) for i in range(6))
    assert sum(s.startswith("note: add 1 line") for s in subjects(vault)) == 24
    assert vault.dirty_paths() == []
    fsck = subprocess.run(["git", "fsck", "--strict"], cwd=vault.root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    # The lock is an flock: nothing stale is left to clean up; a new command just runs.
    assert agent_proc("note", "after", vault=vault.root).returncode == 0


WRITER = r"""
import sys, time, json
from agent.vault.repo import Vault
v = Vault.open(sys.argv[1])
mode = sys.argv[2]
rel = "sessions/cli/default/2026-11.jsonl"
with v.locked():
    if mode == "torn":
        v.append_lines(rel, [json.dumps({"id": "m1", "ts": "2026-11-20T10:00:00+00:00", "role": "user", "content": "whole", "turn": 1})])
        path = v.root / rel
        with open(path, "a") as f:
            f.write('{"id": "m2", "ts": "2026-11-20T10:0')
            f.flush()
        print("ready", flush=True)
        time.sleep(60)          # held mid-write until the test kills it
    elif mode == "uncommitted":
        v.append_lines(rel, [json.dumps({"id": "m1", "ts": "2026-11-20T10:00:00+00:00", "role": "user", "content": "kept", "turn": 1})])
        print("ready", flush=True)
        time.sleep(60)          # held before the commit until the test kills it
    else:
        i = 0
        print("ready", flush=True)
        while True:
            i += 1
            v.append_lines(rel, [json.dumps({"id": f"m{i}", "ts": "2026-11-20T10:00:00+00:00", "role": "user", "content": "x" * (i % 5000), "turn": i})])
            v.commit(Change("chat", f"message {i}", scope="cli/default"))
"""


def start_writer(vault: Vault, mode: str) -> subprocess.Popen:
    # A session of its own, so a kill takes the writer's git children down with it.
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(vault.root), mode],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_kill_9_mid_line_sets_the_torn_line_aside(vault):
    p = start_writer(vault, "torn")
    p.send_signal(signal.SIGKILL)
    p.wait()
    r = agent_proc("note", "after the crash", vault=vault.root)
    assert r.returncode == 0, r.stderr
    assert "Recovered: sessions/cli/default/2026-11.jsonl -> .agent/recovered/" in r.stderr
    session = vault.root / "sessions/cli/default/2026-11.jsonl"
    assert [json.loads(l)["content"] for l in session.read_text().splitlines()] == ["whole"]
    kept = list((vault.root / ".agent/recovered").iterdir())
    assert len(kept) == 1 and kept[0].read_text() == '{"id": "m2", "ts": "2026-11-20T10:0'
    assert subjects(vault)[1] == "recover: sessions/cli/default/2026-11.jsonl left by an interrupted command"
    assert authors(vault)[1] == "agent <agent@localhost>"
    assert vault.dirty_paths() == []


def test_kill_9_before_commit_leaves_nothing_lost(vault):
    p = start_writer(vault, "uncommitted")
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert agent_proc("note", "next", vault=vault.root).returncode == 0
    assert "kept" in vault.git("show", "HEAD~1:sessions/cli/default/2026-11.jsonl")
    assert vault.dirty_paths() == []


def test_kill_9_at_random_moments_always_leaves_a_consistent_vault(vault):
    session = vault.root / "sessions/cli/default/2026-11.jsonl"
    for delay in (0.05, 0.13, 0.21, 0.34, 0.55):
        p = start_writer(vault, "loop")
        time.sleep(delay)       # the kill's moment is the variable here, not a hoped-for state
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        r = agent_proc("status", vault=vault.root)
        assert r.returncode == 0, r.stderr
        r = agent_proc("note", f"after kill at {delay}", vault=vault.root)
        assert r.returncode == 0, r.stderr
        assert vault.dirty_paths() == []
        if session.exists():
            for line in session.read_text().splitlines():
                json.loads(line)  # every kept line is whole
        fsck = subprocess.run(["git", "fsck"], cwd=vault.root, capture_output=True, text=True)
        assert fsck.returncode == 0, fsck.stderr


# ---- start-up -----------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--help"], ["note", "quick"], ["status"], ["log"]])
def test_commands_without_a_model_do_not_import_anthropic(vault, args):
    code = ("import sys\nfrom agent.cli.app import cli\n"
            "try:\n    cli(sys.argv[1:], prog_name='agent')\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print('anthropic loaded:', 'anthropic' in sys.modules, file=sys.stderr)\n")
    p = subprocess.run([sys.executable, "-c", code, "--vault", str(vault.root), *args],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "anthropic loaded: False" in p.stderr


def test_every_command_has_help():
    p = agent_proc("--help")
    assert p.returncode == 0
    listing = p.stdout.split("Talk with the agent:")[1]          # the topics, then each command
    commands = [l.split()[0] for l in listing.splitlines()
                if l.startswith("  ") and l[2] != " "]      # not a wrapped description
    for name in ("init", "path", "note", "status", "log", "undo", "git", "import"):
        assert name in commands
    for name in commands:
        h = agent_proc(name, "--help")
        assert h.returncode == 0 and "Usage:" in h.stdout, name


def test_a_broken_agent_toml_is_named_and_nothing_changes(vault, run):
    (vault.root / "agent.toml").write_text('[model]\nname = "x"\nfallbacks = [oops\n')
    vault.git("add", "agent.toml")
    vault.git("commit", "-qm", "broken settings")
    head = vault.head()
    r = run("note", "x")
    assert r.exit_code == 1
    assert "agent.toml" in r.output and "line" in r.output and "Traceback" not in r.output
    assert vault.head() == head and vault.dirty_paths() == []


def test_a_git_command_holding_the_index_lock_briefly_is_waited_for(vault):
    lock = vault.root / ".git" / "index.lock"
    lock.write_text("")
    p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "note",
                          "while git was busy"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    # Once the note holds the vault lock it is looking at git's locks: only then does the
    # person's git command finish (before, the note might never have seen it).
    wait_for(lambda: vault_lock_held(vault) or p.poll() is not None, "the note to take the vault lock")
    lock.unlink()  # the person's git command finishes
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "Recovered" not in err  # it was waited for, not removed as stale
    assert "while git was busy" in today_note(vault).read_text()
    assert vault.dirty_paths() == []


def test_status_outside_the_lock_never_takes_gits_index_lock(vault, run):
    (vault.root / "MEMORY.md").touch()  # stale stat info: a plain `git status` would rewrite the index
    before = (vault.root / ".git" / "index").stat().st_mtime_ns
    assert run("status").exit_code == 0
    assert (vault.root / ".git" / "index").stat().st_mtime_ns == before


# ---- undo and init say what they did -------------------------------------------------


def test_undo_says_truthfully_when_everything_was_undone(vault, run):
    r = run("undo")
    assert r.exit_code == 1
    assert "Nothing to undo: the agent has changed nothing since the vault was made." in r.output
    run("note", "one")
    assert run("undo").exit_code == 0
    undo_sha = vault.head()[:7]
    r = run("undo")
    assert r.exit_code == 1
    assert (f"Nothing to undo: every agent change since the vault was made has been undone "
            f"(the last by {undo_sha}).") in r.output


def test_undo_conflict_names_a_deleted_file(vault, run):
    (vault.root / "notes.md").write_text("a\n")
    run("note", "commit the file")                     # notes.md committed as a hand edit
    with vault.locked():
        vault.write_text("notes.md", "a\nb\n")
        agent_sha = vault.commit(Change("remember", "add b to notes.md"))
    (vault.root / "notes.md").unlink()
    run("note", "deleted by hand")
    r = run("undo", agent_sha)
    assert r.exit_code == 1
    assert "conflicts with later changes in notes.md." in r.output
    assert "tree" not in r.output


def test_init_counts_what_the_commit_adds(tmp_path, run):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("- milk\n")
    r = run("init", str(notes))
    assert r.exit_code == 0, r.output
    v = Vault.open(notes)
    subject = v.git("log", "-1", "--format=%s").strip()
    added = v.git("show", "--name-status", "--format=", "HEAD").splitlines()
    n = sum(1 for l in added if l.startswith("A"))
    assert subject == f"init: adopt this folder as a vault ({n} files added)"


def test_hand_edits_are_committed_as_git_author_name_and_email(vault):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Likes tea\n")
    p = agent_proc("note", "x", vault=vault.root,
                   env={"GIT_AUTHOR_NAME": "Ada Lovelace", "GIT_AUTHOR_EMAIL": "ada@example.org"})
    assert p.returncode == 0, p.stderr
    assert vault.git("log", "-1", "--format=%an <%ae>|%s", "--", "MEMORY.md").strip() == \
        "Ada Lovelace <ada@example.org>|edit: MEMORY.md by hand"
