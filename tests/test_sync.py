"""`agent sync` and `agent clone`: real clones of a real bare repository.

Every rule of the sync is checked the way a person would see it: the files on both
machines, `git log`, the command's output, and that no conflict marker is ever written.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from agent.vault.change import Change
from agent.cli.app import cli
from agent.stores.merge import CONFLICT_END, CONFLICT_START
from agent.vault.repo import Vault
from conftest import subjects
from helpers import agent, clone

MARKERS = ("<<<<<<<", ">>>>>>>", "=======\n")


def no_markers(vault: Vault):
    for path in vault.root.rglob("*"):
        if ".git" in path.parts or ".agent" in path.parts or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for marker in MARKERS:
            assert marker not in text, f"{path} holds a conflict marker"


def test_sync_without_a_remote_says_how_to_add_one(vault):
    result = agent(vault.root, "sync", ok=False)
    assert result.exit_code == 1
    assert "agent git remote add origin URL" in result.output
    assert "Traceback" not in result.output


def test_clone_makes_a_ready_vault_and_sync_reports_in_and_out(tmp_path, vault, remote):
    b = clone(tmp_path, remote, "b")
    assert (b.root / "MEMORY.md").read_text() == (vault.root / "MEMORY.md").read_text()
    # The clone is set up as init sets a vault up: merge drivers, split index.
    assert "agent.sync.mergedriver" in b.git("config", "merge.agent-facts.driver")
    assert b.git("config", "core.splitIndex").strip() == "true"
    agent(b.root, "note", "from the laptop")
    agent(b.root, "note", "again from the laptop")
    out = agent(b.root, "sync").output
    assert out.strip() == "sync: 0 commits in, 2 out"
    out = agent(vault.root, "sync").output
    assert out.strip() == "sync: 2 commits in, 0 out"
    assert vault.head() == b.head()
    # Fast-forward: no merge commit was needed.
    assert "sync: merge from origin" not in subjects(vault)


def test_status_shows_ahead_behind_and_the_last_sync(tmp_path, vault, remote):
    agent(vault.root, "note", "unpushed")
    out = agent(vault.root, "status").output
    assert "sync:       1 ahead, 0 behind origin/main, last sync" in out


def test_notes_and_sessions_written_on_both_machines_keep_every_line(tmp_path, vault, remote):
    b = clone(tmp_path, remote, "b")
    for i in range(3):
        agent(vault.root, "note", f"server note {i}")
        agent(b.root, "note", f"laptop note {i}")
    # Both machines append to one session file at once.
    rel = "sessions/cli/default/2026-11.jsonl"
    shared = {"id": "m0", "ts": "2026-11-20T10:00:00+00:00", "role": "user",
              "content": "hello", "turn": 1}
    for v in (vault, b):
        with v.locked():
            v.append_lines(rel, [json.dumps(shared)])
            v.commit(Change("chat", "shared"))
    for v, who in ((vault, "a"), (b, "b")):
        with v.locked():
            for i in range(2):
                v.append_lines(rel, [json.dumps({"id": f"{who}{i}", "ts": f"2026-11-20T1{i + 1}:0{ord(who) - 97}:00+00:00",
                                               "role": "user", "content": f"{who}{i}", "turn": i + 2})])
            v.commit(Change("chat", f"{who}"))
    agent(vault.root, "sync")
    out = agent(b.root, "sync").output
    assert out.startswith("sync: ")
    agent(vault.root, "sync")
    assert vault.head() == b.head()
    for v in (vault, b):
        no_markers(v)
        notes = "".join(p.read_text() for p in (v.root / "memory").glob("*.md"))
        for i in range(3):
            assert notes.count(f"server note {i}") == 1
            assert notes.count(f"laptop note {i}") == 1
        lines = (v.root / rel).read_text().splitlines()
        ids = [json.loads(line)["id"] for line in lines]
        assert sorted(ids) == ["a0", "a1", "b0", "b1", "m0"]  # every line, none twice
        # In time order, the same on both machines.
        assert ids == ["m0", "a0", "b0", "a1", "b1"]
    assert (vault.root / rel).read_bytes() == (b.root / rel).read_bytes()
    merge = vault.git("log", "--merges", "--format=%an|%s").splitlines()
    assert merge and all(line == "agent|sync: merge from origin" for line in merge)


def test_facts_merge_clean_once_and_keep_both_versions_of_a_clash(tmp_path, vault, remote):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Lives in Berlin\n- Likes tea\n- Has a cat\n")
    agent(vault.root, "note", "commit the facts")
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    # A: changes one line, adds a fact; B: changes the same line differently, adds the
    # same fact and another, and edits a line far away.
    (vault.root / "MEMORY.md").write_text(
        "# Memory\n\n- Lives in Paris\n- Likes tea\n- Has a cat\n- Plays the cello\n")
    (b.root / "MEMORY.md").write_text(
        "# Memory\n\n- Lives in Lisbon\n- Likes tea\n- Has a cat named Miso\n- Plays the cello\n- Runs on Sundays\n")
    agent(vault.root, "note", "a")   # commits the hand edit first, as the user
    agent(b.root, "note", "b")
    agent(vault.root, "sync")
    out = agent(b.root, "sync")
    assert "kept both versions of MEMORY.md" not in out.output  # the driver settled it
    agent(vault.root, "sync")
    for v in (vault, b):
        text = (v.root / "MEMORY.md").read_text()
        no_markers(v)
        assert "Lives in Paris" in text and "Lives in Lisbon" in text  # nothing lost
        assert text.count("<!-- sync conflict") == 1
        assert text.count("Plays the cello") == 1      # added on both sides: once
        assert "Runs on Sundays" in text and "Has a cat named Miso" in text
    assert (vault.root / "MEMORY.md").read_text() == (b.root / "MEMORY.md").read_text()
    out = agent(vault.root, "status").output
    assert "MEMORY.md" in out and "sync conflict" in out


def test_cron_jobs_merge_job_by_job(tmp_path, vault, remote):
    b = clone(tmp_path, remote, "b")
    agent(vault.root, "cron", "add", "water", "--every", "1h", "--message", "water the plants")
    agent(b.root, "cron", "add", "stretch", "--every", "2h", "--message", "stretch")
    agent(vault.root, "sync")
    agent(b.root, "sync")
    agent(vault.root, "sync")
    for v, mine in ((vault, "water"), (b, "stretch")):     # the other's job is held
        jobs = json.loads((v.root / "cron.json").read_text())["jobs"]
        assert [j["name"] for j in jobs] == [mine]
        agent(v.root, "sync", "accept")
    agent(vault.root, "sync")
    agent(b.root, "sync")
    for v in (vault, b):
        jobs = json.loads((v.root / "cron.json").read_text())["jobs"]
        assert sorted(j["name"] for j in jobs) == ["stretch", "water"]
        no_markers(v)


def test_a_file_no_rule_merges_keeps_both_versions_side_by_side(tmp_path, vault, remote):
    b = clone(tmp_path, remote, "b")
    for v, model in ((vault, "model-a"), (b, "model-b")):
        toml = (v.root / "agent.toml").read_text().replace('name = "claude-sonnet-5-5"',
                                                            f'name = "{model}"')
        (v.root / "agent.toml").write_text(toml)
        agent(v.root, "note", "x")
    agent(vault.root, "sync")
    out = agent(b.root, "sync")
    assert "kept both versions of agent.toml" in out.output
    assert 'name = "model-b"' in (b.root / "agent.toml").read_text()
    copies = list(b.root.glob("agent.sync-conflict-*.toml"))
    assert len(copies) == 1 and 'name = "model-a"' in copies[0].read_text()
    no_markers(b)


def test_a_push_the_remote_rejects_is_fetched_merged_and_pushed_again(tmp_path, vault, remote):
    b = clone(tmp_path, remote, "b")
    agent(b.root, "note", "laptop")
    agent(b.root, "sync")
    agent(vault.root, "note", "server")
    # The server's view of origin is stale: its first push is rejected, then it merges.
    out = agent(vault.root, "sync").output
    assert out.strip() == "sync: 1 commit in, 2 out"
    assert subprocess.run(["git", "--git-dir", str(remote), "log", "--format=%s", "-1"],
                          capture_output=True, text=True).stdout.strip() == "sync: merge from origin"


def test_unreachable_remote_is_one_line_and_changes_nothing(tmp_path, vault):
    vault.git("remote", "add", "origin", str(tmp_path / "nowhere.git"))
    head = vault.head()
    result = agent(vault.root, "sync", ok=False)
    assert result.exit_code == 1
    assert result.output.startswith("Error: Could not fetch from origin")
    assert len(result.output.strip().splitlines()) == 1
    assert vault.head() == head


def test_no_push_and_a_named_remote(tmp_path, vault, remote):
    agent(vault.root, "note", "local only")
    out = agent(vault.root, "sync", "--no-push").output
    assert out.strip() == "sync: 0 commits in, 1 not pushed"
    result = agent(vault.root, "sync", "--remote", "upstream", ok=False)
    assert "no remote named 'upstream'" in result.output


def test_sync_refuses_during_a_merge_started_by_hand(tmp_path, vault, remote):
    (vault.root / ".git" / "MERGE_HEAD").write_text(vault.head() + "\n")
    result = agent(vault.root, "sync", ok=False)
    assert "A merge is unfinished" in result.output and "Nothing was changed" in result.output


def test_an_older_vault_converts_its_merge_rules_in_one_commit(tmp_path, vault, remote):
    attrs = vault.root / ".gitattributes"
    attrs.write_text("sessions/**/*.jsonl merge=union\nmemory/*.md merge=union\n*.png binary\n")
    agent(vault.root, "note", "x")
    agent(vault.root, "sync")
    assert "sync: set up this vault for syncing between machines" in subjects(vault)
    text = attrs.read_text()
    assert "merge=union" not in text and "*.png binary" in text
    assert "MEMORY.md merge=agent-facts" in text


@pytest.mark.parametrize("moved", [False, True])
def test_a_kill_during_the_move_is_finished_by_the_next_command(tmp_path, vault, remote, moved):
    b = clone(tmp_path, remote, "b")
    for i in range(30):
        (b.root / "memory" / f"2026-10-{i + 1:02d}.md").write_text(f"- 10:00 note {i}\n")
    agent(b.root, "note", "many files")
    agent(b.root, "sync")
    vault.git("fetch", "-q", "origin")
    old, new = vault.head(), vault.git("rev-parse", "origin/main").strip()
    # A sync killed after journalling its move (and, when `moved`, after git moved the
    # index and files but before HEAD followed): what a kill -9 leaves.
    (vault.root / ".agent" / "checkout.json").write_text(
        json.dumps({"old": old, "new": new, "reflog": "sync: fast-forward to origin/main"}))
    if moved:
        vault.git("read-tree", "-m", "-u", old, new)
    out = agent(vault.root, "note", "after the kill")
    assert "interrupted sync was finished" in out.output
    assert subjects(vault)[0] == "note: add 1 line to " + subjects(vault)[0].split(" to ")[1]
    assert vault.git("rev-parse", "HEAD~1").strip() == new   # no hand-edit commit between
    assert vault.dirty_paths() == []
    assert len(list((vault.root / "memory").glob("2026-10-*.md"))) == 30
    assert not (vault.root / ".agent" / "checkout.json").exists()
    assert "0 commits in, 1 out" in agent(vault.root, "sync").output


def test_a_kill_during_the_first_move_into_a_vault_with_no_commit_is_finished(vault, remote):
    # A vault whose branch has no commit yet takes the remote's as its first: that move
    # is journalled as any other, so a kill in the middle of it leaves no hand-edit
    # commit of half the files (which the next sync would push as deleting the rest).
    new = vault.head()
    vault.git("update-ref", "-d", "refs/heads/main")        # no commit here yet
    vault.git("read-tree", "--empty")
    (vault.root / "MEMORY.md").unlink()                      # the move was half done
    (vault.root / ".agent" / "checkout.json").write_text(
        json.dumps({"old": None, "new": new, "reflog": "sync: check out origin/main"}))
    out = agent(vault.root, "note", "after the kill")
    assert "interrupted sync was finished" in out.output
    assert vault.git("rev-parse", "HEAD~1").strip() == new  # no hand-edit commit between
    assert (vault.root / "MEMORY.md").exists()
    assert vault.dirty_paths() == []
    assert not (vault.root / ".agent" / "checkout.json").exists()


def test_kill_9_at_random_instants_of_a_sync_loses_nothing(tmp_path, vault, remote):
    b = clone(tmp_path, remote, "b")
    for i in range(20):
        (b.root / "memory" / f"2026-10-{i + 1:02d}.md").write_text(f"- 10:00 note {i}\n")
    agent(b.root, "note", "laptop")
    agent(b.root, "sync")
    agent(vault.root, "note", "server")
    for delay in (0.05, 0.15, 0.3, 0.5):
        p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "sync"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        agent(vault.root, "note", f"after a kill at {delay}s")   # the next command repairs
        assert vault.dirty_paths() == []
        assert not (vault.root / ".git" / "MERGE_HEAD").exists()
    agent(vault.root, "sync")
    agent(b.root, "sync")
    for v in (vault, b):
        notes = "".join(p.read_text() for p in (v.root / "memory").glob("*.md"))
        assert "laptop" in notes and "server" in notes
        assert len(list((v.root / "memory").glob("2026-10-*.md"))) == 20
        no_markers(v)
    assert vault.head() == b.head()


def test_archive_entries_from_both_machines_are_each_consolidated_once(tmp_path, vault, remote):
    from datetime import datetime, timezone

    from agent.stores import archive
    # An older vault: entries 1..3 and the old single-number cursor.
    for i in (1, 2, 3):
        (vault.root / f"archive/2026/10/{i}.md").parent.mkdir(parents=True, exist_ok=True)
        (vault.root / f"archive/2026/10/{i}.md").write_text(f"---\nid: {i}\nsession: cli/default\n---\nold {i}\n")
    (vault.root / ".dream_cursor").write_text("3\n")
    agent(vault.root, "note", "old entries")
    agent(vault.root, "sync")
    assert "sync: set up this vault for syncing between machines" in subjects(vault)
    assert archive.read_consolidated(vault.root).ranges == ((1, 3),)
    b = clone(tmp_path, remote, "b")
    # Both machines compact in the same second: the ids still differ.
    when = datetime(2026, 11, 23, 14, 5, 22, tzinfo=timezone.utc)
    made = {}
    for v, who in ((vault, "a"), (b, "b")):
        eid = archive.new_id(v.root, when)
        with v.locked():
            v.write_text(archive.entry_path(eid, when),
                         archive.render(eid, {"session": "cli/default"}, f"from {who}"))
            v.commit(Change("archive", f"{who}", scope="cli/default"))
        made[who] = eid
    assert made["a"] != made["b"] and min(made.values()) > 3
    # Each machine's dream consolidates its own entry (the record the dream writes).
    for v, who in ((vault, "a"), (b, "b")):
        with v.locked():
            v.write_text(archive.CURSOR, archive.read_consolidated(v.root).add([made[who]]).render())
            v.commit(Change("dream", f"no changes ({who})"))
    agent(vault.root, "sync")
    agent(b.root, "sync")
    agent(vault.root, "sync")
    for v in (vault, b):
        done = archive.read_consolidated(v.root)
        assert all(i in done for i, _ in archive.entry_ids(v.root))   # none waits, none twice
        assert "(0 waiting)" in agent(v.root, "status").output
        no_markers(v)
    assert (vault.root / ".dream_cursor").read_text() == (b.root / ".dream_cursor").read_text()


# ---- one machine per job, and agent serve syncing on its own ---------------------------

from datetime import datetime, timedelta, timezone  # noqa: E402

from fakeanthropic import reply  # noqa: E402

from agent.llm import make_provider  # noqa: E402
from helpers import jobs_json, serve, set_every  # noqa: E402

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)


def test_clone_names_the_machine_and_status_and_cron_list_show_it(tmp_path, vault, remote):
    vault.identity.set_host("server")
    result = CliRunner().invoke(cli, ["clone", str(remote), str(tmp_path / "b"), "--host",
                                      "laptop"], catch_exceptions=False)
    assert "(this machine: laptop)" in result.output
    b = Vault.open(tmp_path / "b")
    assert b.git("config", "agent.host").strip() == "laptop"
    assert "host:       laptop" in agent(b.root, "status").output
    agent(b.root, "cron", "add", "water", "--every", "1h", "-m", "water the plants")
    agent(b.root, "cron", "add", "backup", "--every", "1d", "-m", "back up", "--host", "server")
    rows = agent(b.root, "cron", "list").output.splitlines()
    assert rows[0].split()[3] == "HOST"
    assert rows[1].split()[1:4] == ["water", "every", "1h"] and " laptop " in rows[1]
    assert " server " in rows[2]
    out = agent(b.root, "cron", "move", "water", "server").output
    assert out.startswith('Moved "water"') and "once both machines sync" in out
    assert subjects(b)[0] == 'cron: move "water" to server (from laptop)'
    assert [j["host"] for j in jobs_json(b)] == ["server", "server"]
    bad = agent(b.root, "cron", "move", "water", "no such/host", ok=False)
    assert bad.exit_code == 1 and "not a machine name" in bad.output


def test_a_job_without_a_host_runs_on_one_machine_only_after_both_claimed_it(
        tmp_path, vault, remote, fake_anthropic):
    # A job written by hand (no host) reaches both machines before either runs serve.
    (vault.root / "cron.json").write_text(json.dumps({"version": 1, "jobs": [
        {"id": "tea", "name": "tea", "message": "make tea",
         "schedule": {"kind": "every", "every_seconds": 3600}}]}, indent=2))
    agent(vault.root, "note", "a job by hand")
    vault.git("push", "-q", "origin", "main")       # as a plain `git push` would
    b = clone(tmp_path, remote, "b")
    vault.identity.set_host("server")
    agent(vault.root, "sync", "--no-push")          # sync claims it: one commit, not pushed
    assert subjects(vault)[0] == 'cron: run "tea" on server'
    assert jobs_json(vault)[0]["host"] == "server"
    b.identity.set_host("laptop")
    s_b, _ = serve(b, T0)                          # b's serve claims it too
    assert 'cron: run "tea" on laptop' in subjects(b)[:2]
    # Once synced, both machines agree on one host (the same rule on both sides).
    agent(vault.root, "sync")
    agent(b.root, "sync")
    agent(vault.root, "sync")
    assert vault.head() == b.head()
    hosts = {jobs_json(v)[0]["host"] for v in (vault, b)}
    assert len(hosts) == 1
    owner = hosts.pop()
    # Due on both machines: only the owner runs it.
    fake_anthropic.add(reply("Tea is ready."))
    servers = {"server": serve(vault, T0)[0], "laptop": serve(b, T0)[0]}
    due = T0 + timedelta(hours=2)
    for s in servers.values():
        s.clock.t = due
        s.step(due)
    assert len(fake_anthropic.calls()) == 1
    runner = vault if owner == "server" else b
    other = b if runner is vault else vault
    assert jobs_json(runner)[0]["state"]["last_status"] == "ok"
    assert jobs_json(other)[0]["state"]["last_status"] is None   # state changes on its host only
    # After a sync the other machine has the run's state and still does not run it.
    agent(runner.root, "sync")
    agent(other.root, "sync")
    assert jobs_json(other)[0]["state"] == jobs_json(runner)[0]["state"]
    later = due + timedelta(hours=2)
    s = servers["server" if other is vault else "laptop"]
    s.clock.t = later
    s.step(later)
    assert len(fake_anthropic.calls()) == 1
    no_markers(vault)


def test_serve_syncs_on_its_own_and_schedules_what_came_in(tmp_path, vault, remote,
                                                          fake_anthropic, caplog, fixed_now):
    vault.identity.set_host("server")
    set_every(vault, "5m")
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    b.identity.set_host("laptop")
    agent(b.root, "cron", "add", "stretch", "--every", "3m", "-m", "remind me to stretch",
          "--host", "server")
    agent(b.root, "note", "written on the laptop")
    agent(b.root, "sync")
    t0 = fixed_now                         # the time `agent cron add` took too
    s, clock = serve(vault, t0)
    caplog.set_level("INFO", logger="agent.serve")
    s.step(t0)                                     # the first pass syncs
    assert "sync: every 5m" in caplog.text
    assert "written on the laptop" in "".join(p.read_text() for p in (vault.root / "memory").glob("*.md"))
    assert s.cron.cron.jobs == []                   # a job from elsewhere waits for a yes
    assert 'held: cron job "stretch"' in caplog.text
    agent(vault.root, "sync", "accept")
    s.step(t0)
    assert [j.name for j in s.cron.cron.jobs] == ["stretch"]     # serve re-read cron.json
    assert "written on the [laptop]" in agent(vault.root, "search", "laptop").output
    # The job that came in runs here, on its due time.
    fake_anthropic.add(reply("Stretch now."))
    job_due = datetime.fromisoformat(jobs_json(vault)[0]["state"]["next_run"])
    assert t0 < job_due < t0 + timedelta(minutes=4)
    clock.t = job_due + timedelta(seconds=1)
    s.step(clock.t)
    assert len(fake_anthropic.calls()) == 1
    # A change made here goes out at the next interval, not before.
    agent(vault.root, "note", "written on the server")
    pushed = subprocess.run(["git", "--git-dir", str(remote), "rev-parse", "main"],
                            capture_output=True, text=True).stdout.strip()
    clock.t = t0 + timedelta(minutes=4)
    s.step(clock.t)
    assert subprocess.run(["git", "--git-dir", str(remote), "rev-parse", "main"],
                          capture_output=True, text=True).stdout.strip() == pushed
    clock.t = t0 + timedelta(minutes=5, seconds=1)
    s.step(clock.t)
    assert subprocess.run(["git", "--git-dir", str(remote), "rev-parse", "main"],
                          capture_output=True, text=True).stdout.strip() == vault.head()
    agent(b.root, "sync")
    assert "written on the server" in "".join(p.read_text() for p in (b.root / "memory").glob("*.md"))
    # After a dream that committed, serve syncs at once.
    s.sync.soon(clock.t)
    agent(vault.root, "note", "after a dream")
    s.step(clock.t)
    assert subprocess.run(["git", "--git-dir", str(remote), "rev-parse", "main"],
                          capture_output=True, text=True).stdout.strip() == vault.head()


def test_a_failing_sync_in_serve_is_one_line_and_retried_with_backoff(tmp_path, vault, caplog,
                                                                     fake_anthropic):
    set_every(vault, "1m")
    vault.git("remote", "add", "origin", str(tmp_path / "nowhere.git"))
    s, clock = serve(vault, T0)
    caplog.set_level("INFO", logger="agent.serve")

    def failures():
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("sync: Could not")]

    tried_at = []
    t = T0
    while t <= T0 + timedelta(minutes=8):
        before = len(failures())
        clock.t = t
        s.step(t)
        if len(failures()) > before:
            tried_at.append(int((t - T0).total_seconds() // 60))
        t += timedelta(minutes=1)
    # 1 minute after the first failure, then 2, then 4: never fatal, one line each.
    assert tried_at == [0, 1, 3, 7]
    assert all("\n" not in line and "next try" in line for line in failures())
    assert "failure 4 in a row" in failures()[-1]
    # The remote comes back: the next try works, and says so.
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(tmp_path / "nowhere.git")],
                   check=True)
    clock.t = T0 + timedelta(minutes=20)
    s.step(clock.t)
    assert "sync: working again after 4 failures" in caplog.text
    assert subprocess.run(["git", "--git-dir", str(tmp_path / "nowhere.git"), "rev-parse", "main"],
                          capture_output=True, text=True).stdout.strip() == vault.head()


def test_sync_every_must_be_a_duration(vault):
    with (vault.root / "agent.toml").open("a") as f:
        f.write('\n[sync]\nevery = "often"\n')
    result = agent(vault.root, "config", "check", ok=False)
    assert result.exit_code == 1 and "sync.every must be a duration" in result.output
    assert agent(vault.root, "config", "set", "sync.every", "10m").exit_code == 0


def test_an_enabled_heartbeat_runs_on_one_machine_of_a_synced_vault(tmp_path, vault, remote,
                                                                   fake_anthropic):
    (vault.root / "heartbeat" / "water.md").write_text(
        "---\nname: water\nevery: 1h\n---\nRemind me to drink water.\n")
    agent(vault.root, "note", "a heartbeat by hand")
    vault.identity.set_host("server")
    fake_anthropic.add(reply("Drink water."))
    s, _ = serve(vault, T0)
    assert subjects(vault)[0] == "heartbeat: run water on server"
    assert "host: server\n" in (vault.root / "heartbeat" / "water.md").read_text()
    s.step(T0)
    assert len(fake_anthropic.calls()) == 1
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    b.identity.set_host("laptop")
    s_b, _ = serve(b, T0)
    s_b.step(T0 + timedelta(hours=3))
    assert len(fake_anthropic.calls()) == 1            # the laptop leaves it to the server
    assert agent(b.root, "heartbeat", "enable", "water").exit_code == 0


# ---- the dream settles sync-conflict blocks ------------------------------------------------


def conflicted(tmp_path, vault, remote) -> Vault:
    """MEMORY.md with one sync-conflict block, made by two machines and a real sync."""
    (vault.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n\n- Lives in Berlin\n- Likes tea\n")
    agent(vault.root, "note", "facts")
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    (vault.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n\n- Lives in Paris\n- Likes tea\n")
    (b.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n\n- Lives in Lisbon since 2026-11-01\n- Likes tea\n")
    agent(vault.root, "note", "a")
    agent(b.root, "note", "b")
    agent(b.root, "sync")
    agent(vault.root, "sync")
    assert (vault.root / "MEMORY.md").read_text().count("<!-- sync conflict") == 1
    return b


def test_a_dream_settles_a_sync_conflict_block_and_commits_it(tmp_path, vault, remote,
                                                              fake_anthropic):
    from fakeanthropic import json_reply

    from dreamkit import op
    b = conflicted(tmp_path, vault, remote)
    before = (vault.root / "MEMORY.md").read_text()
    fake_anthropic.add(json_reply({"ops": [
        op("update", old="- Lives in Lisbon since 2026-11-01", new="- Lives in Lisbon since 2026-11-01",
           reason="the more recent and more specific version")]}))
    out = agent(vault.root, "dream", "--poll-interval", "0.01").output
    # No archive entry waited: only the editor ran, told what the block is.
    editor = fake_anthropic.calls("/v1/messages/batches")[0].body["requests"][0]
    assert editor["custom_id"] == "editor-conflicts"
    prompt = json.dumps(editor["params"]["messages"])
    assert "1 sync-conflict block" in prompt and "settle every sync-conflict block" in prompt
    text = (vault.root / "MEMORY.md").read_text()
    assert text == "# Memory\n\n## Facts\n\n- Lives in Lisbon since 2026-11-01\n- Likes tea\n"
    assert "sync conflict" not in text and before != text
    assert subjects(vault)[0] == "dream: settle 1 sync conflict in memory"
    assert "Settled a sync conflict in MEMORY.md: kept - Lives in Lisbon" in out
    assert "MEMORY.md: 1 sync conflict" not in agent(vault.root, "status").output
    # The settled file travels like any change: the other machine gets it, no new block.
    agent(vault.root, "sync")
    agent(b.root, "sync")
    assert (b.root / "MEMORY.md").read_text() == text
    no_markers(b)


def test_a_dream_with_entries_and_no_findings_still_settles_the_conflicts(tmp_path, vault, remote,
                                                                          fake_anthropic):
    from fakeanthropic import json_reply

    from dreamkit import op, write_entries
    conflicted(tmp_path, vault, remote)
    with vault.locked():
        write_entries(vault, ["Talked about the weather."])
    fake_anthropic.add(json_reply({"findings": []}), json_reply({"ops": [
        op("delete", old="- Lives in Paris", reason="neither version is sure")]}))
    agent(vault.root, "dream", "--poll-interval", "0.01")
    text = (vault.root / "MEMORY.md").read_text()
    assert text == "# Memory\n\n## Facts\n\n- Likes tea\n"        # the whole block went
    assert subjects(vault)[0].startswith("dream: +0 facts, 0 updated, 0 removed, 1 sync conflict settled")



# ---- two machines compacting one conversation before they sync ----------------------------


def test_compactions_on_both_machines_lose_no_message_and_dream_each_once(tmp_path, vault, remote,
                                                                       fake_anthropic):
    from fakeanthropic import json_reply

    from agent.chat.compact import compact_session
    from agent.stores import archive
    from agent.stores.window import read_window

    when = datetime(2026, 11, 20, 9, 0, tzinfo=timezone.utc)

    def say(v, session, mid, minutes):
        rel = f"sessions/{session}/2026-11.jsonl"
        with v.locked():
            v.append_lines(rel, [json.dumps({
                "id": mid, "ts": (when + timedelta(minutes=minutes)).isoformat(),
                "role": "user" if minutes % 2 == 0 else "assistant",
                "content": f"message {mid}", "turn": minutes // 2 + 1})])
            v.commit(Change("chat", f"{mid}", scope=session))

    def compact(v, session):
        fake_anthropic.add(json_reply({"topic": f"talk in {session}", "summary": "They talked.",
                                       "importance": 0.5}))
        return compact_session(v, make_provider(), session, when + timedelta(hours=1), force=True)

    for session in ("cli/default", "cli/other"):
        for k in range(4):
            say(vault, session, f"{session[4:]}{k}", k)
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    # cli/default: each machine says something; only the laptop compacts (its entry does
    # not cover the server's message, which the merge places before its marker).
    say(vault, "cli/default", "server-says", 5)
    say(b, "cli/default", "laptop-says", 6)
    compact(b, "cli/default")
    # cli/other: both machines compact the very same window.
    made = [compact(vault, "cli/other"), compact(b, "cli/other")]
    assert made[0] != made[1]
    agent(vault.root, "sync")
    agent(b.root, "sync")
    agent(vault.root, "sync")
    assert vault.head() == b.head()
    for v in (vault, b):
        no_markers(v)
        window = read_window(v.root, "cli/default").messages
        assert [m["id"] for m in window] == ["server-says"]      # not lost, not archived
        assert read_window(v.root, "cli/other").messages == []
    # The dream reads the two entries of cli/other once: one is set aside.
    fake_anthropic.add(json_reply({"findings": []}))
    out = agent(vault.root, "dream", "--poll-interval", "0.01").output
    analyst = fake_anthropic.calls("/v1/messages/batches")[0].body["requests"]
    data = "".join(json.dumps(r["params"]["messages"]) for r in analyst)
    sent = [i for i, _ in archive.entry_ids(vault.root) if f'\\"id\\": {i},' in data]
    assert len(sent) == 2 and len(archive.entry_ids(vault.root)) == 3
    assert set(made) - set(sent) and len(set(made) & set(sent)) == 1
    done = archive.read_consolidated(vault.root)
    assert all(i in done for i, _ in archive.entry_ids(vault.root)), out
    assert "messages other entries cover" in vault.git("log", "-1", "--format=%B")


def _git_starts(vault_path, *args) -> tuple[subprocess.CompletedProcess, int]:
    """Run `agent ARGS` as its own process with GIT_TRACE to a file: (the run, how many
    git processes it started; each logs its own start as a "built-in" line)."""
    from conftest import agent_proc
    trace = vault_path.parent / "git.trace"
    trace.unlink(missing_ok=True)
    p = agent_proc(*args, vault=vault_path, env={"GIT_TRACE": str(trace)})
    text = trace.read_text(errors="replace") if trace.exists() else ""
    return p, sum(1 for line in text.splitlines() if "trace: built-in: git " in line)


def test_a_sync_starts_few_git_processes(vault, remote):
    """A sync with nothing to do, and one of one change, stay near plain `git pull
    --rebase && git push` (9 and 15 processes here): 5 and 15, against 30 and 42
    before issue 28 (7 and 16 before issue 36 read the refs from the .git folder, 6
    and 16 before issue 46 left the fetch's `git maintenance` to the vault's own
    check); a bound, so that a change adding git calls to every sync shows."""
    agent(vault.root, "sync")
    p, n = _git_starts(vault.root, "sync")
    assert p.returncode == 0 and "0 commits in, 0 out" in p.stdout, p.stdout + p.stderr
    assert n <= 5, f"a sync with nothing to do started {n} git processes"
    agent(vault.root, "note", "one more line")
    p, n = _git_starts(vault.root, "sync")
    assert p.returncode == 0 and "0 commits in, 1 out" in p.stdout, p.stdout + p.stderr
    assert subprocess.run(["git", "rev-parse", "main"], cwd=remote, capture_output=True,
                          text=True).stdout.strip() == vault.head()
    assert n <= 15, f"a sync of one change started {n} git processes"


def test_git_still_packs_the_vault_when_packs_pile_up(vault, remote):
    """The sync's fetch starts no `git maintenance`; the vault's own check still starts
    git's housekeeping (`gc --auto`) when packs pile up, as the fetch's would have."""
    agent(vault.root, "sync")
    objects = vault.root / ".git" / "objects"
    for i in range(51):                  # a pack each, as a fetch of many objects keeps one
        blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=vault.root,
                              input=f"blob {i}\n", capture_output=True, text=True,
                              check=True).stdout.strip()
        subprocess.run(["git", "pack-objects", "-q", str(objects / "pack" / "pack")],
                       cwd=vault.root, input=blob + "\n", capture_output=True, text=True,
                       check=True)
    from conftest import wait_for
    p, _ = _git_starts(vault.root, "sync")
    assert p.returncode == 0, p.stdout + p.stderr
    trace = vault.root.parent / "git.trace"
    # (started in the background: its first trace line may come after the sync left)
    wait_for(lambda: "built-in: git gc --auto" in trace.read_text(errors="replace"),
             "git gc --auto to start")
    assert "maintenance run" not in trace.read_text(errors="replace")


def _turns(v: Vault, who: str, n: int) -> list[str]:
    """`n` turns' commits, as a chat turn makes one: a user and an assistant line
    appended to the month's session file; the contents written."""
    rel = "sessions/cli/default/2030-01.jsonl"
    said = []
    for i in range(n):
        lines = [json.dumps({"id": f"{who}{i}{r[0]}", "ts": f"2030-01-01T10:{i % 60:02d}:00+00:00",
                             "role": r, "content": f"{who} turn {i} about the greenhouse ({r})"})
                 for r in ("user", "assistant")]
        with v.locked():
            v.append_lines(rel, lines)
            v.commit(Change("chat", f"{who} turn {i}", scope="cli/default"))
        said.append(f"{who} turn {i} about the greenhouse")
    return said


