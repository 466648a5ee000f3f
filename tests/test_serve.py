"""`agent serve`: cron jobs and heartbeats through the agent loop, the dream on its
schedule, the serve lock, hand edits and signals.

In-process tests drive `Server.step(now)` with a clock the test sets; the others run
`agent serve` as a real process against the fake Anthropic server and judge it by the
files, `git log` and its exit status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from fakeanthropic import error, json_reply, reply

from agent.ops import jobs
from agent.vault.change import Change
from agent import schedule as sched
from agent.llm import make_provider
from agent.serve.loop import Server
from conftest import subjects
from dreamkit import finding, op, write_entries
from helpers import T0, ServeProc, heartbeat_file, jobs_json, server_at

UTC = timezone.utc
def files_of(vault, rev="HEAD") -> list[str]:
    return sorted(vault.git("show", "--name-only", "--format=", rev).split())


# ---- cron jobs, in process ----------------------------------------------------------------


def test_due_job_runs_once_and_its_state_lands_in_the_turns_commit(vault, fake_anthropic):
    job, _ = jobs.add(vault, "water", "remind me to drink water", T0, every="30m")
    s, clock = server_at(vault, T0)
    s.step(T0)
    assert fake_anthropic.calls() == []                  # not due yet
    fake_anthropic.add(reply("Time for a glass of water."))
    clock.t = T0 + timedelta(minutes=30, seconds=2)
    s.step(clock.t)
    s.step(clock.t)                                      # same time again: no second run
    assert len(fake_anthropic.calls()) == 1
    sent = fake_anthropic.calls()[0].body["messages"][-1]["content"]
    assert "remind me to drink water" in json.dumps(sent)
    assert subjects(vault)[0] == f"cron(cron/{job.id}): remind me to drink water"
    assert files_of(vault) == ["cron.json", f"sessions/cron/{job.id}/2026-11.jsonl"]
    state = jobs_json(vault)[0]["state"]
    assert state == {"next_run": "2026-11-20T11:00:00+00:00",
                     "last_run": "2026-11-20T10:30:02+00:00", "last_status": "ok",
                     "last_error": None}
    assert vault.dirty_paths() == []


def test_failing_job_records_error_and_the_others_still_run(vault, fake_anthropic):
    bad, _ = jobs.add(vault, "bad", "this one fails", T0, every="10m")
    good, _ = jobs.add(vault, "good", "this one works", T0, every="10m")
    fake_anthropic.add(error(400, "invalid_request_error", "prompt is too long"),
                       reply("Done."))
    s, clock = server_at(vault, T0)
    clock.t = T0 + timedelta(minutes=10)
    s.step(clock.t)
    by_name = {j["name"]: j["state"] for j in jobs_json(vault)}
    assert by_name["bad"]["last_status"] == "error"
    assert "prompt is too long" in by_name["bad"]["last_error"]
    assert by_name["good"]["last_status"] == "ok"
    assert by_name["bad"]["next_run"] == by_name["good"]["next_run"] == "2026-11-20T10:20:00+00:00"
    # One commit per run: the failed turn's commit carries its error state too.
    log = subjects(vault)
    assert log[0].startswith(f"cron(cron/{good.id})") and log[1].startswith(f"cron(cron/{bad.id})")
    assert "cron.json" in files_of(vault, "HEAD~1")
    assert vault.dirty_paths() == []


def test_missed_runs_follow_the_misfire_policy_once_at_start(vault, fake_anthropic):
    every, _ = jobs.add(vault, "every", "hourly check", T0, every="1h")
    skip, _ = jobs.add(vault, "skipper", "daily digest", T0, cron="0 11 * * *", misfire="skip")
    fake_anthropic.add(reply("Checked."))
    # serve starts at 15:30: five hourly runs and the 11:00 digest were missed.
    start = T0 + timedelta(hours=5, minutes=30)
    s, clock = server_at(vault, start)
    s.step(start)
    s.step(start + timedelta(seconds=5))
    assert len(fake_anthropic.calls()) == 1
    by_name = {j["name"]: j["state"] for j in jobs_json(vault)}
    assert by_name["every"]["last_status"] == "ok"
    assert by_name["every"]["next_run"] == "2026-11-20T16:00:00+00:00"
    assert by_name["skipper"]["last_status"] == "skipped" and by_name["skipper"]["last_run"] is None
    assert by_name["skipper"]["next_run"] == "2026-11-21T11:00:00+00:00"
    assert any(x.startswith('cron: skip "skipper", missed at') for x in subjects(vault))


def test_a_machine_asleep_past_a_due_time_counts_as_missed(vault, fake_anthropic):
    """The clock jumps three hours between two passes (a suspended laptop): the job due
    meanwhile follows its misfire policy, here skip."""
    jobs.add(vault, "hourly", "check in", T0, every="1h", misfire="skip")
    start = time.monotonic()
    offset = {"t": timedelta(0)}
    clock = lambda: T0 + timedelta(seconds=time.monotonic() - start) + offset["t"]
    s = Server(vault, make_provider(), clock=clock, tick=0.1)
    s.watching_since = clock()
    s.reload(clock(), first=True)
    threading.Timer(0.5, lambda: offset.update(t=timedelta(hours=3))).start()
    threading.Timer(1.5, lambda: setattr(s, "stopping", True)).start()
    s.run()
    state = jobs_json(vault)[0]["state"]
    assert fake_anthropic.calls() == []
    assert state["last_status"] == "skipped" and state["next_run"].startswith("2026-11-20T14:00")


def test_at_job_runs_and_is_removed_in_the_same_commit(vault, fake_anthropic):
    job, _ = jobs.add(vault, "dentist", "remind me to call the dentist", T0, at="2026-11-20T12:00Z")
    assert jobs_json(vault)[0]["delete_after_run"] is True
    fake_anthropic.add(reply("Call the dentist now."))
    s, clock = server_at(vault, T0)
    clock.t = datetime(2026, 11, 20, 12, 0, 1, tzinfo=UTC)
    s.step(clock.t)
    assert jobs_json(vault) == []
    assert files_of(vault) == ["cron.json", f"sessions/cron/{job.id}/2026-11.jsonl"]


def test_hand_added_and_hand_edited_jobs_are_picked_up(vault, fake_anthropic):
    s, clock = server_at(vault, T0)
    s.step(T0)
    data = {"version": 1, "jobs": [{"id": "tea", "name": "tea", "message": "make tea",
                                    "schedule": {"kind": "every", "every_seconds": 60}}]}
    (vault.root / "cron.json").write_text(json.dumps(data, indent=2))
    os.utime(vault.root / "cron.json", ns=(1, 1))        # a different mtime, whatever the clock
    clock.t = T0 + timedelta(seconds=10)
    s.step(clock.t)
    log = subjects(vault)
    assert log[2] == "edit: cron.json by hand"
    assert log[1] == f'cron: run "tea" on {vault.host()}'      # it names no machine: this one
    assert log[0] == 'cron: schedule "tea" (next run 2026-11-20 10:01)'
    assert vault.git("log", "-1", "--format=%an", "HEAD~2").strip() == "Test User"
    fake_anthropic.add(reply("Tea time."))
    clock.t = T0 + timedelta(seconds=71)
    s.step(clock.t)
    assert jobs_json(vault)[0]["state"]["last_status"] == "ok"
    assert subjects(vault)[0].startswith("cron(cron/tea): ")


def test_hand_added_job_already_past_with_skip_is_skipped_once(vault, fake_anthropic):
    data = {"version": 1, "jobs": [{"id": "old", "name": "old", "message": "too late",
                                    "misfire": "skip", "delete_after_run": False,
                                    "schedule": {"kind": "at", "at": "2026-11-20T08:00:00Z"}}]}
    (vault.root / "cron.json").write_text(json.dumps(data, indent=2))
    s, clock = server_at(vault, T0)
    for k in range(3):
        clock.t = T0 + timedelta(seconds=k)
        s.step(clock.t)
    assert fake_anthropic.calls() == []
    log = subjects(vault)
    assert sum(x.startswith('cron: skip "old"') for x in log) == 1
    state = jobs_json(vault)[0]["state"]
    assert state["last_status"] == "skipped" and state["next_run"] is None


def test_a_job_changed_by_a_command_while_due_is_not_run_on_stale_state(vault, fake_anthropic, run):
    job, _ = jobs.add(vault, "water", "drink", T0, every="30m")
    s, clock = server_at(vault, T0)
    s.step(T0)
    run("cron", "disable", job.id)                       # between serve's passes
    clock.t = T0 + timedelta(minutes=31)
    s.step(clock.t)
    assert fake_anthropic.calls() == []
    assert jobs_json(vault)[0]["enabled"] is False


def test_state_written_by_serve_and_a_command_at_once_is_never_lost(vault, fake_anthropic):
    """While serve runs a slow job, `agent cron add` (another process) adds a job: both the
    run's state and the new job end up in cron.json."""
    job, _ = jobs.add(vault, "slow", "think hard", T0, every="1h")
    fake_anthropic.add(reply("Thought about it.", delay=1.5))
    s, clock = server_at(vault, T0)
    clock.t = T0 + timedelta(hours=1)
    t = threading.Thread(target=s.step, args=(clock.t,))
    t.start()
    fake_anthropic.wait_for_requests(1)
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "cron", "add",
                        "other", "-m", "hello", "--every", "2h"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    t.join(30)
    by_name = {j["name"]: j for j in jobs_json(vault)}
    assert set(by_name) == {"slow", "other"}
    assert by_name["slow"]["state"]["last_status"] == "ok"
    assert by_name["slow"]["state"]["next_run"] == "2026-11-20T12:00:00+00:00"
    # The add landed during the turn; the run's commit, after it, kept it.
    assert subjects(vault)[1] == 'cron: add "other" (every 2h)'
    assert subjects(vault)[0].startswith(f"cron(cron/{job.id}): ")
    assert vault.dirty_paths() == []


