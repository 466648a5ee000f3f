"""What the secret filter at the door costs per message (issue 26).

    python scripts/bench_redact.py [--n 2000]

Times, over messages of typical length (a chat line of ~40 words, a paragraph of ~150,
a tool output of ~2,000 characters; one in ten holding a key), the median microseconds
per message of:
- `door`: agent.redact.scrub, detect-secrets' regex plugins compiled once (what runs);
- `scan_line`: detect-secrets' own full per-line scan with its default plugins and
  filters (what the door would cost if it called the library's scanner), line by line.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

WORDS = ("the meeting moved to thursday and I still need to book the train to Kyoto "
         "before prices go up again remind me to call the dentist about the crown "
         "commit 6695e97 fixed the index build on the server so search works").split()
KEYS = ["sk-ant-api03-" + "Ab3_" * 20, "AKIAIOSFODNN7EXAMPLE", "ghp_" + "x1" * 18,
        "postgres://bob:hunter2@db.example.com/app", "123456789:" + "Q" * 35]


def message(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    if rng.random() < 0.1:
        text += " " + rng.choice(KEYS)
    return text


def median_us(fn, msgs) -> float:
    times = []
    for m in msgs:
        t = time.perf_counter()
        fn(m)
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    from agent import redact
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    redact.patterns()                     # compiled once per process, as in the agent
    rng = random.Random(26)
    print(f"{'message':<28}{'door µs':>10}{'scan_line µs':>14}")
    with default_settings():
        for label, words in (("chat line (~40 words)", 40), ("paragraph (~150 words)", 150),
                             ("tool output (~2,000 chars)", 330)):
            msgs = [message(rng, words) for _ in range(args.n)]
            door = median_us(redact.scrub, msgs)
            full = median_us(lambda m: [list(scan_line(line)) for line in m.split(". ")],
                             msgs[: max(1, args.n // 10)])
            print(f"{label:<28}{door:>10.0f}{full:>14.0f}")


if __name__ == "__main__":
    main()
