"""How a dream scales with the archive: requests, batches, input tokens per entry, the
share of input marked cacheable, and the local time spent outside waiting for batches.

Runs `run_dream` against the fake Anthropic API (tests/fakeanthropic.py, on 127.0.0.1),
whose usage figures simulate the prompt cache (4 characters a token). Each size gets a
fresh vault with a realistic MEMORY.md (~100 lines), archive entries with ~150-token
summaries, and 6 session messages per entry.

    python scripts/bench_dream.py [--sizes 10,100,1000] [--chunk-tokens 60000]
    python scripts/bench_dream.py --sizes 100,3000,10000 --rounds 3 --keep /tmp/bench-dream

With two sizes or more it prints how CPU per entry grows from the smallest to each
larger size (1.0x is flat). `--rounds` runs every size once a round, in turn (the order
reversed every other round, so a machine's load falls on both ends alike), and prints
each round's ratios and their medians. `--keep DIR` builds each size's vault once (most
of a large size's time: a commit-worthy write per entry) and dreams over a copy of it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from fakeanthropic import FakeAnthropic, json_reply  # noqa: E402

from agent.vault.change import Change  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

SUMMARY = ("The user and the agent planned step {i} of the house move: they compared two "
           "removal firms on price and dates, chose the one that can come on a weekday, "
           "listed the rooms to pack first, and agreed the user calls the landlord about the "
           "deposit before the end of the month. The user mentioned that their sister helps.")
MESSAGE = ("Message {k} of conversation {i}: talking through the details of the move, the "
           "boxes, the dates that work, who to call and what to sell before leaving. " * 2)


def memory_md(lines: int = 100) -> str:
    out = ["# Memory", "", "Long-term facts, one per bullet, under headings.", ""]
    section = 0
    while len(out) < lines:
        if len(out) % 20 == 4:
            section += 1
            out += [f"## Topic {section}", ""]
        out.append(f"- Fact {len(out)}: something durable about topic {section} worth keeping")
    return "\n".join(out) + "\n"


def build_vault(path: Path, n: int) -> Vault:
    from dreamkit import write_entries
    vault, _ = Vault.init(path, LAYOUT)
    vault.write_text("MEMORY.md", memory_md())
    vault.commit(Change("bench", "memory"))
    specs = [{"summary": SUMMARY.format(i=i + 1), "message": MESSAGE.format(k=0, i=i + 1)}
             for i in range(n)]
    write_entries(vault, specs, start=1, messages_per_entry=6)
    return vault


def fake_model(params: dict):
    """Analyst: one finding per entry of the chunk. Editor: one add per finding."""
    tail = params["messages"][0]["content"][-1]["text"]
    if "Phase 1, analyst" in tail:
        first, last = map(int, re.search(r"\(ids (\d+) to (\d+)\)", tail).groups())
        return json_reply({"findings": [
            {"kind": "new", "file": "MEMORY.md", "statement": f"Move step {i} is planned",
             "evidence": [f"archive:{i}"], "date": "2026-11-20"} for i in range(first, last + 1)]})
    data = tail.split("<findings>\n")[1].split("\n</findings>")[0].splitlines()
    return json_reply({"ops": [
        {"op": "add", "file": "MEMORY.md", "section": "Move", "old": "",
         "new": f"- {json.loads(line)['statement']}", "reason": "archive"} for line in data]})


def kept_vault(keep: Path, n: int, chunk_tokens: int | None) -> Path:
    """The vault of `n` entries under `keep`, built the first time it is asked for."""
    root = keep / f"v{n}-{chunk_tokens or 'default'}"
    done = keep / f"v{n}-{chunk_tokens or 'default'}.built"
    if not done.exists():
        shutil.rmtree(root, ignore_errors=True)
        vault = build_vault(root, n)
        if chunk_tokens:
            with open(vault.root / "agent.toml", "a") as f:
                f.write(f"chunk_tokens = {chunk_tokens}\n")   # under the template's [dream]
            vault.git("commit", "-qam", "bench: chunk size")
        done.touch()
    return root


def bench(n: int, chunk_tokens: int | None, keep: Path | None = None) -> dict:
    from agent.dream import run_dream
    from agent.llm import make_provider
    from agent.clock import now

    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic() as server:
        if keep is not None:
            shutil.copytree(kept_vault(keep, n, chunk_tokens), Path(tmp) / "vault", symlinks=True)
            vault = Vault(Path(tmp) / "vault")
        else:
            vault = build_vault(Path(tmp) / "vault", n)
            if chunk_tokens:
                with open(vault.root / "agent.toml", "a") as f:
                    f.write(f"chunk_tokens = {chunk_tokens}\n")   # under the template's [dream]
                vault.git("commit", "-qam", "bench: chunk size")
        server.default_reply = fake_model
        server.batch_polls = 1
        os.environ["ANTHROPIC_BASE_URL"] = server.url
        os.environ["ANTHROPIC_API_KEY"] = "bench"
        provider = make_provider(eager=True)   # the SDK loaded before the clock starts, as before
        t0, c0 = time.perf_counter(), time.thread_time()
        runs = []                  # as `agent dream` does: run after run until none wait
        while (out := run_dream(vault, provider, now(), poll_interval=0.01)).kind != "nothing":
            assert out.kind == "committed", out.message
            runs.append(out)
        total, cpu = time.perf_counter() - t0, time.thread_time() - c0
        creates = server.calls("/v1/messages/batches")
        model_requests = sum(len(r.body["requests"]) for r in creates)
        u = {k: sum(p[k] for o in runs for p in o.usage.values()) for k in runs[0].usage["analyst"]}
        waited = sum(o.waited for o in runs)
        inp = u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]
        editor = creates[-1].body["requests"][0]["params"]
        return {
            "entries": n, "runs": len(runs), "http_requests": len(server.requests), "batches": len(creates),
            "model_requests": model_requests,
            "input_tokens": inp, "input_per_entry": inp / n,
            "cacheable_share": (u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]) / inp,
            "cache_read_share": u["cache_read_input_tokens"] / inp,
            "editor_input_tokens": len(json.dumps(editor)) // 4,
            "local_s": total - waited, "waited_s": waited, "cpu_s": cpu,
            "cost": sum(o.cost or 0 for o in runs), "added": sum(o.report.added for o in runs),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--chunk-tokens", type=int, default=None,
                    help="[dream] chunk_tokens (default: the setting's default, 60000)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every size this many times, in turn, and print medians")
    ap.add_argument("--keep", type=Path, default=None,
                    help="build each size's vault once under this folder and dream over copies")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            kept_vault(args.keep, n, args.chunk_tokens)
    rounds: list[dict[int, dict]] = []
    for k in range(args.rounds):
        order = sizes if k % 2 == 0 else sizes[::-1]
        rounds.append({n: bench(n, args.chunk_tokens, args.keep) for n in order})
        if args.rounds > 1 and len(sizes) > 1:
            got = rounds[-1]
            print(f"round {k + 1}: CPU per entry against {sizes[0]:,}: " + ", ".join(
                f"{n:,} {ratio(got[n], got[sizes[0]]):.2f}x" for n in sizes[1:]), flush=True)
    rows = [rounds[-1][n] for n in sizes]
    print(f"{'entries':>7} {'HTTP req':>8} {'batches':>7} {'model req':>9} {'input tok':>10} "
          f"{'tok/entry':>9} {'cacheable':>9} {'cache read':>10} {'editor tok':>10} "
          f"{'local s':>8} {'CPU s':>6} {'CPU ms/entry':>12} {'est. $':>7}")
    for r in rows:
        print(f"{r['entries']:>7} {r['http_requests']:>8} {r['batches']:>7} {r['model_requests']:>9} "
              f"{r['input_tokens']:>10} {r['input_per_entry']:>9.0f} {r['cacheable_share']:>9.1%} "
              f"{r['cache_read_share']:>10.1%} {r['editor_input_tokens']:>10} {r['local_s']:>8.2f} "
              f"{r['cpu_s']:>6.2f} {1000 * r['cpu_s'] / r['entries']:>12.2f} {r['cost']:>7.3f}")
    if len(sizes) > 1:
        lo = sizes[0]
        for n in sizes[1:]:
            cpu = statistics.median(ratio(r[n], r[lo]) for r in rounds)
            wall = statistics.median(ratio(r[n], r[lo], "local_s") for r in rounds)
            ms = statistics.median(1000 * r[n]["cpu_s"] / n for r in rounds)
            print(f"per entry, {n:,} entries against {lo:,}: CPU {cpu:.2f}x ({ms:.2f} ms), "
                  f"local time {wall:.2f}x (flat is 1.0x"
                  + (f"; medians of {len(rounds)} rounds" if len(rounds) > 1 else "") + ")")
    print("tokens: the fake API's estimate (4 characters a token); local s: run_dream's wall "
          "time minus the time it slept between polls (round trips to the in-process fake "
          "included); CPU s: the dreaming thread's own CPU time (the fake's threads excluded); "
          "est. $: batch prices for the default model's family, an estimate.")


def ratio(hi: dict, lo: dict, key: str = "cpu_s") -> float:
    """`hi`'s figure per entry over `lo`'s."""
    return (hi[key] / hi["entries"]) / (lo[key] / lo["entries"])


if __name__ == "__main__":
    main()