def test_a_sync_returns_how_head_moved_for_the_index_to_take(tmp_path, vault, remote):
    """The paths a pull brought are in the sync's result, handed to the index refresh,
    not left on the vault for the index to find."""
    from agent.search import index
    from agent.sync import remotes as syncing
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    said = _turns(b, "b-", 1)
    agent(b.root, "sync")
    agent(vault.root, "search", "greenhouse", ok=False)      # the index, at HEAD
    before = vault.head()
    result = syncing.sync(vault)
    assert result.moved == (before, vault.head(),
                            ["cron.json", "sessions/cli/default/2030-01.jsonl"])
    assert vault.last_commit != result.moved
    index.refresh(vault, after_commit=True, moved=result.moved)
    db = index._connect(index.db_path(vault))
    try:
        assert index.meta(db, "commit") == vault.head()
        assert db.execute("SELECT count(*) FROM docs WHERE text LIKE ?",
                          (f"%{said[0]}%",)).fetchone()[0] == 2
    finally:
        db.close()


@pytest.mark.slow
def test_a_pull_of_turns_starts_as_many_git_processes_as_plain_git(tmp_path, vault, remote):
    """Pulling one turn runs fewer git processes than plain `git pull --rebase && git
    push` (11 against 12, the fetch's own 5 included): the commits that came in are read by one
    `git log` and their objects by one `cat-file` session for every check, 25 before
    issue 36. Forty turns cost the same processes as one, and a pull that merges
    (both machines talked) stays bounded too. The pulled lines are on disk, and the next
    search finds them (the sync leaves the search index to it)."""
    from agent.search import index
    b = clone(tmp_path, remote, "b")
    agent(vault.root, "search", "greenhouse", ok=False)     # its index, at HEAD
    counts = []
    for n in (1, 40):
        said = _turns(b, f"b{n}-", n)
        agent(b.root, "sync")
        p, starts = _git_starts(vault.root, "sync")
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"sync: {n} commit{'s' * (n != 1)} in, 0 out" in p.stdout, p.stdout
        assert vault.head() == b.head()
        text = (vault.root / "sessions/cli/default/2030-01.jsonl").read_text()
        assert all(line in text for line in said)
        hits = [h for h in index.search(vault, said[-1], limit=10, mode="words")
                if said[-1] in h.text]
        assert len(hits) == 2            # the turn's user and assistant lines
        assert index.status(vault).commit == vault.head()
        counts.append(starts)
    assert counts[0] <= 11, f"a pull of one turn started {counts[0]} git processes"
    assert counts[1] <= counts[0], f"a pull of 40 turns started {counts[1]} ({counts[0]} for one)"
    # Both machines talked: the pull merges, commits and pushes the merge.
    _turns(vault, "a", 1)
    agent(vault.root, "search", "greenhouse")      # as the turn's own refresh leaves it
    _turns(b, "b-again-", 5)
    agent(b.root, "sync")
    p, starts = _git_starts(vault.root, "sync")
    assert p.returncode == 0 and "sync: 5 commits in, 2 out" in p.stdout, p.stdout + p.stderr
    assert "sync: merge from origin" in subjects(vault)[0]
    assert starts <= 22, f"a pull that merged started {starts} git processes"


