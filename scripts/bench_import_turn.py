#!/usr/bin/env python3
"""A person's turn through `agent serve` right after a big import, against the same turn
after a small one (issue 46: a turn never waits for background work).

For each size, a vault gets that many messages imported into `cli/default` by `agent
import` (a JSONL transcript, a message an hour), so nearly all of it waits beyond the
window to be archived (and, with the embed extra, to be embedded); the last message is
ten minutes old, the first `n` hours before it, and no window is archived as idle (both
sizes' turns send a full one). Then `agent serve`
starts on every vault at once, against the fake Anthropic server (tests/fakeanthropic.py;
a chat reply at once, an archive summary after `--summary-delay` seconds, as a model
takes a while to summarise 50,000 tokens), and while serve archives and embeds the
import in the background, turns are sent to `cli/default` through serve's local socket
(as `agent chat -m` does), one size after the other, the order reversed every other
round. Prints each turn's wall time (send to reply), the medians, the ratio of each
size's median to the smallest's, and what the background did meanwhile (archive
entries made, vectors still waiting, the imported history left).

    python scripts/bench_import_turn.py [--sizes 1000,100000] [--rounds 7]
        [--summary-delay 2] [--keep DIR] [--no-embed] [--code DIR]

`--keep DIR` imports each size once into DIR and runs serve on a fresh copy every time
(the import of 100,000 messages takes a while); `--code DIR` runs serve from another
checkout (the code before a change), with this script's fake and clients.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from fakeanthropic import FakeAnthropic, json_reply, reply  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
_embed = os.environ.get("AGENT_EMBED")
from bench_turn import Words  # noqa: E402  (chat-like text, a Zipf vocabulary)
# (bench_turn turns meaning-search off for its own runs: not for these)
if _embed is None:
    os.environ.pop("AGENT_EMBED", None)
else:
    os.environ["AGENT_EMBED"] = _embed

SESSION = "cli/default"


def transcript(path: Path, n: int) -> None:
    """`n` messages of `cli/default`, a user and an assistant in turn, one an hour, the
    last of them ten minutes ago."""
    t0 = datetime.now(timezone.utc) - timedelta(minutes=10) - timedelta(hours=n - 1)
    words = Words(11)
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(words.sentence() for _ in range(2))
            f.write(json.dumps({"session": SESSION, "id": f"h{i}",
                                "role": "user" if i % 2 == 0 else "assistant",
                                "content": text, "ts": (t0 + timedelta(hours=i)).isoformat()})
                    + "\n")


def env_for(code: Path, server: FakeAnthropic | None, embed: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "ANTHROPIC_API_KEY": "bench",
           "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@x"}
    if server is not None:
        env["ANTHROPIC_BASE_URL"] = server.url
    if not embed:
        env["AGENT_EMBED"] = "off"
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def build(root: Path, n: int, code: Path, embed: bool) -> float:
    """A vault with `n` messages imported; the import's seconds."""
    env = env_for(code, None, embed)
    agent = [sys.executable, "-m", "agent", "--vault", str(root)]
    subprocess.run(agent + ["init"], env=env, check=True, capture_output=True)
    # A conversation idle for a year before serve archives its window: both sizes' turns
    # send a full window however long after the import the bench runs (--keep).
    with open(root / "agent.toml", "a") as f:
        f.write("\n[serve]\nidle_compact_minutes = 525600\n")
    subprocess.run(["git", "commit", "-qam", "bench: no idle compaction"], cwd=root, env=env,
                   check=True)
    src = root.parent / f"import-{n}.jsonl"
    transcript(src, n)
    t = time.perf_counter()
    p = subprocess.run(agent + ["import", str(src)], env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"agent import failed: {p.stdout}{p.stderr}")
    src.unlink()
    return time.perf_counter() - t


def answer(delay: float):
    def model(body: dict):
        if "output_config" in body:        # an archive summary: the model takes a while
            return json_reply({"topic": "Old talk", "summary": "They talked about the garden.",
                               "importance": 0.3}, delay=delay)
        return reply("ok")
    return model


