#!/usr/bin/env python3
"""A million messages: what everyday commands cost in a vault holding a life's history
(issue 28).

Builds a vault of N messages quickly (session files written directly in the vault's
format, one imported session of N messages compacted the way `agent import` leaves it,
and 1,000 archive entries with the messages they cover), indexes it, then runs each
command as a person would (`python -m agent`, a new process) against the fake Anthropic
server (tests/fakeanthropic.py) and prints its wall time and peak memory (RSS):

  note, status, a chat turn (stand-in model), search (words), search (hybrid: words and
  meaning, when the embed extra is installed), sync of that turn to a bare remote, and a
  dream over the 1,000 archive entries.

Each command runs --runs times (median shown; the dream once). The index build reads the
whole history by design and is shown apart.

    python scripts/bench_million.py [--messages 1000000] [--runs 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from fakeanthropic import FakeAnthropic, json_reply, reply  # noqa: E402

import bench_window  # noqa: E402
from bench_dream import fake_model as dream_model, memory_md  # noqa: E402

from agent.vault.change import Change  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

ENTRIES = 1000


def model(params: dict):
    """The stand-in model: summaries, the dream's two phases, else a short reply."""
    if "output_config" in params:
        content = params["messages"][0]["content"]
        if isinstance(content, list) and "Phase 1, analyst" in json.dumps(content) or \
                isinstance(content, list) and "<findings>" in json.dumps(content):
            return dream_model(params)
        return json_reply({"topic": "Old talk", "summary": "They talked.", "importance": 0.3})
    return reply("Noted.")


def build(root: Path, n: int) -> Vault:
    from dreamkit import write_entries
    vault, _ = Vault.init(root, LAYOUT)
    vault.write_text("MEMORY.md", memory_md())
    vault.commit(Change("bench", "memory"))
    bench_window.build(root, n, True)
    specs = [{"summary": f"They planned step {i} of the garden: tomatoes, roses and the shed.",
              "session": "cli/archived"} for i in range(ENTRIES)]
    write_entries(vault, specs, start=1, messages_per_entry=2, commit=False)
    vault.git("add", "-A")
    vault.git("-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm",
              f"bench: {n} messages")
    return vault


def run(args: list[str], env: dict, embed: bool = False) -> tuple[float, int, str]:
    """(seconds, peak RSS in MB, output) of one `agent` command in a new process; words
    alone unless `embed` (embedding a million messages takes hours: the hybrid search
    embeds what its own budget allows, as it does for a person)."""
    env = {**env, "AGENT_EMBED": "on" if embed else "off"}
    t = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "RSS %M", sys.executable, "-m", "agent", *args],
                       capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    took = time.perf_counter() - t
    m = re.search(r"RSS (\d+)", p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"agent {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return took, int(m.group(1)) // 1024 if m else 0, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="build the vault here and keep it")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    root = args.keep or tmp / "vault"
    with FakeAnthropic() as server:
        server.default_reply = lambda body: model(body)
        server.batch_polls = 0
        env = {**os.environ, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "bench",
               "PYTHONPATH": str(ROOT), "GIT_AUTHOR_NAME": "bench", "GIT_COMMITTER_NAME": "bench",
               "GIT_AUTHOR_EMAIL": "bench@localhost", "GIT_COMMITTER_EMAIL": "bench@localhost"}
        t = time.perf_counter()
        vault = build(root, args.messages)
        built = time.perf_counter() - t
        remote = tmp / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
        vault.git("remote", "add", "origin", str(remote))
        vault.git("push", "-q", "origin", "HEAD")
        va = ["--vault", str(root)]
        index_s, index_mb, _ = run([*va, "index", "rebuild"], env)
        print(f"{args.messages:,} messages in one imported session, {ENTRIES:,} archive entries: "
              f"built in {built:.0f} s; index rebuild {index_s:.1f} s, {index_mb} MB "
              f"(reads the whole history by design)", flush=True)
        commands = [
            ("note", ["note", "bench note"]),
            ("status", ["status"]),
            ("chat turn", ["chat", "--session", bench_window.KEY, "-m", "what did we plan for the garden?"]),
            ("search (words)", ["search", "--mode", "words", "garden trip"]),
            ("search (hybrid)", ["search", "--mode", "hybrid", "garden trip"]),
            ("sync (one turn)", ["sync"]),
        ]
        rows = []
        for name, cmd in commands:
            times, peaks = [], []
            for _ in range(args.runs):
                if name.startswith("sync"):
                    run([*va, "note", "one more"], env)      # something to send
                try:
                    s, mb, _ = run([*va, *cmd], env, embed="hybrid" in name)
                except SystemExit as e:
                    print(f"{name}: {str(e).splitlines()[0]}")
                    break
                times.append(s)
                peaks.append(mb)
            if times:
                rows.append((name, statistics.median(times), max(peaks)))
                print(f"{name:<18} {statistics.median(times):7.2f} s  {max(peaks):5d} MB", flush=True)
        s, mb, out = run([*va, "dream", "--poll-interval", "0.05"], env)
        print(f"{'dream (1,000 entries)':<18} {s:7.2f} s  {mb:5d} MB   {out.strip().splitlines()[-1][:80]}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