PULL_LOADS = """
import sys
from agent.cli.app import cli
try:
    cli(["--vault", sys.argv[1], "sync"])
except SystemExit as e:
    assert not e.code, e.code
print("LOADED", sorted(m for m in ("agent.sync.held", "agent.sync.tombstones",
                                   "agent.vault.rewrite", "agent.stores.archive",
                                   "agent.search.update", "sqlite3")
                       if m in sys.modules))
"""


@pytest.mark.slow
def test_a_pull_of_turns_loads_no_forget_held_or_archive_code(tmp_path, vault, remote):
    """A pull of turns (no tombstone on either side, nothing held, no archive entry)
    does not load the tombstones, the held changes, the history rewrite or the archive
    store, nor the search index (the next search brings it up to date): what it needs
    costs it less than plain git's own pull. The pulled lines are on disk and found by
    a search."""
    b = clone(tmp_path, remote, "b")
    agent(vault.root, "search", "greenhouse", ok=False)     # its index, at HEAD
    said = _turns(b, "b-", 1)
    agent(b.root, "sync")
    p = subprocess.run([sys.executable, "-c", PULL_LOADS, str(vault.root)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "sync: 1 commit in, 0 out" in p.stdout and "LOADED []" in p.stdout, p.stdout
    assert vault.head() == b.head()
    found = agent(vault.root, "search", "greenhouse").stdout
    assert said[0].split(" about")[0] in found and "2030-01.jsonl:2" in found, found


def test_sync_refuses_conflicted_files_and_takes_nothing_in(tmp_path, vault, remote):
    """Conflicted files a person left in the index stop a sync before it merges (the
    lock's `git status` finds them): HEAD, the files and the remote stay as they were."""
    b = clone(tmp_path, remote, "b")
    agent(b.root, "note", "from b")
    agent(b.root, "sync")
    oid = vault.git("hash-object", "-w", "--stdin", input="mine\n").strip()
    vault.git("update-index", "--index-info",
              input="".join(f"100644 {oid} {n}\tNOTES.md\n" for n in (1, 2, 3)))
    head, status = vault.head(), vault.git("status", "--porcelain")
    result = agent(vault.root, "sync", ok=False)
    assert result.exit_code == 1 and "conflicted files (NOTES.md)" in result.output, result.output
    assert "Traceback" not in result.output and "Nothing was changed" in result.output
    assert vault.head() == head and vault.git("status", "--porcelain") == status
    assert subprocess.run(["git", "rev-parse", "main"], cwd=remote, capture_output=True,
                          text=True).stdout.strip() == b.head()


def test_an_edited_agent_toml_is_read_again(tmp_path, vault, remote):
    """What agent.toml said is kept between commands only while the file is unchanged:
    a new identity signs the next commit, and a broken agent.toml stops a sync."""
    toml = vault.root / "agent.toml"
    old = toml.stat().st_mtime - 3600
    os.utime(toml, (old, old))                     # older than a clock tick: kept
    agent(vault.root, "sync")
    assert json.loads((vault.root / ".agent" / "identity.json").read_text())["name"] == "agent"
    text = toml.read_text()
    assert '\nname = "agent"\n' in text
    toml.write_text(text.replace('\nname = "agent"\n', '\nname = "Robo"\n'))
    agent(vault.root, "note", "signed anew")
    assert vault.git("log", "-1", "--format=%an %s").strip().startswith("Robo note: ")
    toml.write_text(text + "\n[identity\n")
    head = vault.head()
    result = agent(vault.root, "sync", ok=False)
    assert result.exit_code == 1 and "agent.toml" in result.output, result.output
    assert "Traceback" not in result.output and vault.head() == head


def test_a_settled_sync_still_takes_a_forget_from_another_clone(tmp_path, vault, remote):
    """A sync that finds every ref as the last one left them reads no tombstones; one
    whose remote moved does: a phrase forgotten elsewhere is shown, and forgotten here
    once accepted."""
    from helpers import PHRASE, holds
    agent(vault.root, "note", f"told the agent {PHRASE}")
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    agent(b.root, "sync")
    agent(b.root, "sync")
    assert "refs" in json.loads((b.root / ".agent" / "sync.json").read_text())
    agent(vault.root, "forget", "--yes", PHRASE)
    out = agent(b.root, "sync").output
    assert "held: forgotten phrase" in out, out
    agent(b.root, "sync", "accept")
    assert holds(b) == []


def test_the_file_names_a_sync_knows_without_loading_their_stores_agree():
    """A sync names cron.json and .dream_cursor without importing their stores (it pays
    for them only when it must): the names are the stores' own."""
    from agent.stores import archive, cronfile, forgotten, layout
    from agent.sync import jobclaims, remotes
    from agent.sync import held
    assert jobclaims._CRON_FILE == held.CRON == cronfile.CRON_FILE == layout.CRON_FILE
    assert remotes._CURSOR == archive.CURSOR
    from agent.vault import heldwrites, rewrite_journal
    assert remotes._TOMBSTONES == forgotten.FILE == rewrite_journal.OLD_ADDS
    assert heldwrites.STATE_FILE == held.STATE_FILE
    from agent.stores import memory
    assert remotes.FACT_FILES == memory.MEMORY_FILES


# ---- a sync conflict block holds only what conflicts ---------------------------------


def cli_ok(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_a_sync_conflict_block_holds_the_two_versions_and_nothing_else(tmp_path, vault):
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    vault.git("remote", "add", "origin", str(bare))
    (vault.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n\n- Likes tea\n- Lives in Berlin\n")
    cli_ok("--vault", vault.root, "note", "facts")
    cli_ok("--vault", vault.root, "sync")
    cli_ok("clone", bare, tmp_path / "b")
    b = Vault.open(tmp_path / "b")
    (vault.root / "MEMORY.md").write_text(
        "# Memory\n\n## Facts\n\n- Likes tea\n- Lives in Paris\n- Has a cat named Miso\n"
        "- Plays the cello\n- Learns Japanese\n")
    (b.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n\n- Likes tea\n- Lives in Lisbon\n")
    cli_ok("--vault", vault.root, "note", "a")
    cli_ok("--vault", b.root, "note", "b")
    cli_ok("--vault", b.root, "sync")
    cli_ok("--vault", vault.root, "sync")
    cli_ok("--vault", b.root, "sync")
    for v in (vault, b):
        text = (v.root / "MEMORY.md").read_text()
        assert text == ("# Memory\n\n## Facts\n\n- Likes tea\n" + CONFLICT_START + "\n"
                        "- Lives in Paris\n- Lives in Lisbon\n" + CONFLICT_END + "\n"
                        "- Has a cat named Miso\n- Plays the cello\n- Learns Japanese\n"), text
