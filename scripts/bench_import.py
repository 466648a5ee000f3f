"""How `agent import` scales: a synthetic ChatGPT export (conversations.json, each a
thread of alternating user and assistant messages with a regenerated answer on a side
branch), imported into a fresh vault by the real CLI in its own process.

Prints the export's size, the import's wall time and throughput (messages a second),
its peak memory (the child's maximum resident set), and the time of a second import of
the same export (nothing new), with its ratio to the first.

    python scripts/bench_import.py [--conversations 10000] [--messages 50]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORDS = ("the plan for the move needs boxes, a van on a weekday, the deposit back from the "
         "landlord and a call to the sister who helps with the packing")


def conversation(n: int, messages: int) -> dict:
    nodes = {"root": {"id": "root", "parent": None, "children": [], "message": None}}
    parent, t0 = "root", 1_600_000_000 + n * 3600
    for k in range(messages):
        nid = f"c{n}-m{k}"
        role = "user" if k % 2 == 0 else "assistant"
        nodes[parent]["children"].append(nid)
        nodes[nid] = {"id": nid, "parent": parent, "children": [], "message": {
            "id": nid, "author": {"role": role}, "create_time": t0 + k * 30, "weight": 1.0,
            "content": {"content_type": "text", "parts": [f"{k}: {WORDS}"]}, "metadata": {}}}
        if k == 1:                                   # a regenerated answer nobody kept
            alt = f"c{n}-alt"
            nodes[parent]["children"].append(alt)
            nodes[alt] = {"id": alt, "parent": parent, "children": [], "message": {
                "id": alt, "author": {"role": "assistant"}, "create_time": t0 + 31,
                "content": {"content_type": "text", "parts": ["an older answer"]}}}
        parent = nid
    return {"id": f"conv-{n:06d}", "title": f"Conversation {n}", "create_time": t0,
            "update_time": t0 + messages * 30, "current_node": parent,
            "default_model_slug": "gpt-4o", "mapping": nodes}


def write_export(path: Path, conversations: int, messages: int) -> int:
    with open(path, "w", encoding="utf-8") as f:
        f.write("[")
        for n in range(conversations):
            if n:
                f.write(",\n")
            f.write(json.dumps(conversation(n, messages)))
        f.write("]")
    return path.stat().st_size


def timed_import(vault: Path, export: Path, embed: str = "off") -> tuple[float, int, str]:
    """(wall seconds, peak RSS in KB, output) of `agent import` in its own process;
    `embed`: "off" (words only, AGENT_EMBED=off), "on" (the import makes the vectors) or
    "later" (the model installed, vectors left to serve: --no-embed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENT_EMBED": "off" if embed == "off" else "on"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault), "import",
                        *(["--no-embed"] if embed == "later" else []), str(export)],
                       capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(p.stderr)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before), p.stdout.strip().splitlines()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=10_000)
    ap.add_argument("--messages", type=int, default=50, help="visible messages each")
    ap.add_argument("--embed", type=int, default=0, metavar="ROUNDS",
                    help="instead: what making the vectors adds to an import, per 1,000 "
                         "messages (imports with and without it into fresh vaults, "
                         "alternated, ROUNDS times; medians)")
    args = ap.parse_args()
    from agent.vault.repo import Vault
    from agent.ops.vaults import LAYOUT

    if args.embed:
        return embed_cost(args)

    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "conversations.json"
        size = write_export(export, args.conversations, args.messages)
        vault, _ = Vault.init(Path(tmp) / "vault", LAYOUT)
        total = args.conversations * args.messages
        first, peak, said = timed_import(vault.root, export)
        again, _, said_again = timed_import(vault.root, export)
        print(f"export: {args.conversations:,} conversations, {total:,} messages, "
              f"{size / 1e6:,.0f} MB")
        print(f"import:    {first:8.1f} s  {total / first:9,.0f} messages/s  "
              f"peak memory {peak / 1024:,.0f} MB   ({said})")
        print(f"re-import: {again:8.1f} s  {again / first:9.2f}x the first   ({said_again})")
        print("The import includes the search index's refresh after it (words; embeddings "
              "off, as they are made in the background); peak memory is the process's "
              "maximum resident set.")


def embed_cost(args) -> None:
    import statistics

    from agent.vault.repo import Vault

    total = args.conversations * args.messages
    took: dict[str, list[float]] = {"later": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "conversations.json"
        write_export(export, args.conversations, args.messages)
        for r in range(args.embed):
            for how in ("later", "on") if r % 2 == 0 else ("on", "later"):
                vault, _ = Vault.init(Path(tmp) / f"vault-{how}-{r}")
                took[how].append(timed_import(vault.root, export, how)[0])
    later, on = statistics.median(took["later"]), statistics.median(took["on"])
    print(f"{total:,} messages, medians of {args.embed} alternated rounds: import --no-embed "
          f"{later:.1f} s, import (vectors made) {on:.1f} s ({on / later:.2f}x); the vectors "
          f"add {(on - later) / total * 1000:.1f} s per 1,000 messages")


if __name__ == "__main__":
    main()
