#!/usr/bin/env python3
"""How fast `agent search` is as the vault grows.

Builds synthetic vaults of about 10,000, 100,000 and 1,000,000 messages (session files
written in bulk, with a Zipf-distributed vocabulary plus English stop words, some
MEMORY.md facts and daily notes, then one commit), and prints for each:

- the time to build the index from scratch and its size on disk;
- median and 95th percentile time of `agent.search.index.search` in this process (the
  refresh it starts with included; a long-lived process such as `agent serve` or a chat),
  and its CPU time for queries of one rare word, one common word, a question of several
  words, and a long pasted paragraph (what proactive retrieval sends each turn);
- in the 100,000-message vault (or the middle size given), the time for a search to
  pick up one hand-edited file (an uncommitted edit, then the same edit committed).

- a chat turn's upkeep: two messages appended and committed, then the refresh a turn
  runs after its commit (with the model on, their vectors stay queued: the next search
  makes them, and that catch-up is printed too), and the process's peak memory.

Targets at 100,000 messages: word search p95 under 50 ms, hybrid p95 under 60 ms, a
turn's upkeep under 30 ms. Run each size in its own process for a peak memory that is
that size's alone (it only grows within a process).

With --processes N, also `agent search` run as a whole process N times for rare and
multi-word queries (what a user at the command line waits for: interpreter, imports,
the model loaded, the index opened), words and, with --dense, hybrid.

With --dense (the embed extra installed), for each size also: hybrid query median/p95
(query embedding and numpy search included), the index size with vectors, the cost of
one chat turn's refresh (two messages appended, embedded and indexed), the process's
peak memory, and the model's throughput on a sample of the vault's messages, from which
the full embedding time is reckoned. The vectors of the bulk are random unit vectors
written straight into the index (the same storage and search path; running the model
over 100,000 messages takes about half an hour on two idle cores, 1,000,000 five hours),
so their figures are for cost, not quality (that is scripts/eval_retrieval.py).

    python scripts/bench_search.py [--sizes 10000,100000,1000000] [--queries 40]
                                   [--keep DIR] [--dense]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from itertools import accumulate
from pathlib import Path

sys.path.insert(0, str(Path(__file__).absolute().parent.parent))

from agent.vault.change import Change  # noqa: E402
from agent.search import index  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

VOCAB = 60000
PER_FILE = 1000          # messages per monthly session file
STOP = ("the a to and of i it you that in is was for on with my me have but so this be "
        "just what we at your are do not all like can if they about").split()


def word(i: int) -> str:
    """A pronounceable pseudo-word for vocabulary rank i (rank 0 most common)."""
    cons, vows = "bcdfghjklmnprstvz", "aeiou"
    out = []
    i += 1
    while i:
        i, r = divmod(i, len(cons) * len(vows))
        out.append(cons[r % len(cons)] + vows[r // len(cons)])
    return "".join(out) + "n"


class Words:
    def __init__(self, seed: int):
        self.rnd = random.Random(seed)
        # Offset Zipf: the most common content word is in about 8% of messages, as in chat
        # text once stop words are set aside.
        self.cum = list(accumulate(1.0 / (r + 20) ** 1.05 for r in range(VOCAB)))
        self.total = self.cum[-1]

    def sentence(self) -> str:
        n = self.rnd.randint(4, 40)
        out = []
        for _ in range(n):
            if self.rnd.random() < 0.4:
                out.append(self.rnd.choice(STOP))
            else:
                out.append(word(bisect.bisect(self.cum, self.rnd.random() * self.total)))
        return " ".join(out).capitalize() + "."


def build(root: Path, messages: int, seed: int = 7) -> Vault:
    vault, _ = Vault.init(root, LAYOUT)
    w = Words(seed)
    files = max(1, messages // PER_FILE)
    chats = max(1, files // 60)
    start = datetime(2021, 1, 1, 9, 0, tzinfo=timezone.utc)
    made = 0
    for f in range(files):
        chat, month = f % chats, f // chats
        month_start = datetime(start.year + (start.month - 1 + month) // 12,
                               (start.month - 1 + month) % 12 + 1, 1, 9, tzinfo=timezone.utc)
        rel = f"sessions/bench/chat{chat}/{month_start:%Y-%m}.jsonl"
        n = PER_FILE if f < files - 1 else messages - made
        lines = []
        for i in range(n):
            ts = month_start + timedelta(minutes=int(i * 40000 / max(n, 1)))
            lines.append(json.dumps({"id": f"m{made + i}", "ts": ts.isoformat(),
                                     "role": "user" if i % 2 == 0 else "assistant",
                                     "content": w.sentence(), "turn": i // 2 + 1},
                                    separators=(",", ":")))
        made += n
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    facts = "\n".join(f"- {w.sentence()}" for _ in range(150))
    (root / "MEMORY.md").write_text(f"# Memory\n\n## Facts\n{facts}\n", encoding="utf-8")
    for d in range(100):
        day = start.date() + timedelta(days=d * 7)
        notes = "\n".join(f"- {9 + k}:00 {w.sentence()}" for k in range(5))
        p = root / f"memory/{day:%Y-%m-%d}.md"
        p.parent.mkdir(exist_ok=True)
        p.write_text(f"# {day:%Y-%m-%d}\n\n{notes}\n", encoding="utf-8")
    vault.git("add", "-A")
    vault.git("commit", "-q", "-m", f"bench: {messages} messages",
              env={"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
                   "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"})
    return vault


def queries(kind: str, n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    if kind == "rare":          # ranks 5,000-40,000: a handful of messages each
        return [word(rnd.randint(5000, 40000)) for _ in range(n)]
    if kind == "common":        # ranks 0-40: each in 3-8% of all messages
        return [word(rnd.randint(0, 40)) for _ in range(n)]
    if kind == "long":          # four sentences of text: 32 query words after stop words
        w = Words(seed)
        return [" ".join(w.sentence() for _ in range(4)) for _ in range(n)]
    # a question: stop words and 3-6 words of mixed frequency
    return [f"what did we say about {' and '.join(word(rnd.choice([rnd.randint(0, 200), rnd.randint(200, 20000)])) for _ in range(rnd.randint(3, 6)))}?"
            for _ in range(n)]


KINDS = ("rare", "common", "multi", "long")


def timed(vault, qs, mode: str = "auto") -> tuple[float, float, float, float]:
    """In-process: (median ms, p95 ms, share of queries with hits, median CPU ms of the
    process, all threads) of `index.search` over `qs`."""
    times, cpu, found = [], [], 0
    for q in qs:
        c0 = time.process_time()
        t0 = time.perf_counter()
        hits = index.search(vault, q, limit=10, mode=mode)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        found += bool(hits)
    times.sort()
    return (statistics.median(times) * 1000, times[int(0.95 * (len(times) - 1))] * 1000,
            found / len(qs), statistics.median(cpu) * 1000)


def size_of(vault) -> int:
    """The index on disk: the SQLite file, its WAL, and the matrix file of the vectors."""
    p = index.db_path(vault)
    return sum(os.path.getsize(f"{p}{s}") for s in ("", "-wal", "-vectors") if os.path.exists(f"{p}{s}"))


def processes(vault, mode: str, qs: list[str]) -> dict:
    """What a user gets from the command line: `agent search` as a whole process per
    query (interpreter start, imports, the model loaded, the index opened and mapped),
    wall time and the process's CPU time (all its threads), median and p95. Bytecode is
    written and reused, as a user's Python does."""
    import subprocess
    env = {**os.environ, "AGENT_EMBED": "off" if mode == "words" else "on"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    root = str(Path(__file__).absolute().parent.parent)      # the code beside this script
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") else root
    cmd = [sys.executable, "-m", "agent", "--vault", str(vault.root), "search", "--mode", mode]
    subprocess.run(cmd + ["warm up"], env=env, capture_output=True, check=True)
    wall, cpu = [], []
    for q in qs:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd + [q], env=env, capture_output=True, check=True)
        wall.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    wall.sort()
    cpu.sort()
    p95 = lambda t: t[int(0.95 * (len(t) - 1))] * 1000
    return {"median_ms": round(statistics.median(wall) * 1000, 1), "p95_ms": round(p95(wall), 1),
            "cpu_median_ms": round(statistics.median(cpu) * 1000, 1)}