def test_cron_run_runs_a_job_now_and_keeps_its_schedule(vault, run, fake_anthropic):
    job, _ = jobs.add(vault, "digest", "summarise my week", T0, cron="0 18 * * 5")
    next_before = jobs_json(vault)[0]["state"]["next_run"]
    fake_anthropic.add(reply("Your week: three meetings."))
    r = run("cron", "run", job.id)
    assert r.exit_code == 0, r.output
    assert "Your week: three meetings." in r.output
    assert subjects(vault)[0].startswith(f"cron(cron/{job.id}): summarise my week")
    state = jobs_json(vault)[0]["state"]
    assert state["last_status"] == "ok" and state["next_run"] == next_before
    changed = files_of(vault)
    assert changed[0] == "cron.json" and len(changed) == 2
    assert changed[1].startswith(f"sessions/cron/{job.id}/")


def test_cron_run_of_a_failing_job_says_so_and_records_it(vault, run, fake_anthropic):
    job, _ = jobs.add(vault, "digest", "summarise my week", T0, every="1d")
    fake_anthropic.add(error(400, "invalid_request_error", "bad request"))
    r = run("cron", "run", "digest")
    assert r.exit_code == 1 and "error" in r.output and "bad request" in r.output
    assert jobs_json(vault)[0]["state"]["last_status"] == "error"
    assert vault.dirty_paths() == []