class Serve:
    """`agent serve` on one vault, its log read as it goes."""

    def __init__(self, root: Path, env: dict):
        self.root = root
        self.log = open(root.parent / f"{root.name}-serve.log", "w+")
        self.p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(root), "serve"],
                                  env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                  cwd=root)
        info = root / ".agent" / "gateway.json"
        deadline = time.monotonic() + 120
        while not info.exists():
            if time.monotonic() > deadline or self.p.poll() is not None:
                raise SystemExit(f"agent serve did not start:\n{self.text()}")
            time.sleep(0.05)
        from agent.serve.remote import Remote
        from agent.vault.repo import Vault
        self.remote = Remote.find(Vault(root))

    def text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def turn(self, text: str) -> float:
        t = time.perf_counter()
        got = self.remote.send(SESSION, text)
        took = time.perf_counter() - t
        if got.get("error") or not got.get("commit"):
            raise SystemExit(f"the turn failed: {got}\n{self.text()[-3000:]}")
        return took

    def archived(self) -> tuple[int, str]:
        """Entries serve archived of the imported history, and what it said was left."""
        lines = re.findall(r"imported history archived as entry \d+, about ([\d,]+) KB left",
                           self.text())
        return len(lines), (lines[-1] + " KB" if lines else "-")

    def stop(self) -> None:
        self.p.terminate()
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def waiting_vectors(root: Path, code: Path) -> str:
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(root), "index", "status"],
                       env=env_for(code, None, True), capture_output=True, text=True)
    m = re.search(r"([\d,]+) waiting", p.stdout + p.stderr)
    return m.group(1) if m else "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--summary-delay", type=float, default=2.0,
                    help="seconds the stand-in model takes to answer a summary request")
    ap.add_argument("--keep", type=Path, help="import each size once here, run on copies")
    ap.add_argument("--no-embed", action="store_true", help="AGENT_EMBED=off (words only)")
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout serve runs from")
    ap.add_argument("--warmup", type=float, default=5.0,
                    help="seconds serve runs before the first turn (its background work starts)")
    args = ap.parse_args()
    # A SIGTERM stops the serves it started too (the `finally` below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [int(s) for s in args.sizes.split(",")]
    embed = not args.no_embed
    code = args.code.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="bench-import-turn-"))
    keep = args.keep or tmp / "built"
    keep.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        built = keep / f"v{n}{'' if embed else '-words'}"
        if not (keep / f"{built.name}.built").exists():
            shutil.rmtree(built, ignore_errors=True)
            took = build(built, n, code, embed)
            (keep / f"{built.name}.built").touch()
            print(f"imported {n:,} messages in {took:.1f} s", flush=True)
    serves: dict[int, Serve] = {}
    times: dict[int, list[float]] = {n: [] for n in sizes}
    with FakeAnthropic() as server:
        server.default_reply = answer(args.summary_delay)
        env = env_for(code, server, embed)
        try:
            for n in sizes:
                root = tmp / f"run-{n}"
                shutil.copytree(keep / f"v{n}{'' if embed else '-words'}", root, symlinks=True)
                serves[n] = Serve(root, env)
            time.sleep(args.warmup)
            words = Words(3)
            for n in sizes:                        # the first turn loads what a turn needs
                serves[n].turn(words.question())
            for r in range(args.rounds):
                order = sizes if r % 2 == 0 else sizes[::-1]
                question = words.question()        # the same question of both sizes
                got = {n: serves[n].turn(question) for n in order}
                for n in sizes:
                    times[n].append(got[n])
                print(f"round {r + 1}: " + ", ".join(f"{n:,}: {got[n] * 1000:.0f} ms"
                                                      for n in sizes), flush=True)
            lo = sizes[0]
            for n in sizes:
                med = statistics.median(times[n])
                made, left = serves[n].archived()
                print(f"{n:>9,} messages: turn median {med * 1000:6.0f} ms "
                      f"(min {min(times[n]) * 1000:.0f}, max {max(times[n]) * 1000:.0f}), "
                      f"{statistics.median(times[n]) / statistics.median(times[lo]):.2f}x "
                      f"of {lo:,}; median of the rounds' ratios "
                      f"{statistics.median(a / b for a, b in zip(times[n], times[lo])):.2f}x; "
                      f"archived meanwhile: {made} entries, {left} left")
        finally:
            for s in serves.values():
                s.stop()
    if embed:
        for n in sizes:
            print(f"{n:>9,} messages: vectors still waiting after the run: "
                  f"{waiting_vectors(tmp / f'run-{n}', code)}")
    print(f"serve logs and vaults: {tmp} (a two-core machine shared with other work: read "
          f"the ratios, not the milliseconds)")


if __name__ == "__main__":
    main()