def pickup(vault) -> dict:
    """Time for a search to see one hand-edited file, uncommitted then committed."""
    out = {}
    index.search(vault, "warmup", limit=1)
    mem = vault.root / "MEMORY.md"
    with open(mem, "a", encoding="utf-8") as f:
        f.write("- the zyxwvutsqr hand edit\n")
    t0 = time.perf_counter()
    hits = index.search(vault, "zyxwvutsqr", limit=5)
    out["edit_uncommitted_ms"] = (time.perf_counter() - t0) * 1000
    assert hits and hits[0].path == "MEMORY.md", hits
    vault.git("commit", "-q", "-am", "edit: MEMORY.md by hand",
              env={"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
                   "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"})
    session = sorted((vault.root / "sessions").rglob("*.jsonl"))[-1]
    with open(session, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "hand-1", "ts": "2030-01-01T00:00:00+00:00", "role": "user",
                            "content": "a line appended by hand qwertyzxcv", "turn": 99999}) + "\n")
    t0 = time.perf_counter()
    hits = index.search(vault, "qwertyzxcv", limit=5)
    out["session_append_ms"] = (time.perf_counter() - t0) * 1000
    assert hits and hits[0].message_ids == ["hand-1"], hits
    t0 = time.perf_counter()
    index.search(vault, "zyxwvutsqr", limit=5)
    out["search_after_commit_ms"] = (time.perf_counter() - t0) * 1000
    return out