def test_heartbeat_run_quiet_and_not(vault, run, fake_anthropic):
    heartbeat_file(vault, "check", "every: 1h\nenabled: false\n")
    head = vault.head()
    fake_anthropic.add(reply("HEARTBEAT_OK"), reply("Anna's birthday is tomorrow."))
    r = run("heartbeat", "run", "check")
    assert r.exit_code == 0 and "nothing to do" in r.output
    assert vault.head() == head and vault.dirty_paths() == []
    r = run("heartbeat", "run", "check")
    assert "Anna's birthday is tomorrow." in r.output
    assert subjects(vault)[0].startswith("heartbeat(heartbeat/check): ")
    r = run("heartbeat", "run", "nope")
    assert r.exit_code == 1 and "No heartbeat 'nope'" in r.output


# ---- heartbeats, in process -------------------------------------------------------------------


def test_heartbeat_ok_leaves_no_trace_and_a_real_reply_is_committed(vault, fake_anthropic):
    heartbeat_file(vault, "check", "name: check\nevery: 1h\n")
    head = vault.head()
    fake_anthropic.add(reply("HEARTBEAT_OK"), reply("You promised to call Anna today."))
    s, clock = server_at(vault, T0)
    s.step(T0)
    assert len(fake_anthropic.calls()) == 1
    assert vault.head() == head and vault.dirty_paths() == []
    assert not (vault.root / "sessions" / "heartbeat").exists()
    state = json.loads((vault.state / "heartbeat-state.json").read_text())["check"]
    assert state["last_status"] == "quiet" and state["next_run"] == "2026-11-20T11:00:00+00:00"
    clock.t = T0 + timedelta(minutes=30)
    s.step(clock.t)
    assert len(fake_anthropic.calls()) == 1             # not due yet
    clock.t = T0 + timedelta(hours=1)
    s.step(clock.t)
    assert len(fake_anthropic.calls()) == 2
    assert subjects(vault)[0].startswith("heartbeat(heartbeat/check): ")
    assert files_of(vault) == ["sessions/heartbeat/check/2026-11.jsonl"]


