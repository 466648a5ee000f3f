#!/usr/bin/env python3
"""What `agent serve` costs with 1,000 jobs in cron.json, and how late due jobs start.

Runs the real `agent serve` as a process against the fake Anthropic server:

1. idle: 1,000 jobs none of which is due (daily cron expressions in several time
   zones, daily intervals); the process's CPU time over the wall time of a minute
   (utime + stime of serve and of the git processes it ran, from /proc; start-up
   excluded);
2. due: the same 1,000 jobs plus `at` jobs falling due every few seconds; for each, how
   late it started: when serve claimed it (its log line, "started X s late") and when
   the model request reached the fake server, both against the due time. Median and
   maximum.

Targets: idle CPU under 1% of one core; due jobs start within the tick's promise
(serve sleeps until the next due time, so lateness should be tens of milliseconds,
plus the time the previous job's turn takes when two fall due together).

    python scripts/bench_serve.py [--jobs 1000] [--idle 60] [--due 20] [--spacing 2] [--tick 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fakeanthropic import FakeAnthropic, reply  # noqa: E402

from agent.vault.change import Change  # noqa: E402
from agent import schedule as sched  # noqa: E402
from agent.stores import cronfile  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

ZONES = ["Europe/Paris", "America/New_York", "Asia/Tokyo", "UTC", None]
TICKS = os.sysconf("SC_CLK_TCK")


def idle_jobs(cf: cronfile.CronFile, n: int, now: datetime) -> None:
    """n jobs none of which falls due within the next hours."""
    for i in range(n):
        if i % 4 == 3:
            s = sched.make_schedule(every="1d", now=now)
        else:
            hour = (now.astimezone(sched.zone(ZONES[i % 5])).hour + 6 + i % 12) % 24
            s = sched.make_schedule(cron=f"{i % 60} {hour} * * *", tz=ZONES[i % 5], now=now)
        cf.jobs.append(cronfile.new_job(cf, f"job{i}", f"message {i}", s, now))


def cpu_seconds(pid: int) -> float:
    """CPU time of the process and of the children it waited for (git runs)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICKS    # utime, stime, cutime, cstime


class Serve:
    def __init__(self, vault: Path, tick: float, env: dict):
        self.p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault), "serve",
                                   "--tick", str(tick)], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while not any(text in x for x in self.lines):
            if self.p.poll() is not None or time.monotonic() > end:
                raise SystemExit("serve did not start:\n" + "\n".join(self.lines))
            time.sleep(0.05)

    def stop(self) -> None:
        self.p.terminate()
        self.p.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--idle", type=float, default=60.0, help="seconds of idle measurement")
    ap.add_argument("--due", type=int, default=20, help="at jobs falling due in phase 2")
    ap.add_argument("--spacing", type=float, default=2.0, help="seconds between due jobs")
    ap.add_argument("--tick", type=float, default=5.0, help="serve --tick (its default is 5)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    home = tmp / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Bench\n\temail = bench@example.com\n")
    os.environ.update(HOME=str(home), GIT_CONFIG_GLOBAL=str(home / ".gitconfig"),
                      GIT_CONFIG_NOSYSTEM="1")
    vault, _ = Vault.init(tmp / "vault", LAYOUT)
    now = datetime.now(timezone.utc)
    cf = cronfile.CronFile()
    idle_jobs(cf, args.jobs, now)
    text = cronfile.dumps(cf)
    t = time.perf_counter()
    for _ in range(5):
        cronfile.loads(text)
    parse_ms = (time.perf_counter() - t) / 5 * 1000
    with vault.locked():
        vault.write_text("cron.json", text)
        vault.commit(Change("bench", f"{args.jobs} jobs"))

    arrivals: dict[str, float] = {}

    def answer(request: dict):
        # The job's own text comes last (memories recalled from earlier jobs come first).
        found = re.findall(r"bench-due-\d+", json.dumps(request.get("messages", [])[-1:]))
        if found and found[-1] not in arrivals:
            arrivals[found[-1]] = time.time()
        return reply("Done.")

    with FakeAnthropic() as fake:
        fake.default_reply = answer
        env = dict(os.environ, ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="bench")

        # -- phase 1: idle
        serve = Serve(vault.root, args.tick, env)
        serve.wait_for("agent serve on")
        time.sleep(1.0)                         # let start-up settle
        c0, w0 = cpu_seconds(serve.p.pid), time.monotonic()
        time.sleep(args.idle)
        c1, w1 = cpu_seconds(serve.p.pid), time.monotonic()
        serve.stop()
        idle_cpu = (c1 - c0) / (w1 - w0)

        # -- phase 2: due jobs among the 1,000
        start = datetime.now(timezone.utc) + timedelta(seconds=8)
        due_at: dict[str, datetime] = {}
        cf = cronfile.loads((vault.root / "cron.json").read_text())
        for i in range(args.due):
            at = start + timedelta(seconds=args.spacing * i)
            at = at.replace(microsecond=0) + timedelta(seconds=1)
            name = f"bench-due-{i}"
            job = cronfile.new_job(cf, name, f"{name}: say done", sched.Schedule("at", at=at), now)
            cf.jobs.append(job)
            due_at[name] = at
        with vault.locked():
            vault.write_text("cron.json", cronfile.dumps(cf))
            vault.commit(Change("bench", f"{args.due} due jobs"))
        serve = Serve(vault.root, args.tick, env)
        serve.wait_for("agent serve on")
        last = max(due_at.values())
        deadline = time.time() + (last - datetime.now(timezone.utc)).total_seconds() + 30
        while time.time() < deadline and len([x for x in serve.lines if ": ok (" in x]) < args.due:
            time.sleep(0.2)
        serve.stop()

    claimed = [float(m.group(1)) for x in serve.lines
               if "bench-due" in x and (m := re.search(r"started ([\d.]+)s late", x))]
    asked = [arrivals[n] - due_at[n].timestamp() for n in due_at if n in arrivals]
    commits = int(vault.git("rev-list", "--count", "HEAD").strip())

    print(f"cron.json with {args.jobs} jobs: {len(text) / 1024:.0f} KiB, parse+validate "
          f"{parse_ms:.1f} ms")
    print(f"idle: {args.jobs} jobs, tick {args.tick:g}s, {w1 - w0:.1f}s wall: CPU "
          f"{c1 - c0:.2f}s = {idle_cpu * 100:.2f}% of one core")
    if claimed:
        print(f"due: {len(claimed)}/{args.due} jobs run among {args.jobs}; claimed late by "
              f"median {statistics.median(claimed) * 1000:.0f} ms, max {max(claimed) * 1000:.0f} ms")
    if asked:
        print(f"     model asked late by median {statistics.median(asked) * 1000:.0f} ms, "
              f"max {max(asked) * 1000:.0f} ms (prompt building and the vault lock included)")
    print(f"commits in the vault: {commits}")
    if len(claimed) < args.due:
        print("WARNING: not every due job ran:\n" + "\n".join(serve.lines[-20:]))


if __name__ == "__main__":
    main()
