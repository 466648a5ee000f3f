"""Schedules: next_run (kinds, time zones, DST, misfire), cron.json, `agent cron`,
heartbeat files and the cron tools. Pure functions get times passed in; commands run
on a real vault and are judged by files and `git log`."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from agent.vault.change import Change
from agent.stores import heartbeatfile
from agent import schedule as sched
from agent.stores import cronfile
from agent.schedule import Schedule, next_run, settle
from conftest import agent_proc, subjects
from helpers import editor

PARIS = ZoneInfo("Europe/Paris")
NY = ZoneInfo("America/New_York")
UTC = timezone.utc


def cron(expr, tz=None):
    return Schedule("cron", expr=expr, tz=tz)


def fires(schedule, start, n):
    """The next n fire times after `start`, each computed from the previous one."""
    out, t = [], start
    for _ in range(n):
        t = next_run(schedule, t)
        out.append(t)
    return out


# ---- next_run -------------------------------------------------------------------------


def test_at_fires_once_at_its_time():
    at = datetime(2026, 11, 21, 9, 0, tzinfo=PARIS)
    s = Schedule("at", at=at)
    assert next_run(s, at - timedelta(hours=1)) == at
    assert next_run(s, at) is None
    assert next_run(s, at + timedelta(seconds=1)) is None


def test_every_keeps_its_cadence_from_the_anchor():
    s = Schedule("every", every_seconds=1800)
    now = datetime(2026, 11, 20, 10, 7, tzinfo=UTC)
    assert next_run(s, now) == now + timedelta(minutes=30)
    anchor = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    # 10:07 with a 09:00 anchor: 09:30, 10:00 passed; the next is 10:30, not 10:37.
    assert next_run(s, now, anchor=anchor) == datetime(2026, 11, 20, 10, 30, tzinfo=UTC)
    assert next_run(s, anchor, anchor=anchor) == datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


def test_cron_in_the_jobs_time_zone():
    now = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    paris = next_run(cron("0 9 * * *", "Europe/Paris"), now)
    ny = next_run(cron("0 9 * * *", "America/New_York"), now)
    assert paris == datetime(2026, 11, 21, 9, 0, tzinfo=PARIS)
    assert paris.astimezone(UTC) == datetime(2026, 11, 21, 8, 0, tzinfo=UTC)
    # 09:00 in New York is 14:00 UTC: still today.
    assert ny.astimezone(UTC) == datetime(2026, 11, 20, 14, 0, tzinfo=UTC)
    weekdays = fires(cron("30 8 * * 1-5", "Europe/Paris"), now, 3)   # Fri 20 Nov 2026
    assert [t.strftime("%a %d %H:%M") for t in weekdays] == ["Mon 23 08:30", "Tue 24 08:30",
                                                              "Wed 25 08:30"]


def test_cron_with_no_time_zone_uses_local_time(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    monkeypatch.setattr(sched, "_LOCAL", None)
    now = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)      # 21:00 in Tokyo
    t = next_run(cron("0 9 * * *"), now)
    assert t.astimezone(UTC) == datetime(2026, 11, 21, 0, 0, tzinfo=UTC)
    monkeypatch.setattr(sched, "_LOCAL", None)


def test_spring_forward_skipped_time_fires_once_at_the_end_of_the_gap():
    # Paris, 29 March 2026: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    s = cron("30 2 * * *", "Europe/Paris")
    before = datetime(2026, 3, 28, 12, 0, tzinfo=PARIS)
    first, second = fires(s, before, 2)
    assert first.astimezone(UTC) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST
    assert first.astimezone(PARIS).strftime("%H:%M") == "03:00"
    assert second == datetime(2026, 3, 30, 2, 30, tzinfo=PARIS)


def test_spring_forward_every_quarter_hour_fires_once_for_the_whole_gap():
    s = cron("*/15 * * * *", "Europe/Paris")
    start = datetime(2026, 3, 29, 1, 50, tzinfo=PARIS)
    times = [t.astimezone(PARIS).strftime("%H:%M %Z") for t in fires(s, start, 4)]
    assert times == ["03:00 CEST", "03:15 CEST", "03:30 CEST", "03:45 CEST"]


def test_autumn_repeated_time_fires_once():
    # Paris, 25 October 2026: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    s = cron("30 2 * * *", "Europe/Paris")
    first, second = fires(s, datetime(2026, 10, 24, 12, 0, tzinfo=PARIS), 2)
    assert first.astimezone(UTC) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # CEST, first
    assert second.date().isoformat() == "2026-10-26"
    # Started during the second 02:10 (CET), the job does not fire again at 02:30 CET.
    second_pass = datetime(2026, 10, 25, 1, 10, tzinfo=UTC)
    assert second_pass.astimezone(PARIS).strftime("%H:%M %Z") == "02:10 CET"
    assert next_run(s, second_pass).date().isoformat() == "2026-10-26"


def test_autumn_hourly_job_does_not_run_twice_for_one_wall_time():
    s = cron("0 * * * *", "Europe/Paris")
    times = fires(s, datetime(2026, 10, 25, 1, 30, tzinfo=PARIS), 3)
    walls = [t.astimezone(PARIS).strftime("%H:%M") for t in times]
    assert walls == ["02:00", "03:00", "04:00"]
    assert len(set(walls)) == 3


def test_dst_in_new_york_too():
    # 8 March 2026, 02:00 EST -> 03:00 EDT.
    t = next_run(cron("15 2 * * *", "America/New_York"), datetime(2026, 3, 7, 12, 0, tzinfo=NY))
    assert t.astimezone(UTC) == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)


# ---- misfire ---------------------------------------------------------------------------


def test_missed_every_job_runs_once_not_once_per_missed_interval():
    s = Schedule("every", every_seconds=600)
    due = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
    now = datetime(2026, 11, 20, 12, 3, tzinfo=UTC)       # 24 intervals missed
    run, following = settle(s, due, "run_once", now, missed=True)
    assert run is True
    assert following == datetime(2026, 11, 20, 12, 10, tzinfo=UTC)
    # Once it ran, the job is not due again before its next time.
    assert settle(s, following, "run_once", now, missed=False) == (False, following)


def test_missed_job_with_skip_does_not_run_and_moves_on():
    s = cron("0 9 * * *", "Europe/Paris")
    due = datetime(2026, 11, 18, 9, 0, tzinfo=PARIS)
    now = datetime(2026, 11, 20, 10, 0, tzinfo=PARIS)
    run, following = settle(s, due, "skip", now, missed=True)
    assert run is False
    assert following == datetime(2026, 11, 21, 9, 0, tzinfo=PARIS)


def test_skip_only_applies_to_missed_runs():
    s = cron("0 9 * * *", "Europe/Paris")
    due = datetime(2026, 11, 20, 9, 0, tzinfo=PARIS)
    run, following = settle(s, due, "skip", due + timedelta(seconds=2), missed=False)
    assert run is True and following == datetime(2026, 11, 21, 9, 0, tzinfo=PARIS)


def test_missed_at_job_runs_once_then_never_again():
    at = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    s = Schedule("at", at=at)
    assert settle(s, at, "run_once", at + timedelta(hours=5), missed=True) == (True, None)
    assert settle(s, at, "skip", at + timedelta(hours=5), missed=True) == (False, None)


def test_missed_means_due_before_the_scheduler_was_watching():
    start = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    assert sched.is_missed(start - timedelta(hours=1), start)
    assert not sched.is_missed(start - timedelta(seconds=10), start)   # within the grace
    assert not sched.is_missed(start + timedelta(minutes=5), start)


# ---- durations, times, validation ----------------------------------------------------------


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("2h", 7200),
                                          ("1d", 86400), ("1h30m", 5400), ("1w", 604800)])
def test_durations_as_people_write_them(text, seconds):
    assert sched.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["10", "soon", "0m", "-5m", "2 hours", ""])
def test_bad_durations_are_refused_with_the_way_to_write_one(text):
    with pytest.raises(sched.ScheduleError, match="90s, 30m"if text not in ("0m",) else "zero"):
        sched.parse_duration(text)


def test_times_iso_and_hh_mm_today():
    now = datetime(2026, 11, 20, 10, 0, tzinfo=PARIS)
    assert sched.parse_time("14:30", now, "Europe/Paris") == datetime(2026, 11, 20, 14, 30, tzinfo=PARIS)
    assert sched.parse_time("2026-11-21T09:00", now, "Europe/Paris") == \
        datetime(2026, 11, 21, 9, 0, tzinfo=PARIS)
    assert sched.parse_time("2026-11-21T09:00Z", now).astimezone(UTC).hour == 9
    with pytest.raises(sched.ScheduleError, match="HH:MM"):
        sched.parse_time("tomorrow", now)


def test_invalid_cron_and_time_zone_are_named():
    now = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
    with pytest.raises(sched.ScheduleError, match="has 4 fields; it needs five"):
        sched.make_schedule(cron="0 9 * *", now=now)
    with pytest.raises(sched.ScheduleError, match="invalid cron expression '0 25 \\* \\* \\*'"):
        sched.make_schedule(cron="0 25 * * *", now=now)
    with pytest.raises(sched.ScheduleError, match="unknown time zone 'Mars/Olympus'"):
        sched.make_schedule(cron="0 9 * * *", tz="Mars/Olympus", now=now)
    with pytest.raises(sched.ScheduleError, match="in the past"):
        sched.make_schedule(at="2026-11-20T09:00", tz="UTC", now=now)
    with pytest.raises(sched.ScheduleError, match="exactly one"):
        sched.make_schedule(every="1h", cron="0 9 * * *", now=now)


# ---- cron.json -------------------------------------------------------------------------------


def _file(*jobs):
    return json.dumps({"version": 1, "jobs": list(jobs)}, indent=2)


def test_cron_file_round_trips_in_a_fixed_format_and_keeps_added_keys():
    now = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
    cf = cronfile.CronFile()
    job = cronfile.new_job(cf, "daily", "plan the day", sched.make_schedule(
        cron="0 9 * * *", tz="Europe/Paris", now=now), now)
    job.extra["note"] = "added by hand"
    cf.jobs.append(job)
    text = cronfile.dumps(cf)
    data = json.loads(text)
    j = data["jobs"][0]
    assert list(data) == ["version", "jobs"]
    assert list(j) == ["id", "name", "enabled", "schedule", "message", "session",
                       "delete_after_run", "misfire", "state", "note"]
    assert j["schedule"] == {"kind": "cron", "at": None, "every_seconds": None,
                             "expr": "0 9 * * *", "tz": "Europe/Paris"}
    assert j["state"] == {"next_run": "2026-11-21T09:00:00+01:00", "last_run": None,
                          "last_status": None, "last_error": None}
    assert j["session"] == f"cron/{j['id']}"
    assert text.startswith('{\n  "version": 1,\n  "jobs": [\n    {\n      "id"')
    assert cronfile.dumps(cronfile.loads(text)) == text


def test_corrupt_cron_json_names_line_and_column():
    text = '{\n  "version": 1,\n  "jobs": [\n    {"id": "a" "name": "x"}\n  ]\n}\n'
    with pytest.raises(cronfile.CronFileError, match=r"^cron.json:4:16: not valid JSON"):
        cronfile.loads(text)


@pytest.mark.parametrize("job,problem", [
    ({"id": "a", "message": "m", "schedule": {"kind": "weekly"}}, "schedule.kind must be at, every or cron"),
    ({"id": "a", "message": "m", "schedule": {"kind": "cron", "expr": "0 9 * *"}}, "needs five"),
    ({"id": "a", "message": "m", "schedule": {"kind": "cron", "expr": "0 9 * * *", "tz": "Nowhere/X"}},
     "unknown time zone"),
    ({"id": "a", "message": "m", "schedule": {"kind": "every", "every_seconds": "1h"}},
     "every_seconds must be a whole number"),
    ({"id": "a", "schedule": {"kind": "every", "every_seconds": 60}}, "message is missing"),
    ({"id": "a b", "message": "m", "schedule": {"kind": "every", "every_seconds": 60}}, "id must be"),
    ({"id": "a", "message": "m", "misfire": "later", "schedule": {"kind": "every", "every_seconds": 60}},
     "misfire must be run_once or skip"),
])
def test_hand_edited_job_problems_name_the_job(job, problem):
    # One bad job is reported and skipped, and written back as it was.
    cf = cronfile.loads(_file(job))
    assert cf.jobs == [] and len(cf.problems) == 1
    assert problem in cf.problems[0] and cf.problems[0].startswith("cron.json: job 1")
    assert json.loads(cronfile.dumps(cf))["jobs"] == [job]


# ---- agent cron ----------------------------------------------------------------------------------


def test_cron_add_list_enable_disable_remove_each_one_commit(vault, run):
    r = run("cron", "add", "daily", "--message", "plan my day", "--cron", "0 9 * * *",
            "--tz", "Europe/Paris")
    assert r.exit_code == 0, r.output
    assert subjects(vault)[0] == 'cron: add "daily" (0 9 * * * Europe/Paris)'
    r = run("cron", "add", "water", "-m", "drink water", "--every", "90m")
    assert subjects(vault)[0] == 'cron: add "water" (every 1h30m)'
    data = json.loads((vault.root / "cron.json").read_text())
    daily, water = data["jobs"]
    assert water["schedule"]["every_seconds"] == 5400 and water["delete_after_run"] is False

    out = run("cron", "list").output
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "SCHEDULE", "HOST", "NEXT", "RUN", "LAST"]
    assert daily["host"] == vault.host() and vault.host() in lines[1]   # this machine's
    assert daily["id"] in lines[1] and "0 9 * * * Europe/Paris" in lines[1] and "never ran" in lines[1]
    assert water["id"] in lines[2] and "every 1h30m" in lines[2]

    run("cron", "disable", water["id"])
    assert subjects(vault)[0] == 'cron: disable "water"'
    assert "disabled" in run("cron", "list").output.splitlines()[2]
    run("cron", "enable", "water")                     # by name too
    assert subjects(vault)[0] == 'cron: enable "water"'
    r = run("cron", "remove", daily["id"])
    assert r.exit_code == 0
    assert subjects(vault)[0] == 'cron: remove "daily"'
    assert [j["name"] for j in json.loads((vault.root / "cron.json").read_text())["jobs"]] == ["water"]
    assert vault.dirty_paths() == []


def test_cron_add_refuses_bad_input_and_changes_nothing(vault, run):
    head = vault.head()
    before = (vault.root / "cron.json").read_bytes()
    for args, problem in [(["--cron", "0 9 * *"], "needs five"),
                          (["--cron", "0 9 * * *", "--tz", "Mars/Olympus"], "unknown time zone"),
                          (["--every", "10"], "not a duration"),
                          (["--at", "2001-01-01T09:00"], "in the past"),
                          ([], "exactly one")]:
        r = run("cron", "add", "x", "-m", "y", *args)
        assert r.exit_code == 1 and problem in r.output, r.output
        assert "Traceback" not in r.output
    assert vault.head() == head
    assert (vault.root / "cron.json").read_bytes() == before


def test_corrupt_cron_json_is_refused_and_left_untouched(vault, run):
    run("cron", "add", "water", "-m", "drink", "--every", "1h")
    path = vault.root / "cron.json"
    broken = path.read_text().replace('"name": "water",', '"name": "water"')
    path.write_text(broken)
    head = vault.head()
    for args in (["list"], ["add", "x", "-m", "y", "--every", "1h"], ["remove", "water"],
                 ["disable", "water"]):
        r = run("cron", *args)
        assert r.exit_code == 1
        assert r.output.startswith("Error: cron.json:")
        assert "not valid JSON" in r.output and "Traceback" not in r.output
        line, col = r.output.split(":")[2:4]
        assert int(line) > 1 and int(col) > 0
    assert path.read_text() == broken
    assert vault.head() == head               # not even committed as a hand edit


def test_unknown_job_is_named(vault, run):
    r = run("cron", "remove", "nope")
    assert r.exit_code == 1 and "no cron job 'nope'" in r.output


def test_concurrent_cron_commands_lose_no_change(vault):
    """Eight processes add a job each at once: every job is in cron.json, one commit each."""
    procs = [subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "cron",
                               "add", f"job{i}", "-m", f"message {i}", "--every", f"{i + 1}h"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(8)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    names = sorted(j["name"] for j in json.loads((vault.root / "cron.json").read_text())["jobs"])
    assert names == [f"job{i}" for i in range(8)]
    assert sum(s.startswith('cron: add "job') for s in subjects(vault)) == 8


def test_cron_list_does_not_import_heavy_modules(vault):
    code = ("import sys; from agent.cli.app import cli\n"
            "try:\n    cli(['--vault', sys.argv[1], 'cron', 'list'])\nexcept SystemExit: pass\n"
            "print(sorted(m for m in ('anthropic', 'croniter', 'yaml', 'frontmatter') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code, str(vault.root)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


# ---- heartbeats ------------------------------------------------------------------------------


def test_init_copies_the_built_in_heartbeats_disabled(vault):
    beats, problems = heartbeatfile.load_all(vault.root)
    assert problems == []
    assert {b.name for b in beats} >= {"morning", "open-loops"}
    assert all(not b.enabled for b in beats)
    assert all(heartbeatfile.OK in b.message() for b in beats)


def test_heartbeat_files_parse_and_broken_ones_are_reported_and_skipped(vault, run):
    d = vault.root / "heartbeat"
    (d / "water.md").write_text("---\nname: water\nevery: 2h\nactive_hours: 08:00-22:00\n"
                                "tz: Europe/Paris\n---\nRemind me to drink water.\n")
    (d / "broken.md").write_text("---\nname: broken\nevery: [2h\n---\nbody\n")
    (d / "nounit.md").write_text("---\nevery: 30\n---\nbody\n")
    (d / "badcron.md").write_text("---\ncron: \"0 9 * *\"\n---\nbody\n")
    beats, problems = heartbeatfile.load_all(vault.root)
    water = next(b for b in beats if b.name == "water")
    assert water.enabled and water.schedule.every_seconds == 7200 and water.hours() == "08:00-22:00"
    assert water.session == "heartbeat/water"
    assert len(problems) == 3
    assert any(p.startswith("heartbeat/broken.md") and "broken frontmatter" in p for p in problems)
    assert any(p.startswith("heartbeat/nounit.md") and "needs a unit" in p for p in problems)
    assert any(p.startswith("heartbeat/badcron.md") and "needs five" in p for p in problems)

    r = run("heartbeat", "list")
    assert r.exit_code == 0
    assert "water" in r.output and "every 2h" in r.output and "08:00-22:00" in r.output
    assert "skipped heartbeat/broken.md" in r.output


def test_active_hours_including_past_midnight():
    def beat(hours):
        return heartbeatfile.parse({"every": "1h", "active_hours": hours, "tz": "Europe/Paris"}, "x", "heartbeat/t.md")

    day, night = beat("08:00-22:00"), beat("22:00-06:00")
    at = lambda h, m=0: datetime(2026, 11, 20, h, m, tzinfo=PARIS)
    assert heartbeatfile.in_active_hours(day, at(8)) and heartbeatfile.in_active_hours(day, at(21, 59))
    assert not heartbeatfile.in_active_hours(day, at(22)) and not heartbeatfile.in_active_hours(day, at(7, 59))
    assert heartbeatfile.in_active_hours(night, at(23)) and heartbeatfile.in_active_hours(night, at(3))
    assert not heartbeatfile.in_active_hours(night, at(12))
    assert heartbeatfile.next_active(day, at(23)) == datetime(2026, 11, 21, 8, 0, tzinfo=PARIS)
    assert heartbeatfile.in_active_hours(beat("00:00-24:00"), at(23, 59))
    with pytest.raises(heartbeatfile.HeartbeatError, match="HH:MM-HH:MM"):
        beat("8-22")


def test_heartbeat_due_times():
    every = heartbeatfile.parse({"every": "30m"}, "x", "heartbeat/a.md")
    daily = heartbeatfile.parse({"cron": "0 8 * * *", "tz": "Europe/Paris"}, "x", "heartbeat/b.md")
    now = datetime(2026, 11, 20, 10, 0, tzinfo=PARIS)
    assert heartbeatfile.first_due(every, now) == now                 # never ran: due at once
    assert heartbeatfile.after_run(every, now) == now + timedelta(minutes=30)
    assert heartbeatfile.first_due(daily, now) == datetime(2026, 11, 21, 8, 0, tzinfo=PARIS)
    off = heartbeatfile.parse({"every": "30m", "enabled": False}, "x", "heartbeat/c.md")
    assert not heartbeatfile.is_due(off, now, now) and heartbeatfile.is_due(every, now, now)


# ---- the cron tools ---------------------------------------------------------------------------


def _tool_ctx(vault, now):
    from agent.vault.staged import StagedVault
    from agent.chat.tools.registry import ToolContext
    return ToolContext(vault=StagedVault(vault), session="cli/default", now=now)


def test_cron_tools_validate_like_the_command_and_keep_concurrent_state(vault, run):
    from agent.chat.tools import cron as tools
    from agent.chat.tools.registry import REGISTRY, call, load_all, use_context

    load_all()
    assert {"cron_add", "cron_list", "cron_remove"} <= set(REGISTRY)
    now = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
    ctx = _tool_ctx(vault, now)
    with use_context(ctx):
        text, is_error = call("cron_add", {"name": "x", "message": "y", "cron": "0 9 * *"})
        assert is_error and "needs five" in text
        text, is_error = call("cron_add", {"name": "x", "message": "y", "every": "1h", "tz": "Nowhere/X"})
        assert is_error and "unknown time zone" in text
        out = tools.cron_add("standup", "ask me what I do today", cron="0 9 * * 1-5",
                             tz="Europe/Paris")
        assert 'Added job "standup"' in out and "0 9 * * 1-5 Europe/Paris" in out
        assert "standup" in tools.cron_list()
    # Meanwhile another process adds a job: the staged change is applied to the file as it is.
    run("cron", "add", "water", "-m", "drink", "--every", "1h")
    with vault.locked():
        ctx.vault.apply()
        vault.commit(Change("chat", "schedule the standup", scope="cli/default"))
    names = [j["name"] for j in json.loads((vault.root / "cron.json").read_text())["jobs"]]
    assert names == ["water", "standup"]
    with use_context(_tool_ctx(vault, now)) as c2:
        assert "Removed job \"water\"" in tools.cron_remove("water")
        with vault.locked():
            c2.vault.apply()
            vault.commit(Change("chat", "remove water", scope="cli/default"))
    names = [j["name"] for j in json.loads((vault.root / "cron.json").read_text())["jobs"]]
    assert names == ["standup"]


# ---- agent heartbeat and agent cron from the command line ----------------------------


def test_heartbeat_enable_disable_changes_one_line_and_commits(vault, run):
    path = vault.root / "heartbeat" / "morning.md"
    before = path.read_text()
    r = run("heartbeat", "enable", "morning")
    assert r.exit_code == 0, r.output
    assert path.read_text() == before.replace("enabled: false", "enabled: true")
    assert subjects(vault)[0] == 'heartbeat: enable "morning"'
    assert "already enabled" in run("heartbeat", "enable", "morning").output
    assert run("heartbeat", "disable", "morning").exit_code == 0
    assert path.read_text() == before
    assert subjects(vault)[0] == 'heartbeat: disable "morning"'
    r = run("heartbeat", "enable", "mornin")
    assert r.exit_code == 1 and "Did you mean morning?" in r.output


def test_heartbeat_add_writes_a_file_the_list_shows(vault, run):
    r = run("heartbeat", "add", "inbox", "--every", "2h", "--active-hours", "08:00-20:00",
            "-m", "Look at the inbox note")
    assert r.exit_code == 0, r.output
    assert subjects(vault)[0] == 'heartbeat: add "inbox" (every 2h)'
    text = (vault.root / "heartbeat" / "inbox.md").read_text()
    assert "every: 2h" in text and text.rstrip().endswith("Look at the inbox note")
    listing = run("heartbeat", "list").output
    assert any(l.startswith("inbox") and "08:00-20:00" in l and " yes " in l
               for l in listing.splitlines())
    head = vault.head()
    r = run("heartbeat", "add", "inbox", "--every", "1h", "-m", "again")
    assert r.exit_code == 1 and "exists already" in r.output
    r = run("heartbeat", "add", "bad", "--every", "often", "-m", "x")
    assert r.exit_code == 1 and "'often' is not a duration" in r.output
    assert vault.head() == head and not (vault.root / "heartbeat" / "bad.md").exists()


def test_cron_add_refuses_a_second_job_of_the_same_name(vault, run):
    assert run("cron", "add", "daily", "-m", "plan", "--every", "1h").exit_code == 0
    head = vault.head()
    r = run("cron", "add", "daily", "-m", "again", "--every", "2h")
    assert r.exit_code == 1 and 'a cron job is already named "daily"' in r.output
    assert vault.head() == head
    assert run("cron", "remove", "daily").exit_code == 0


def test_a_broken_cron_json_hand_edit_is_never_committed_and_status_says_so(vault, run, tmp_path):
    good = (vault.root / "cron.json").read_text()
    (vault.root / "cron.json").write_text('{"version": 1, "jobs": [\n')
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Likes tea\n")
    r = run("status")
    assert "cron.json is not committed until the problem below is fixed, the rest before" in r.output
    assert "cron.json:2:1: not valid JSON" in r.output
    r = run("note", "call the dentist")
    assert r.exit_code == 0, r.output
    assert "cron.json:2:1: not valid JSON" in r.output and "agent edit cron.json" in r.output
    # The other hand edit and the note are committed; the broken cron.json never is.
    assert subjects(vault)[:2][1] == "edit: MEMORY.md by hand"
    assert vault.git("show", "HEAD:cron.json") == good
    assert vault.dirty_paths() == ["cron.json"]
    assert (vault.root / "cron.json").read_text() == '{"version": 1, "jobs": [\n'
    r = run("status")
    assert "cron.json is not committed until the problem below is fixed" in r.output
    assert "committed before the agent's next change" not in r.output
    # A broken agent.toml: status does not promise a commit either.
    toml = (vault.root / "agent.toml").read_text()
    (vault.root / "agent.toml").write_text(toml + "x = [\n")
    r = run("status")
    assert "not committed until the problem below is fixed" in r.output
    assert "agent.toml" in r.output and "agent edit agent.toml" in r.output
    (vault.root / "agent.toml").write_text(toml)
    # `agent edit cron.json` is how it is repaired, and then the commit goes through.
    fix = editor(tmp_path, f"open(p, 'w').write({good!r})\n"
                           "open(p, 'a').write('\\n')\n")
    p = agent_proc("edit", "cron.json", vault=vault.root, env={"VISUAL": fix})
    assert p.returncode == 0, p.stderr
    assert subjects(vault)[0] == "edit: cron.json by hand"
    assert run("note", "call the dentist").exit_code == 0