def test_heartbeats_added_or_disabled_by_hand_are_noticed_without_restart(vault, fake_anthropic):
    s, clock = server_at(vault, T0)
    s.step(T0)
    path = vault.root / "heartbeat" / "water.md"
    path.write_text("---\nevery: 1h\n---\nRemind me to drink water.\n")
    fake_anthropic.add(reply("Drink a glass of water."))
    clock.t = T0 + timedelta(seconds=5)
    s.step(clock.t)
    assert len(fake_anthropic.calls()) == 1
    assert subjects(vault)[0].startswith("heartbeat(heartbeat/water): ")
    assert subjects(vault)[1] == "edit: heartbeat/water.md by hand"
    path.write_text("---\nevery: 1h\nenabled: false\n---\nRemind me to drink water.\n")
    clock.t = T0 + timedelta(hours=2)
    s.step(clock.t)
    assert len(fake_anthropic.calls()) == 1


def test_broken_heartbeat_is_reported_and_skipped_while_others_run(vault, fake_anthropic, capsys):
    heartbeat_file(vault, "good", "every: 2h\n")
    heartbeat_file(vault, "broken", "every: [2h\n")
    heartbeat_file(vault, "night", "every: 1h\nactive_hours: 22:00-06:00\n")
    fake_anthropic.add(reply("HEARTBEAT_OK"))
    s, clock = server_at(vault, T0)
    assert any("heartbeat/broken.md" in p for p in s.heartbeats.problems)
    s.step(T0)
    assert len(fake_anthropic.calls()) == 1             # good ran; night is outside its hours
    assert "Check the notes" in json.dumps(fake_anthropic.calls()[0].body["messages"])


# ---- the dream ---------------------------------------------------------------------------------


def test_dream_runs_on_schedule_only_when_entries_wait_and_resumes_after_restart(vault, fake_anthropic):
    fake_anthropic.batch_polls = 0
    night = datetime(2026, 11, 21, 2, 59, tzinfo=sched.local_zone())
    s, clock = server_at(vault, night, compact=False)
    s.step(night)
    clock.t = night + timedelta(minutes=1, seconds=1)    # 03:00:01, nothing waits
    s.step(clock.t)
    assert fake_anthropic.requests == []

    with vault.locked():
        write_entries(vault, ["Booked flights to Kyoto for 3 December."])
    fake_anthropic.add(json_reply({"findings": [finding("Flying to Kyoto on 2026-12-03")]}),
                       json_reply({"ops": [op("add", section="Travel",
                                              new="- Flying to Kyoto on 2026-12-03")]}))
    clock.t = clock.t + timedelta(days=1)               # the next night
    s.step(clock.t)
    assert fake_anthropic.batch_creates == 1            # the analyst batch, submitted

    # serve restarts: the batch in flight is picked up, not submitted again.
    s2, clock2 = server_at(vault, clock.t + timedelta(minutes=5), compact=False)
    for minutes in (5, 7, 9):
        clock2.t = clock.t + timedelta(minutes=minutes)
        s2.step(clock2.t)
    assert fake_anthropic.batch_creates == 2            # + the editor batch
    assert subjects(vault)[0].startswith("dream: +1 fact")
    assert "Flying to Kyoto" in (vault.root / "MEMORY.md").read_text()


# ---- compaction of idle sessions ------------------------------------------------------------


def _session(vault, key, ts):
    rel = f"sessions/{key}/{ts:%Y-%m}.jsonl"
    with vault.locked():
        vault.append_lines(rel, [
            json.dumps({"id": "1.0-a", "ts": ts.isoformat(), "role": "user",
                        "content": "I am flying to Kyoto on 3 December.", "turn": 1}),
            json.dumps({"id": "1.1-b", "ts": ts.isoformat(), "role": "assistant",
                        "content": "Noted, have a good trip.", "turn": 1})])
        vault.commit(Change("chat", "kyoto", scope=key))
    return rel


