#!/usr/bin/env python3
"""What acting costs: the sandbox's overhead, how fast a cancelled tree of sub-agents
stops, and how well sub-agents run in parallel.

Prints:

- `exec` overhead: the wall time of `sandbox.run` for the command `true` (bwrap start,
  namespaces, mounts, the command, exit, output read) against running `sh -c true` with
  subprocess unsandboxed; median and 95th percentile of N runs each, and the difference,
  and bwrap alone with the same arguments (to show what the namespaces and mounts cost
  and what the limits around them add). Target: under 50 ms.
- cancellation: a turn starts a sub-agent, which starts one, which starts one (three
  levels); when the third is waiting on the model, SIGINT (Ctrl-C) is sent to the
  process; the time until every one of the three runs has saved (marked interrupted)
  and committed. Target: under 1 s.
- parallel sub-agents: a turn whose reply calls spawn_agent 20 times, each sub-agent's
  model answering after a fixed latency, against the same turn with one spawn_agent
  call: wall times, and their ratio (1.0 = perfectly parallel).

Against the fake Anthropic server (tests/fakeanthropic.py), in a temporary vault.

    python scripts/bench_act.py [--runs 50] [--latency 0.5] [--agents 20]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fakeanthropic import FakeAnthropic, reply, tool_use  # noqa: E402

from agent import sandbox  # noqa: E402
from agent.chat import subagents  # noqa: E402
from agent.chat.turn import run_turn  # noqa: E402
from agent.clock import now  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def bench_exec(vault: Vault, runs: int) -> None:
    status = sandbox.sandbox_status()
    if not status.ok:
        print(f"exec: skipped ({status.message})")
        return
    spec = sandbox.SandboxSpec(vault.root, "true", timeout=30)
    sandbox.run(spec)                      # warm the page cache
    boxed, plain, raw = [], [], []
    args = sandbox.command_line(spec, status.bwrap)
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(args, check=True)
        raw.append(time.perf_counter() - t)
        t = time.perf_counter()
        r = sandbox.run(spec)
        boxed.append(time.perf_counter() - t)
        assert r.exit_code == 0, r
        t = time.perf_counter()
        subprocess.run(["/bin/sh", "-c", "true"], check=True)
        plain.append(time.perf_counter() - t)
    mb, mp = statistics.median(boxed), statistics.median(plain)
    print(f"exec `true`, {runs} runs ({status.message}):")
    print(f"  sandboxed:   median {ms(mb)}, p95 {ms(pct(boxed, 0.95))}")
    print(f"  unsandboxed: median {ms(mp)}, p95 {ms(pct(plain, 0.95))}")
    print(f"  overhead:    median {ms(mb - mp)} (target < 50 ms)")
    print(f"  of which bwrap alone (same arguments, no limits, no pids cgroup): median "
          f"{ms(statistics.median(raw))}")
    if sandbox._pids_parent() is not None:
        # As root, RLIMIT_NPROC does not bind, so each command's processes are put in a
        # pids cgroup (moving a process into a v1 cgroup waits for an RCU grace period).
        # A person's own user gets RLIMIT_NPROC instead: measure that path too.
        found = sandbox._pids_parent
        sandbox._pids_parent = lambda: None
        try:
            user = []
            for _ in range(runs):
                t = time.perf_counter()
                sandbox.run(spec)
                user.append(time.perf_counter() - t)
        finally:
            sandbox._pids_parent = found
        mu = statistics.median(user)
        print(f"  running as root, so the above includes the pids cgroup; without it (the path "
              f"of a non-root user, RLIMIT_NPROC): median {ms(mu)}, overhead {ms(mu - mp)}")


class Script:
    """Replies per agent, picked by the task in a request's first message."""

    def __init__(self, queues):
        self.queues = {k: list(v) for k, v in queues.items()}
        self.lock = threading.Lock()

    def __call__(self, body):
        first = json.dumps(body["messages"][0])
        key = max((k for k in self.queues if k in first), key=first.rfind)
        with self.lock:
            item = self.queues[key].pop(0)
        return item(body) if callable(item) else item


def bench_cancel(vault: Vault, fake: FakeAnthropic, provider) -> None:
    stuck, never = threading.Event(), threading.Event()

    def hang(body):
        stuck.set()
        never.wait(60)
        return reply("too late")

    fake.default_reply = Script({
        "PARENT": [reply(tool_use("spawn_agent", {"prompt": "LEVELONE delegate"}))],
        "LEVELONE": [reply(tool_use("spawn_agent", {"prompt": "LEVELTWO delegate"}))],
        "LEVELTWO": [reply(tool_use("spawn_agent", {"prompt": "LEVELTHREE work"}))],
        "LEVELTHREE": [hang]})
    sent = {}

    def interrupt():
        stuck.wait(60)
        time.sleep(0.05)
        sent["t"] = time.perf_counter()
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=interrupt, daemon=True).start()
    before = set(subagents.RUNS)
    result = run_turn(vault, provider, "cli/default", "PARENT go deep", now())
    runs = [r for rid, r in subagents.RUNS.items() if rid not in before]
    for r in runs:
        r.done.wait(30)
    ended = max(r.ended for r in runs)
    # r.ended is time.monotonic(); convert the interrupt's perf_counter time to it.
    offset = time.monotonic() - time.perf_counter()
    took = ended - (sent["t"] + offset)
    parent_done = time.perf_counter() - sent["t"]
    never.set()
    statuses = sorted(r.status for r in runs)
    print("cancellation of a three-level tree (Ctrl-C while the third level waits on the model):")
    print(f"  every run saved and committed {ms(took)} after SIGINT (target < 1 s); runs: "
          f"{statuses}; the parent turn interrupted={result.interrupted}, returned after "
          f"{ms(parent_done)}")


def bench_parallel(vault: Vault, fake: FakeAnthropic, provider, n: int, latency: float) -> None:
    def one_round(count: int) -> float:
        tasks = [f"TASK{i:02d}X" for i in range(count)]
        queues = {"PARENT": [reply(*[tool_use("spawn_agent", {"prompt": t}) for t in tasks]),
                             reply("all done")]}
        for t in tasks:
            queues[t] = [reply(f"{t} done", delay=latency)]
        fake.default_reply = Script(queues)
        t0 = time.perf_counter()
        r = run_turn(vault, provider, "cli/default", "PARENT fan out", now())
        took = time.perf_counter() - t0
        assert r.error is None and not r.interrupted, r
        return took

    one = one_round(1)
    many = one_round(n)
    print(f"parallel sub-agents (each model call answers after {latency:g} s):")
    print(f"  1 sub-agent:  {one:.2f} s wall")
    print(f"  {n} sub-agents: {many:.2f} s wall ({many / one:.2f}x one; {n}x would be serial)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--agents", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / ".gitconfig").write_text("[user]\n\tname = Bench\n\temail = bench@example.com\n")
        os.environ.update(HOME=str(home), GIT_CONFIG_GLOBAL=str(home / ".gitconfig"),
                          GIT_CONFIG_NOSYSTEM="1")
        vault, _ = Vault.init(Path(tmp) / "vault", LAYOUT)
        bench_exec(vault, args.runs)
        with FakeAnthropic() as fake:
            os.environ["ANTHROPIC_BASE_URL"] = fake.url
            os.environ["ANTHROPIC_API_KEY"] = "bench-key"
            from agent.llm import make_provider
            provider = make_provider()
            bench_cancel(vault, fake, provider)
            bench_parallel(vault, fake, provider, args.agents, args.latency)


if __name__ == "__main__":
    main()
