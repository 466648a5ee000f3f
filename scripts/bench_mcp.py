#!/usr/bin/env python3
"""`agent mcp` and `agent why` on a large vault.

Builds a vault of 100,000 messages the way scripts/bench_vault.py does, then gives it a
history: COMMITS commits (default 50,000, about one per chat turn of those messages),
with a fact remembered in a chat turn at the start of that history (so `agent why` on it
walks every commit since) and one near the end. Then measures:

- start to ready: spawning `agent mcp` until `initialize` is answered, through the SDK's
  own stdio client (process start, imports, handshake), median and p95;
- `search` and `remember` round trips through the SDK client (a remember is a commit
  and an index refresh), median and p95;
- `agent why` wall time (a whole process) on the old fact and on the recent one.

Targets: start under 400 ms, search round trip under 50 ms median, `why` under 300 ms.

    python scripts/bench_mcp.py [--messages 100000] [--commits 50000] [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
# Words alone, as these figures were set; scripts/bench_search.py measures search by
# meaning (with the embed extra, `index rebuild` here would embed every message).
os.environ.setdefault("AGENT_EMBED", "off")
sys.path.insert(0, str(HERE))

import anyio  # noqa: E402
from bench_vault import build  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp_types import Implementation  # noqa: E402

OLD_FACT = "- Alice keeps her climbing gear in the blue locker at the Nordwand gym"
NEW_FACT = "- The quarterly review with Bernd moved to 2026-12-09"
WORDS = ["topic 12", "plan 7", "message 4512", "locker", "quarterly review", "topic 88 plan 3",
         "note for day", "summary", "climbing gear", "Nordwand"]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def history(vault, commits: int) -> None:
    """`commits` commits on top of the built vault, by git fast-import: turn commits
    appending to daily notes, with two of them remembering a fact in MEMORY.md."""
    root = vault.root
    memory = (root / "MEMORY.md").read_text()
    session_rel = "sessions/cli/default/2030-01.jsonl"
    head = vault.git("rev-parse", "HEAD").strip()
    agent = "agent <agent@localhost>"
    out = [f"reset refs/heads/main\nfrom {head}\n"]
    session_lines: list[str] = []
    notes: dict[str, list[str]] = {}
    t0 = 1_900_000_000

    def blob(text: str) -> str:
        data = text.encode()
        return f"data {len(data)}\n{text}"

    for i in range(commits):
        turn = i + 1
        files = {}
        if i in (0, commits - 5):
            fact = OLD_FACT if i == 0 else NEW_FACT
            memory = memory.rstrip("\n") + "\n" + fact + "\n"
            files["MEMORY.md"] = memory
            said = f"please remember: {fact[2:]}"
            session_lines += [
                json.dumps({"id": f"t{turn}.0", "ts": "2030-01-05T10:00:00+00:00", "role": "user",
                            "content": said, "turn": turn}, separators=(",", ":")),
                json.dumps({"id": f"t{turn}.1", "ts": "2030-01-05T10:00:00+00:00",
                            "role": "assistant", "turn": turn, "content": [
                                {"type": "tool_use", "id": f"tu{turn}", "name": "remember",
                                 "input": {"text": fact[2:], "target": "memory"}}]},
                           separators=(",", ":"))]
            files[session_rel] = "\n".join(session_lines) + "\n"
            subject = f"chat(cli/default): {said[:50]}"
        else:
            rel = f"memory/2031-{1 + (i // 3000) % 12:02d}-{1 + (i // 100) % 28:02d}.md"
            notes.setdefault(rel, ["# note", ""]).append(f"- 10:00 turn {turn} noted")
            files[rel] = "\n".join(notes[rel][-60:]) + "\n"
            subject = f"chat(cli/work): turn {turn}"
        message = f"{subject}\n\nSession: cli/default\nTurn: {turn}\n"
        out.append(f"commit refs/heads/main\nauthor {agent} {t0 + i * 60} +0000\n"
                   f"committer {agent} {t0 + i * 60} +0000\n{blob(message)}\n")
        for rel, text in files.items():
            out.append(f"M 100644 inline {rel}\n{blob(text)}\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input="".join(out).encode(),
                   check=True)
    vault.git("reset", "-q", "--hard")
    vault.git("gc", "-q")


def agent_env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # as installed: the bytecode is cached
    return env


def params(vault) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "agent", "--vault", str(vault.root), "mcp"],
                                 env=agent_env())


async def start_times(vault, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        async with Client(params(vault), mode="legacy",
                          client_info=Implementation(name="bench", version="1")):
            times.append((time.perf_counter() - t) * 1000)
    return times


async def round_trips(vault, runs: int) -> tuple[list[float], list[float]]:
    search, remember = [], []
    async with Client(params(vault), mode="legacy",
                      client_info=Implementation(name="bench", version="1")) as c:
        await c.call_tool("search", {"query": "warm up"})     # the first refresh of the index
        for i in range(runs):
            t = time.perf_counter()
            r = await c.call_tool("search", {"query": WORDS[i % len(WORDS)], "limit": 10})
            search.append((time.perf_counter() - t) * 1000)
            assert not r.is_error
        for i in range(runs):
            t = time.perf_counter()
            r = await c.call_tool("remember", {"text": f"bench fact number {i}",
                                               "target": "memory"})
            remember.append((time.perf_counter() - t) * 1000)
            assert not r.is_error, r
    return search, remember


def why_times(vault, text: str, runs: int) -> tuple[list[float], str]:
    times, out = [], ""
    for _ in range(runs):
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "why",
                            text], capture_output=True, text=True, env=agent_env())
        times.append((time.perf_counter() - t) * 1000)
        if p.returncode:
            raise SystemExit(f"agent why failed: {p.stdout}{p.stderr}")
        out = p.stdout
    return times, out


def filters(vault) -> bool:
    graph = vault.git_dir / "objects" / "info" / "commit-graph"
    try:
        return b"BIDX" in graph.read_bytes()[:200]
    except OSError:
        return False


def wall(cmd: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, env=agent_env(), check=True)
        times.append((time.perf_counter() - t) * 1000)
    return times


def line(label: str, values: list[float], target: str = "") -> str:
    return (f"{label:<34} median {statistics.median(values):7.1f} ms   p95 {pct(values, 0.95):7.1f} ms"
            f"   (n={len(values)}){'   target ' + target if target else ''}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--commits", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    os.environ.setdefault("GIT_AUTHOR_NAME", "bench")
    os.environ.setdefault("GIT_AUTHOR_EMAIL", "bench@localhost")
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        vault = build(Path(tmp) / "vault", args.messages)
        history(vault, args.commits)
        subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "index",
                        "rebuild"], check=True, capture_output=True, env=agent_env())
        count = vault.git("rev-list", "--count", "HEAD").strip()
        print(f"built {args.messages} messages, {count} commits in "
              f"{time.perf_counter() - t:.0f}s", file=sys.stderr)

        start = anyio.run(start_times, vault, args.runs)
        search, remember = anyio.run(round_trips, vault, args.runs)
        # The first `agent why` finds no changed-path filters in the commit-graph and
        # starts writing them in the background; the figures after are the steady state.
        why_cold, _ = why_times(vault, "climbing gear locker", 1)
        t = time.perf_counter()
        while not filters(vault) and time.perf_counter() - t < 600:
            time.sleep(0.5)
        print(f"changed-path filters written in the background in "
              f"{time.perf_counter() - t:.0f}s", file=sys.stderr)
        why_old, story = why_times(vault, "climbing gear locker", max(5, args.runs // 2))
        why_new, _ = why_times(vault, "quarterly review Bernd", max(5, args.runs // 2))
        assert "remember in a chat turn" in story, story
        # Baselines on this machine at this moment: a bare command, and the SDK's import.
        help_ = wall([sys.executable, "-m", "agent", "--help"], max(5, args.runs // 2))
        sdk = wall([sys.executable, "-c", "import mcp.server.lowlevel, mcp.server.stdio"],
                   max(5, args.runs // 2))

        print(f"vault: {args.messages} messages, {count} commits")
        print(line("baseline: agent --help", help_))
        print(line("baseline: python -c 'import mcp...'", sdk))
        print(line("agent mcp start to ready", start, "< 400 ms"))
        print(line("search round trip", search, "< 50 ms median"))
        print(line("remember round trip (a commit)", remember))
        print(line(f"agent why, {args.commits} commits old, first", why_cold))
        print(line(f"agent why, fact {args.commits} commits old", why_old, "< 300 ms"))
        print(line("agent why, recent fact", why_new, "< 300 ms"))
        print(json.dumps({"messages": args.messages, "commits": int(count),
                          "start_ms": [round(statistics.median(start), 1), round(pct(start, .95), 1)],
                          "search_ms": [round(statistics.median(search), 1), round(pct(search, .95), 1)],
                          "remember_ms": [round(statistics.median(remember), 1),
                                          round(pct(remember, .95), 1)],
                          "why_first_ms": round(why_cold[0], 1),
                          "why_old_ms": [round(statistics.median(why_old), 1), round(pct(why_old, .95), 1)],
                          "why_recent_ms": [round(statistics.median(why_new), 1),
                                            round(pct(why_new, .95), 1)],
                          "help_ms": round(statistics.median(help_), 1),
                          "sdk_import_ms": round(statistics.median(sdk), 1)}))


if __name__ == "__main__":
    main()