def test_sessions_idle_past_the_limit_are_compacted_once(vault, fake_anthropic):
    idle = _session(vault, "cli/default", T0 - timedelta(hours=3))      # limit: 120 minutes
    busy = _session(vault, "cli/recent", T0 - timedelta(minutes=30))
    fake_anthropic.add(json_reply({"topic": "Kyoto trip", "summary": "Flying to Kyoto on "
                                   "2026-12-03.", "importance": 0.6}))
    s, clock = server_at(vault, T0)
    s.step(T0)
    assert len(fake_anthropic.calls()) == 1
    last = json.loads((vault.root / idle).read_text().splitlines()[-1])
    assert last["type"] == "compact" and last["through"] == "1.1-b"
    entry = next((vault.root / "archive").rglob(f"{last['archive']}.md"))
    assert "Flying to Kyoto" in entry.read_text()
    assert json.loads((vault.root / busy).read_text().splitlines()[-1])["role"] == "assistant"
    assert vault.dirty_paths() == []
    clock.t = T0 + timedelta(minutes=10)
    s.step(clock.t)                                      # nothing new: no second summary
    assert len(fake_anthropic.calls()) == 1


# ---- agent serve as a process -----------------------------------------------------------------


@pytest.mark.slow
def test_serve_runs_an_every_job_and_a_heartbeat_and_commits_each(vault, run, fake_anthropic, procs):
    run("cron", "add", "ping", "-m", "say pong", "--every", "1s")
    job_id = jobs_json(vault)[0]["id"]
    heartbeat_file(vault, "notes", "every: 1h\n")
    fake_anthropic.default_reply = reply("Noted: pong.")
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for(f"cron \"ping\" ({job_id}): ok")
    serve.wait_for("heartbeat notes: ok")
    assert serve.stop() == 0
    assert "agent serve stopped" in serve.lines[-1]
    log = subjects(vault)
    assert any(s.startswith(f"cron(cron/{job_id}): ") for s in log)
    assert any(s.startswith("heartbeat(heartbeat/notes): ") for s in log)
    state = jobs_json(vault)[0]["state"]
    assert state["last_status"] == "ok" and state["last_run"]
    assert vault.dirty_paths() == []
    assert "cron \"ping\"" in (vault.state / "serve.log").read_text()


@pytest.mark.slow
def test_serve_notices_hand_edits_of_cron_json_without_restart(vault, fake_anthropic, procs):
    fake_anthropic.default_reply = reply("Tea is ready.")
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("agent serve on")
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat(timespec="seconds")
    data = {"version": 1, "jobs": [{"id": "tea", "name": "tea", "enabled": True,
                                    "message": "make tea", "schedule": {"kind": "at", "at": soon}}]}
    (vault.root / "cron.json").write_text(json.dumps(data, indent=2) + "\n")
    serve.wait_for('cron "tea" (tea): ok')
    assert serve.stop() == 0
    log = subjects(vault)
    assert "edit: cron.json by hand" in log
    assert any(s.startswith("cron(cron/tea): ") for s in log)
    assert jobs_json(vault)[0]["state"]["last_status"] == "ok"


def test_a_second_serve_exits_at_once_and_a_killed_ones_lock_is_taken_over(vault, fake_anthropic, procs):
    first = ServeProc(vault)
    procs.append(first)
    first.wait_for("agent serve on")
    second = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "serve"],
                            capture_output=True, text=True, timeout=30)
    assert second.returncode == 1
    assert f"already running on {vault.root} (pid {first.p.pid})" in second.stderr
    first.p.kill()
    first.p.wait(10)
    third = ServeProc(vault)
    procs.append(third)
    third.wait_for("agent serve on")
    assert f"took over the serve lock of pid {first.p.pid}" in third.output
    assert third.stop(signal.SIGINT) == 0


def test_corrupt_cron_json_is_reported_and_heartbeats_still_run(vault, fake_anthropic):
    path = vault.root / "cron.json"
    path.write_text('{"version": 1,\n "jobs": [\n  {"id": "x",}\n ]\n}\n')
    before = path.read_bytes()
    heartbeat_file(vault, "notes", "every: 1h\n")
    fake_anthropic.default_reply = reply("Noted the notes.")
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "serve",
                        "--once"], capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    assert "cron.json:3:14: not valid JSON" in out and "Traceback" not in out
    assert "heartbeat notes: ok" in out
    assert any(s.startswith("heartbeat(heartbeat/notes): ") for s in subjects(vault))
    assert path.read_bytes() == before


def test_a_dream_schedule_changed_while_serve_was_stopped_wins(vault, fake_anthropic):
    s, clock = server_at(vault, datetime(2026, 11, 20, 10, 0).astimezone())
    s.reload(clock())
    s.dream.run(clock())
    saved = s.dream.state["dream_next"]
    assert saved.startswith("2026-11-21T03:00")
    # Stopped; agent.toml's schedule changed; started again.
    set_toml = (vault.root / "agent.toml")
    set_toml.write_text(set_toml.read_text().replace('schedule = "0 3 * * *"',
                                                     'schedule = "30 11 * * *"'))
    s2, clock2 = server_at(vault, datetime(2026, 11, 20, 10, 5).astimezone())
    s2.reload(clock2(), first=True)
    s2.dream.run(clock2())
    assert s2.dream.state["dream_next"].startswith("2026-11-20T11:30")