def dense_part(vault, n: int, nq: int, procs: int = 0) -> dict:
    """Hybrid figures at this size (see the module's docstring)."""
    import numpy as np
    from agent.search import embed, vectors

    os.environ["AGENT_EMBED"] = "on"
    emb = embed.load()
    db = index._connect(index.db_path(vault))
    try:
        vectors.ensure(db, emb.name)
        ids = [r[0] for r in db.execute("SELECT id FROM docs ORDER BY id")]
        sample = [r[0] for r in db.execute("SELECT text FROM docs ORDER BY random() LIMIT 128")]
        t0 = time.perf_counter()
        emb.passages(sample)
        per_doc = (time.perf_counter() - t0) / max(1, len(sample))
        rng = np.random.default_rng(n)
        t0 = time.perf_counter()
        db.execute("BEGIN")
        for i in range(0, len(ids), 20000):
            chunk = ids[i:i + 20000]
            m = rng.standard_normal((len(chunk), emb.dim)).astype(np.float32)
            m /= np.linalg.norm(m, axis=1, keepdims=True)
            db.executemany("INSERT OR REPLACE INTO vec(id, h, v) VALUES (?, ?, ?)",
                           ((d, d, m[j].astype(np.float16).tobytes()) for j, d in enumerate(chunk)))
        db.execute("DELETE FROM vec_pending")
        db.execute("COMMIT")
        stored = time.perf_counter() - t0
    finally:
        db.close()
    out = {"model_ms_per_doc": round(per_doc * 1000, 1),
           "embed_all_min": round(per_doc * len(ids) / 60, 1),
           "store_vectors_s": round(stored, 1)}
    t0 = time.perf_counter()
    index.search(vault, "warm up the matrix", limit=10)
    out["first_search_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    out["index_mb"] = round(size_of(vault) / 1e6, 1)     # with what the first search wrote
    for kind in KINDS:
        med, p95, _, cpu = timed(vault, queries(kind, nq, seed=n + 1), mode="hybrid")
        out[kind] = {"median_ms": round(med, 1), "p95_ms": round(p95, 1), "cpu_median_ms": round(cpu, 1)}
    if procs:
        out["process"] = {kind: processes(vault, "hybrid", queries(kind, procs, seed=n + 2))
                          for kind in ("rare", "multi")}
    out["turn_refresh_ms"], out["next_search_catch_up_ms"] = turn_refresh(vault, f"hybrid-{n}")
    out["peak_rss_mb"] = peak_rss_mb()
    os.environ["AGENT_EMBED"] = "off"
    return out


def turn_refresh(vault, tag: str, turns: int = 5) -> tuple[float, float]:
    """Median cost of one chat turn's index upkeep: two messages appended to the newest
    session file and committed, then the refresh a turn runs after its commit (words;
    vectors stay queued), then what the next search adds to make the two queued
    vectors (0 on words alone)."""
    session = sorted((vault.root / "sessions").rglob("*.jsonl"))[-1]
    rel = session.relative_to(vault.root).as_posix()
    times, catch_up = [], []
    for t in range(turns):
        # As a turn does: its lines appended and committed through the vault (which
        # tells the index what it committed), then the refresh.
        with vault.locked():
            vault.append_lines(rel, [json.dumps(
                {"id": f"turn-{tag}-{t}-{role}", "ts": "2030-01-01T00:00:00+00:00", "role": role,
                 "content": Words(t).sentence(), "turn": 90000 + t}) for role in ("user", "assistant")])
            vault.commit(Change("chat", f"turn {t}", scope="bench"))
        t0 = time.perf_counter()
        index.refresh(vault, after_commit=True)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        index.vectors_now(vault)    # what the next search starts with
        catch_up.append(time.perf_counter() - t0)
    return (round(statistics.median(times) * 1000, 1), round(statistics.median(catch_up) * 1000, 1))


def peak_rss_mb() -> float:
    """The process's peak resident memory so far (it only grows: words first, then hybrid)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=40, help="queries per kind (default 40)")
    ap.add_argument("--keep", type=Path, help="build the vaults under DIR and keep them")
    ap.add_argument("--dense", action="store_true", help="also measure hybrid search (embed extra)")
    ap.add_argument("--processes", type=int, default=0, metavar="N",
                    help="also time N `agent search` processes per kind (rare, multi), as a user runs it")
    args = ap.parse_args(argv)
    os.environ["AGENT_EMBED"] = "off"        # words; dense_part turns the model on
    sizes = [int(s) for s in args.sizes.split(",")]
    pick_size = sorted(sizes)[len(sizes) // 2] if len(sizes) > 1 else sizes[0]
    pick_size = 100000 if 100000 in sizes else pick_size
    base = args.keep or Path(tempfile.mkdtemp(prefix="agent-bench-search-"))
    base.mkdir(parents=True, exist_ok=True)
    results = []
    print(f"{args.queries} queries per kind; vaults under {base}")
    print(f"{'messages':>9} {'vault s':>8} {'index s':>8} {'index MB':>9}   "
          + " ".join(f"{k + ' med/p95 ms':>17}" for k in KINDS))
    for n in sizes:
        root = base / f"v{n}"
        if (root / "agent.toml").exists():
            vault = Vault.open(root)
            made = 0.0
        else:
            t0 = time.perf_counter()
            vault = build(root, n)
            made = time.perf_counter() - t0
        t0 = time.perf_counter()
        index.rebuild(vault)
        built = time.perf_counter() - t0
        row = {"messages": n, "vault_s": round(made, 1), "index_s": round(built, 2),
               "index_mb": round(size_of(vault) / 1e6, 1)}
        for kind in KINDS:
            med, p95, found, cpu = timed(vault, queries(kind, args.queries, seed=n))
            row[kind] = {"median_ms": round(med, 1), "p95_ms": round(p95, 1), "found": found,
                         "cpu_median_ms": round(cpu, 1)}
        print(f"{n:>9} {made:>8.1f} {built:>8.1f} {row['index_mb']:>9.1f}   "
              + " ".join(f"{row[k]['median_ms']:>8.1f}/{row[k]['p95_ms']:<8.1f}" for k in KINDS),
              flush=True)
        row["turn_refresh_ms"], _ = turn_refresh(vault, f"words-{n}")
        row["peak_rss_mb"] = peak_rss_mb()
        print(f"{'':>9} words at {n}: a turn's refresh {row['turn_refresh_ms']} ms; "
              f"peak RSS {row['peak_rss_mb']:.0f} MB; CPU per query (median) "
              + " ".join(f"{k} {row[k]['cpu_median_ms']}" for k in KINDS) + " ms", flush=True)
        if args.processes:
            row["process"] = {kind: processes(vault, "words", queries(kind, args.processes, seed=n + 2))
                              for kind in ("rare", "multi")}
            print(f"{'':>9} words at {n}, `agent search` as a whole process: "
                  + "; ".join(f"{k} {v['median_ms']}/{v['p95_ms']} ms (CPU {v['cpu_median_ms']} ms)"
                              for k, v in row["process"].items()), flush=True)
        if n == pick_size:
            row["pickup"] = {k: round(v, 1) for k, v in pickup(vault).items()}
            p = row["pickup"]
            print(f"{'':>9} picking up one hand edit at {n} messages: uncommitted MEMORY.md "
                  f"{p['edit_uncommitted_ms']:.1f} ms, appended session line "
                  f"{p['session_append_ms']:.1f} ms, after it is committed "
                  f"{p['search_after_commit_ms']:.1f} ms (each a whole search)", flush=True)
        if args.dense:
            row["hybrid"] = d = dense_part(vault, n, args.queries, args.processes)
            print(f"{'':>9} hybrid at {n} (in-process): index {d['index_mb']} MB with vectors, "
                  + " ".join(f"{k} {d[k]['median_ms']}/{d[k]['p95_ms']} ms" for k in KINDS)
                  + "; CPU per query (median, all threads) "
                  + " ".join(f"{k} {d[k]['cpu_median_ms']}" for k in KINDS)
                  + f" ms; first search {d['first_search_ms']} ms"
                  + f"; a turn's refresh {d['turn_refresh_ms']} ms, its vectors at the next search "
                  f"{d['next_search_catch_up_ms']} ms; model {d['model_ms_per_doc']} "
                  f"ms/message (all: {d['embed_all_min']} min); peak RSS {d['peak_rss_mb']:.0f} MB",
                  flush=True)
            if "process" in d:
                print(f"{'':>9} hybrid at {n}, `agent search` as a whole process: "
                      + "; ".join(f"{k} {v['median_ms']}/{v['p95_ms']} ms (CPU {v['cpu_median_ms']} ms)"
                                  for k, v in d["process"].items()), flush=True)
        results.append(row)
    print(json.dumps({"sizes": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
