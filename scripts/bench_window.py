#!/usr/bin/env python3
"""What reading a conversation's window costs as its history grows (issue 28).

Builds one session of N messages (written directly in the vault's format: month files of
JSONL, about 120 messages a day), compacted the way `agent import` leaves it (a marker
whose `start` records where the window begins), then times, median of --runs:

- `read_window` (target: under 10 ms at 1,000,000 messages, about flat with size);
- the same window found through an old marker without `start` (read back by ids);
- `Session.last_line()` after a marker listing 100,000 ids (serve's idle detection).

    python scripts/bench_window.py [--sizes 1000,100000,1000000] [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT))

from agent.stores import sessions  # noqa: E402

from agent.stores import window

KEY = "import/life"
WINDOW = 300          # messages the window keeps


def build(root: Path, n: int, with_start: bool) -> None:
    """n messages over months; a marker after them; the last WINDOW messages kept."""
    t0 = datetime(2016, 1, 1, tzinfo=timezone.utc)
    files: dict[str, list[bytes]] = {}
    where: list[tuple[str, int]] = []
    sizes: dict[str, int] = {}
    for i in range(n):
        ts = t0 + timedelta(minutes=12 * i)
        rel = sessions.month_file(KEY, ts)
        line = (sessions.dumps({"id": f"m{i}", "ts": ts.isoformat(), "role": "user" if i % 2 == 0
                                else "assistant", "content": f"message {i} about the garden "
                                "and the long trip we planned together", "turn": i // 2 + 1})
                + "\n").encode()
        where.append((rel, sizes.get(rel, 0)))
        sizes[rel] = sizes.get(rel, 0) + len(line)
        files.setdefault(rel, []).append(line)
    keep = n - WINDOW if n > WINDOW else 0
    marker = {"type": "compact", "through": f"m{keep - 1}"} if keep else None
    if marker and with_start:
        marker["start"] = {"file": where[keep][0], "offset": where[keep][1], "id": f"m{keep}"}
    last = sorted(files)[-1]
    if marker:
        files[last].append((sessions.dumps(marker) + "\n").encode())
    for rel, lines in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(lines))


def timed(fn, runs: int) -> float:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as d:
            new, old = Path(d) / "new", Path(d) / "old"
            t = time.perf_counter()
            build(new, n, True)
            build(old, n, False)
            made = time.perf_counter() - t
            w = window.read_window(new, KEY)
            assert len(w.messages) == min(n, WINDOW), len(w.messages)
            assert window.read_window(old, KEY).messages == w.messages
            fast = timed(lambda: window.read_window(new, KEY), args.runs)
            slow = timed(lambda: window.read_window(old, KEY), args.runs)
            # A marker listing 100,000 ids ends the newest file: the last message is before it.
            rel = sorted(p for p in (new / sessions.session_dir(KEY)).glob("*.jsonl"))[-1]
            with open(rel, "a") as f:
                f.write(sessions.dumps({"type": "compact", "archive": 1, "through": "x",
                                        "ids": [f"m{i}" for i in range(100000)]}) + "\n")
            last = timed(lambda: sessions.Session(new, KEY).last_line(), args.runs)
            assert sessions.Session(new, KEY).last_line()["id"] == f"m{n - 1}"
            rows.append((n, made, fast, slow, last))
            print(f"{n:>9,} messages (built in {made:.1f}s): read_window {fast:.2f} ms "
                  f"(marker with start), {slow:.2f} ms (old marker, read back); "
                  f"last_line past a 100,000-id marker {last:.2f} ms", flush=True)
    if len(rows) > 1:
        print(f"read_window {rows[-1][0]:,} / {rows[0][0]:,} messages: "
              f"{rows[-1][2] / rows[0][2]:.2f}x")


if __name__ == "__main__":
    main()