def _slow_job(vault, run, fake_anthropic, text):
    run("cron", "add", "slow", "-m", "write a long answer", "--every", "1s")
    job_id = jobs_json(vault)[0]["id"]
    fake_anthropic.add(reply(text, chunk_delay=0.3, chunk_size=5))
    fake_anthropic.default_reply = reply("later run")
    return job_id


def _transcript(vault, job_id) -> list[dict]:
    """The job's session lines, oldest first (the real clock picks the month file)."""
    return [json.loads(x) for f in sorted((vault.root / f"sessions/cron/{job_id}").glob("*.jsonl"))
            for x in f.read_text().splitlines()]


@pytest.mark.slow
def test_sigterm_during_a_job_lets_the_turn_finish_and_commit(vault, run, fake_anthropic, procs):
    job_id = _slow_job(vault, run, fake_anthropic, "one two three four five six.")
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for(f'cron "slow" ({job_id}): running')
    fake_anthropic.wait_for_requests(1)[0].wait_for_text()
    serve.p.send_signal(signal.SIGTERM)
    assert serve.wait() == 0
    assert "stopping after the running turn" in serve.output
    assert vault.dirty_paths() == []
    assert subjects(vault)[0].startswith(f"cron(cron/{job_id}): ")
    assert _transcript(vault, job_id)[-1]["content"] == "one two three four five six."
    assert jobs_json(vault)[0]["state"]["last_status"] == "ok"
    assert len(fake_anthropic.calls()) == 1                  # no new job started after SIGTERM


def _waiting_for_lock(pid: int) -> bool:
    """Whether process `pid` waits for an flock (a blocked request in /proc/locks)."""
    with open("/proc/locks", encoding="ascii") as f:
        return any("->" in line and f" {pid} " in line for line in f)


def test_sigint_while_a_jobs_turn_is_saved_stops_serve_once_it_is(vault, run, fake_anthropic,
                                                                   procs):
    # The turn's save waits for the vault lock (held here, as a chat in a terminal would):
    # the SIGINT that came meanwhile must still stop serve, after the turn is saved.
    import fcntl
    run("cron", "add", "tea", "-m", "make tea", "--every", "1s")
    job_id = jobs_json(vault)[0]["id"]
    fake_anthropic.default_reply = reply("Tea is ready.")
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("agent serve on")
    fd = os.open(vault.state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        fake_anthropic.wait_for_requests(1)[0].wait()
        while not _waiting_for_lock(serve.p.pid):
            assert serve.p.poll() is None, serve.output
            time.sleep(0.01)
        serve.p.send_signal(signal.SIGINT)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert serve.p.wait(30) == 0, serve.output
    serve._t.join(2)
    assert "SIGINT: stopping" in serve.output
    assert subjects(vault)[0].startswith(f"cron(cron/{job_id}): ")
    assert _transcript(vault, job_id)[-1]["content"] == "Tea is ready."
    assert len(fake_anthropic.calls()) == 1                  # no new run after SIGINT


@pytest.mark.slow
def test_second_sigterm_interrupts_the_turn_and_records_it(vault, run, fake_anthropic, procs):
    job_id = _slow_job(vault, run, fake_anthropic, "word " * 60)
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for(f'cron "slow" ({job_id}): running')
    fake_anthropic.wait_for_requests(1)[0].wait_for_text()
    serve.p.send_signal(signal.SIGTERM)
    serve.wait_for("stopping after the running turn")
    serve.p.send_signal(signal.SIGTERM)
    assert serve.wait() == 0
    assert vault.dirty_paths() == []
    head = vault.git("log", "-1", "--format=%B")
    assert head.startswith(f"cron(cron/{job_id}): ") and "Interrupted: yes" in head
    state = jobs_json(vault)[0]["state"]
    assert state["last_status"] == "interrupted"
    assert _transcript(vault, job_id)[-1].get("interrupted") is True
    # Run again later, the job is due at its next time, not re-run for the old one.
    assert sched.parse_iso(state["next_run"], "next_run") > sched.parse_iso(state["last_run"], "x")
