#!/usr/bin/env python3
"""What a chat turn costs besides the model, as the vault grows, and how fast `agent chat`
reaches the model.

Against the fake Anthropic server (tests/fakeanthropic.py) answering at once, for
synthetic vaults of about 1,000 and 100,000 messages (eight sessions over months, chat-like
text with a Zipf vocabulary, history compacted into archive entries with markers, a
daily note per day, memory files, one commit, the search index built), prints:

- the median and 95th percentile of a turn's own overhead: `run_turn` wall time minus
  the time spent inside the model calls (prompt building with retrieval, persisting,
  index update, commit), with the median of each phase;
- the time from starting `agent chat -m` (a new process) to its request reaching the
  server, median and best of several runs; alone, and while `agent serve` runs (then
  `chat -m` sends the message through serve's local socket, and serve holds the SDK);
- the wall time of a turn whose reply calls two tools that each sleep 0.4 s: about
  0.4 s when the tools of one reply run concurrently, as they should, 0.8 s if not.

Targets: overhead median under 50 ms, growing by at most 1.5x between the sizes.

    python scripts/bench_turn.py [--sizes 1000,100000] [--turns 40] [--starts 5] [--keep DIR] [--compare DIR]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from itertools import accumulate
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT))
# Words alone, as these figures were set; scripts/bench_search.py measures search by
# meaning (with the embed extra, `index rebuild` here would embed every message).
os.environ.setdefault("AGENT_EMBED", "off")
sys.path.insert(0, str(ROOT / "tests"))

from fakeanthropic import FakeAnthropic, reply, tool_use  # noqa: E402

from agent.stores import archive
from agent.chat import prompt as context
from agent.search import index
from agent.chat import turn as loop
from agent.chat.turn import save as saving
from agent.stores import memory
from agent.stores import sessions  # noqa: E402
from agent.stores import window
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

VOCAB = 50000
STOP = ("the a to and of i it you that in is was for on with my me have but so this be "
        "just what we at your are do not all like can if they about").split()
CHAT = "cli/default"
PER_ARCHIVE = 40            # messages per archive entry in the synthetic history
WINDOW = 12                 # messages left in the active window of the chat session


def word(i: int) -> str:
    """A pronounceable pseudo-word for vocabulary rank i (0 is the most common)."""
    cons, vows, out = "bcdfghjklmnprstvz", "aeiou", []
    i += 1
    while i:
        i, r = divmod(i, len(cons) * len(vows))
        out.append(cons[r % len(cons)] + vows[r // len(cons)])
    return "".join(out) + "r"


class Words:
    """Chat-like text: 40% stop words, content words Zipf-distributed over VOCAB ranks
    (offset so the most common content word is in a few percent of messages)."""

    def __init__(self, seed: int):
        self.rnd = random.Random(seed)
        self.cum = list(accumulate(1.0 / (r + 20) ** 1.05 for r in range(VOCAB)))

    def pick(self) -> str:
        return word(bisect.bisect(self.cum, self.rnd.random() * self.cum[-1]))

    def sentence(self, lo: int = 6, hi: int = 30) -> str:
        return " ".join(self.rnd.choice(STOP) if self.rnd.random() < 0.4 else self.pick()
                        for _ in range(self.rnd.randint(lo, hi))).capitalize() + "."

    def question(self) -> str:
        return f"What did we say about the {self.pick()} and the {self.pick()}?"


def build(root: Path, messages: int, end: datetime, seed: int = 11) -> Vault:
    """A vault with `messages` messages ending a day before `end`."""
    rnd = random.Random(seed)
    words = Words(seed)
    sentence = words.sentence
    vault, _ = Vault.init(root, LAYOUT)
    keys = [CHAT, "telegram/family", "telegram/work", "cron/1", "heartbeat/morning",
            "import/old", "cli/notes", "slack/team"]
    per_day = 50
    days = max(1, messages // per_day)
    start = end - timedelta(days=days + 1)
    files: dict[str, list[str]] = {}
    pending: dict[str, list[tuple[str, dict]]] = {k: [] for k in keys}
    turns = {k: 0 for k in keys}
    entry = 0
    archives: list[tuple[str, str]] = []

    def compact(key: str, ts: datetime, keep: int = 0) -> None:
        nonlocal entry
        part = pending[key][:len(pending[key]) - keep]
        if not part:
            return
        entry += 1
        ranges: list[dict] = []
        for rel, msg in part:
            if ranges and ranges[-1]["file"] == rel:
                ranges[-1]["through"] = msg["id"]
            else:
                ranges.append({"file": rel, "from": msg["id"], "through": msg["id"]})
        meta = {"session": key, "created": ts.isoformat(timespec="seconds"),
                "source": ranges[0] if len(ranges) == 1 else ranges,
                "topic": " ".join(words.pick() for _ in range(3)),
                "importance": round(rnd.random(), 2),
                "tokens": sum(len(m["content"]) for _, m in part) // 4}
        archives.append((archive.entry_path(entry, ts),
                         archive.render(entry, meta, sentence() + " " + sentence())))
        rel = sessions.month_file(key, ts)
        files.setdefault(rel, []).append(sessions.dumps(
            {"type": "compact", "archive": entry, "through": part[-1][1]["id"]}))
        pending[key] = pending[key][len(part):]

    ts = start
    step = timedelta(days=days) / max(1, messages)
    key = CHAT
    for n in range(messages):
        if n % 20 == 0:
            key = rnd.choice(keys)
        ts += step
        role = "user" if n % 2 == 0 else "assistant"
        if role == "user":
            turns[key] += 1
        msg = {"id": f"b{n}", "ts": ts.isoformat(timespec="seconds"), "role": role,
               "content": sentence(), "turn": max(1, turns[key])}
        rel = sessions.month_file(key, ts)
        files.setdefault(rel, []).append(sessions.dumps(msg))
        pending[key].append((rel, msg))
        if len(pending[key]) >= PER_ARCHIVE + WINDOW and pending[key][-1][1]["role"] == "assistant":
            compact(key, ts, keep=WINDOW)
    for rel, lines in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for rel, text in archives:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for d in range(days):
        day = (start + timedelta(days=d)).date()
        path = root / memory.daily_path(day)
        path.write_text(memory.daily_header(day) + "".join(
            f"- {h:02d}:00 {sentence()}\n" for h in range(9, 9 + rnd.randint(1, 4))),
            encoding="utf-8")
    (root / "MEMORY.md").write_text("# Memory\n\n## Facts\n\n" + "".join(
        f"- {sentence()}\n" for _ in range(80)), encoding="utf-8")
    (root / "USER.md").write_text("# User\n\n## About\n\n" + "".join(
        f"- {sentence()}\n" for _ in range(30)), encoding="utf-8")
    vault.git("add", "-A")
    vault.git("-c", "user.name=bench", "-c", "user.email=bench@localhost",
              "commit", "-q", "-m", f"bench: {messages} synthetic messages")
    return vault


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


class Timer:
    """Wall time spent in wrapped functions."""

    def __init__(self):
        self.spent = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - t
        return timed


def measure_turns(vault: Vault, server: FakeAnthropic, turns: int, warmup: int = 3) -> dict:
    from agent.llm import make_provider

    provider = make_provider(max_retries=0)
    model, build_t, persist_t = Timer(), Timer(), Timer()
    original = (context.build, saving.persist)
    provider.stream = model.wrap(provider.stream)     # the model call, timed on this provider
    context.build = build_t.wrap(context.build)
    saving.persist = persist_t.wrap(saving.persist)
    words = Words(3)
    rows = []
    try:
        for i in range(warmup + turns):
            for t in (model, build_t, persist_t):
                t.spent = 0.0
            question = words.question()
            now = datetime.now().astimezone()
            start = time.perf_counter()
            result = loop.run_turn(vault, provider, CHAT, question, now)
            total = time.perf_counter() - start
            assert result.sha and result.error is None, result.error
            if i >= warmup:
                rows.append((total - model.spent, build_t.spent, persist_t.spent, model.spent))
    finally:
        context.build, saving.persist = original
    over = [r[0] * 1000 for r in rows]
    return {"overhead_median_ms": statistics.median(over), "overhead_p95_ms": pct(over, 95),
            "prompt_median_ms": statistics.median(r[1] * 1000 for r in rows),
            "persist_median_ms": statistics.median(r[2] * 1000 for r in rows),
            "model_median_ms": statistics.median(r[3] * 1000 for r in rows),
            "window_messages": len(window.read_window(vault.root, CHAT).messages)}


# Every `python -m agent` here runs in the vault's folder, as a person would: `-m` puts
# the current folder first on sys.path, so run from a checkout it would import that
# checkout's code whatever PYTHONPATH says (and --compare would time one checkout twice).
def _env(server: FakeAnthropic, code: Path) -> dict:
    env = dict(os.environ, ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="bench",
               PYTHONPATH=str(code))
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # as installed: the bytecode is cached
    return env


def _start_once(vault: Vault, server: FakeAnthropic, code: Path) -> float:
    seen = len(server.calls())
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root),
                             "chat", "-m", "hello"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=_env(server, code), cwd=vault.root)
    server.wait_for_requests(seen + 1, path="/v1/messages", timeout=60)
    took = (time.perf_counter() - start) * 1000
    _, err = proc.communicate(timeout=60)
    if proc.returncode:
        raise SystemExit(f"agent chat failed: {err.decode()}")
    return took


def _prompt_once(vault: Vault, server: FakeAnthropic, code: Path) -> float:
    """From starting `agent chat` (the REPL, on a terminal) to its "> " prompt."""
    import pty
    import select
    master, slave = pty.openpty()
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat"],
                            stdin=slave, stdout=slave,
                            stderr=slave, env=_env(server, code), close_fds=True,
                            cwd=vault.root)
    os.close(slave)
    seen, took = b"", None
    while took is None and time.perf_counter() - start < 60:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
            if b"> " in seen:
                took = (time.perf_counter() - start) * 1000
    os.write(master, b"\x04")          # Ctrl-D: leave
    try:
        proc.wait(timeout=30)
    finally:
        os.close(master)
    if took is None:
        raise SystemExit(f"no prompt from agent chat: {seen.decode(errors='replace')}")
    return took


def measure_start(vault: Vault, server: FakeAnthropic, runs: int,
                  codes: list[Path]) -> dict[Path, dict]:
    """Per checkout, alternating run by run: `agent chat -m` start to request at the
    server, and the REPL's start to its prompt.

    Each checkout other than this one works on its own copy of the vault: their search
    indexes may differ in format, and one shared index would be rebuilt at every switch."""
    vaults = {codes[0]: vault}
    for i, code in enumerate(codes[1:]):
        copy = vault.root.parent / f"{vault.root.name}-compare{i}"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(vault.root, copy, symlinks=True)
        vaults[code] = Vault.open(copy, LAYOUT)
    times = {c: {"request": [], "prompt": []} for c in codes}
    for code in codes:                       # warm the bytecode caches and the index
        _start_once(vaults[code], server, code)
    for _ in range(runs):
        for code in codes:
            times[code]["request"].append(_start_once(vaults[code], server, code))
            times[code]["prompt"].append(_prompt_once(vaults[code], server, code))
    return {c: {"start_to_request_median_ms": statistics.median(t["request"]),
                "start_to_request_best_ms": min(t["request"]),
                "repl_prompt_median_ms": statistics.median(t["prompt"])} for c, t in times.items()}


def measure_remote_start(vault: Vault, server: FakeAnthropic, runs: int) -> dict:
    """`agent chat -m` start to request at the server while `agent serve` runs (no
    setting: its gateway's local socket): the message goes through serve, where the SDK
    is already imported, so the client process only reads the vault's gateway files and
    posts the message."""
    env = _env(server, ROOT)
    base = [sys.executable, "-m", "agent", "--vault", str(vault.root)]
    info = vault.root / ".agent" / "gateway.json"
    serve = subprocess.Popen(base + ["serve"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, cwd=vault.root)
    try:
        deadline = time.monotonic() + 60
        while not info.exists():
            if time.monotonic() > deadline or serve.poll() is not None:
                raise SystemExit("agent serve did not start its gateway")
            time.sleep(0.05)
        times = []
        for i in range(runs + 1):
            seen = len(server.calls())
            start = time.perf_counter()
            proc = subprocess.Popen(base + ["chat", "-m", f"hello {i}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                                    cwd=vault.root)
            server.wait_for_requests(seen + 1, path="/v1/messages", timeout=60)
            took = (time.perf_counter() - start) * 1000
            _, err = proc.communicate(timeout=60)
            if proc.returncode:
                raise SystemExit(f"agent chat through serve failed: {err.decode()}")
            if b"through the running agent serve" not in err:
                raise SystemExit(f"agent chat -m did not go through serve: {err.decode()}")
            if i:                      # the first run warms the bytecode caches
                times.append(took)
    finally:
        serve.terminate()
        serve.wait(timeout=60)
    return {"remote_start_to_request_median_ms": statistics.median(times),
            "remote_start_to_request_best_ms": min(times)}


def measure_parallel_tools(vault: Vault, server: FakeAnthropic) -> dict:
    """A turn whose reply calls two 0.4 s tools: its wall time shows they overlap."""
    from agent.chat.tools.registry import REGISTRY, tool
    from agent.llm import make_provider

    @tool
    def slow_probe(label: str) -> str:
        """Wait 0.4 s.

        Args:
            label: Anything.
        """
        time.sleep(0.4)
        return f"{label} done"

    try:
        server.add(reply(tool_use("slow_probe", {"label": "a"}),
                         tool_use("slow_probe", {"label": "b"})), reply("ok"))
        start = time.perf_counter()
        result = loop.run_turn(vault, make_provider(max_retries=0), "cli/tools", "go",
                               datetime.now().astimezone())
        took = time.perf_counter() - start
    finally:
        REGISTRY.pop("slow_probe", None)
    assert result.error is None, result.error
    return {"two_tools_s": round(took, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="build the vaults here and keep them")
    ap.add_argument("--compare", type=Path, metavar="DIR",
                    help="also time `agent chat` of the checkout at DIR, on the same vault")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench_turn_"))
    base.mkdir(parents=True, exist_ok=True)
    os.environ["ANTHROPIC_API_KEY"] = "bench"
    results = []
    with FakeAnthropic() as server:
        os.environ["ANTHROPIC_BASE_URL"] = server.url
        server.default_reply = reply("Noted.")
        try:
            for size in sizes:
                root = base / f"vault-{size}"
                if root.exists():
                    shutil.rmtree(root)
                t = time.perf_counter()
                vault = build(root, size, datetime.now().astimezone())
                built = time.perf_counter() - t
                t = time.perf_counter()
                index.refresh(vault)
                indexed = time.perf_counter() - t
                row = {"messages": size, "build_s": round(built, 1), "index_s": round(indexed, 1)}
                row.update(measure_turns(vault, server, args.turns))
                if size == sizes[0]:
                    here = ROOT
                    codes = [here] + ([args.compare.resolve()] if args.compare else [])
                    starts = measure_start(vault, server, args.starts, codes)
                    row.update(starts[here])
                    if args.compare:
                        row["compare"] = {"code": str(codes[1]), **starts[codes[1]]}
                    row.update(measure_remote_start(vault, server, args.starts))
                    row.update(measure_parallel_tools(vault, server))
                results.append(row)
                print(f"{size:>7} messages (vault built in {built:.1f} s, indexed in {indexed:.1f} s, "
                      f"window {row['window_messages']} messages)")
                print(f"        turn overhead: median {row['overhead_median_ms']:.1f} ms, "
                      f"p95 {row['overhead_p95_ms']:.1f} ms  (prompt {row['prompt_median_ms']:.1f}, "
                      f"persist+commit+index {row['persist_median_ms']:.1f}; model calls "
                      f"{row['model_median_ms']:.1f} ms excluded)")
                for r, label in ((row, ""), (row.get("compare"), " (compare)")):
                    if r and "start_to_request_median_ms" in r:
                        print(f"        `agent chat -m` start to request at the server{label}: "
                              f"median {r['start_to_request_median_ms']:.0f} ms, best "
                              f"{r['start_to_request_best_ms']:.0f} ms; REPL prompt after "
                              f"{r['repl_prompt_median_ms']:.0f} ms")
                if "remote_start_to_request_median_ms" in row:
                    print(f"        `agent chat -m` while serve runs (through its socket) start to "
                          f"request: median {row['remote_start_to_request_median_ms']:.0f} ms, "
                          f"best {row['remote_start_to_request_best_ms']:.0f} ms")
                if "two_tools_s" in row:
                    print(f"        two 0.4 s tools in one reply: {row['two_tools_s']:.2f} s "
                          f"(concurrent when under 0.75 s)")
        finally:
            if not args.keep:
                shutil.rmtree(base, ignore_errors=True)
    if len(results) > 1:
        growth = results[-1]["overhead_median_ms"] / results[0]["overhead_median_ms"]
        print(f"overhead growth {results[0]['messages']} -> {results[-1]['messages']}: {growth:.2f}x "
              f"(target <= 1.5x); median target < 50 ms")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
