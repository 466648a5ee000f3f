"""Schedules a person's hand edits can break: one bad job or heartbeat is reported and
skipped while the rest keep running, and `next_run` is right across DST for any `now`."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from agent.schedule import Schedule, next_run, settle
from conftest import subjects
from fakeanthropic import reply

NY = ZoneInfo("America/New_York")


def _job(job_id, name, schedule, next_run_at="2026-11-20T10:30:00+00:00"):
    return {"id": job_id, "name": name, "enabled": True, "schedule": schedule,
            "message": f"job {name}", "session": f"cron/{job_id}", "delete_after_run": False,
            "misfire": "run_once", "state": {"next_run": next_run_at, "last_run": None,
                                             "last_status": None, "last_error": None}}


BAD_JOBS = [
    _job("feb31", "never", {"kind": "cron", "at": None, "every_seconds": None,
                            "expr": "0 0 31 2 *", "tz": None}),
    _job("huge", "huge", {"kind": "every", "at": None, "every_seconds": 99999999999 * 86400,
                          "expr": None, "tz": None}),
    _job("zone", "zone", {"kind": "cron", "at": None, "every_seconds": None,
                          "expr": "0 9 * * *", "tz": "Mars/Olympus"}),
]
GOOD = _job("good1", "good", {"kind": "every", "at": None, "every_seconds": 600,
                              "expr": None, "tz": None}, "2000-01-01T00:00:00+00:00")


def _write_cron(vault, jobs):
    (vault.root / "cron.json").write_text(json.dumps({"version": 1, "jobs": jobs}, indent=2))
    vault.git("add", "cron.json")
    vault.git("commit", "-qm", "cron by hand")


def test_cron_list_reports_bad_jobs_and_lists_the_rest(vault, run):
    _write_cron(vault, BAD_JOBS + [GOOD])
    r = run("cron", "list")
    assert r.exit_code == 0, r.output
    assert "good1" in r.output
    assert "Skipped: cron.json: job 1 (never): invalid cron expression '0 0 31 2 *'" in r.output
    assert "Skipped: cron.json: job 2 (huge)" in r.output and "ten years" in r.output
    assert "Skipped: cron.json: job 3 (zone): unknown time zone" in r.output


def test_cron_add_refuses_an_expression_that_never_fires(vault, run):
    r = run("cron", "add", "never", "-m", "x", "--cron", "0 0 31 2 *")
    assert r.exit_code == 1 and "invalid cron expression '0 0 31 2 *'" in r.output
    r = run("cron", "add", "far", "-m", "x", "--every", "99999999999d")
    assert r.exit_code != 0 and "ten years" in r.output
    assert "Traceback" not in r.output


def test_cron_add_keeps_the_bad_jobs_a_person_wrote(vault, run):
    _write_cron(vault, BAD_JOBS)
    r = run("cron", "add", "water", "-m", "drink", "--every", "1h")
    assert r.exit_code == 0, r.output
    jobs = json.loads((vault.root / "cron.json").read_text())["jobs"]
    assert jobs[:3] == BAD_JOBS and jobs[3]["name"] == "water"


@pytest.mark.slow
def test_a_wrong_typed_field_names_the_file_the_job_and_what_it_must_be(vault, run):
    typed = [{**GOOD, "id": "yes1", "name": "said yes", "enabled": "yes"},
             {**GOOD, "id": "late", "name": "late", "state": {"next_run": 1700000000}},
             {**GOOD, "id": "num", "name": 7}]
    _write_cron(vault, typed + [GOOD])
    before = (vault.root / "cron.json").read_bytes()
    r = run("cron", "list")
    assert r.exit_code == 0, r.output
    skipped = [line for line in r.output.splitlines() if line.startswith("Skipped:")]
    assert skipped == [
        'Skipped: cron.json: job 1 (said yes): enabled must be true or false, got "yes"',
        "Skipped: cron.json: job 2 (late): state.next_run must be an ISO 8601 time or null, "
        "got 1700000000",
        "Skipped: cron.json: job 3: name must be a string, got 7"]
    assert "good1" in r.output
    assert (vault.root / "cron.json").read_bytes() == before


def test_serve_skips_bad_jobs_and_heartbeats_and_runs_the_rest(vault, fake_anthropic):
    _write_cron(vault, BAD_JOBS + [GOOD])
    hb = vault.root / "heartbeat"
    (hb / "far.md").write_text("---\nname: far\nevery: 99999999999d\n---\nhi\n")
    (hb / "feb.md").write_text('---\nname: feb\ncron: "0 0 31 2 *"\n---\nhi\n')
    vault.git("add", "heartbeat")
    vault.git("commit", "-qm", "heartbeats by hand")
    fake_anthropic.add(reply("done"))
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "serve",
                        "--once"], capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "Traceback" not in out
    assert "cron job skipped: cron.json: job 1 (never)" in out
    assert "heartbeat/far.md" in out and "heartbeat/feb.md" in out
    assert subjects(vault)[0] == "cron(cron/good1): job good"
    jobs = json.loads((vault.root / "cron.json").read_text())["jobs"]
    assert jobs[:3] == BAD_JOBS                       # written back as the person wrote them


# ---- next_run across DST ----------------------------------------------------------------


@pytest.mark.parametrize("now", [
    datetime(2026, 11, 1, 1, 10, tzinfo=NY, fold=1),                   # 01:10 EST, same ZoneInfo
    datetime(2026, 11, 1, 6, 10, tzinfo=timezone.utc),                 # the same instant in UTC
    datetime(2026, 11, 1, 1, 10, tzinfo=timezone(timedelta(hours=-5))),  # a fixed offset
])
def test_next_run_is_never_in_the_past_on_the_autumn_change(now):
    s = Schedule("cron", expr="30 1 * * *", tz="America/New_York")
    got = next_run(s, now)
    assert got.astimezone(timezone.utc) > now.astimezone(timezone.utc)
    assert got.astimezone(timezone.utc) == datetime(2026, 11, 2, 6, 30, tzinfo=timezone.utc)


def test_every_steps_in_real_time_across_the_change():
    anchor = datetime(2026, 11, 1, 0, 30, tzinfo=NY)                  # EDT
    now = datetime(2026, 11, 1, 1, 10, tzinfo=NY, fold=1)             # EST, 1h40m later
    got = next_run(Schedule("every", every_seconds=3600), now, anchor=anchor)
    assert got.astimezone(timezone.utc) == datetime(2026, 11, 1, 6, 30, tzinfo=timezone.utc)
    run_now, following = settle(Schedule("every", every_seconds=3600),
                                datetime(2026, 11, 1, 1, 30, tzinfo=NY, fold=0), "run_once",
                                now, missed=False)
    assert run_now                                  # 01:30 EDT was before 01:10 EST
    assert following.astimezone(timezone.utc) > now.astimezone(timezone.utc)
