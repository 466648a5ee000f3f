"""Peak memory of `agent import` against what a hostile or merely huge export holds:
nesting depth (a title of N nested empty arrays, zipped: a few hundred bytes) and the
largest message (one conversation with one message of M megabytes).

Each import runs the real CLI in its own process, on a fresh vault, under an address
space cap (--cap-gb) so a runaway is stopped rather than the machine; the figure is
that child's maximum resident set (os.wait4), its exit code and the first line it said.

    python scripts/bench_import_bounds.py [--depths 1000,10000,20000] [--messages-mb 1,16,64]
        [--within-mb 60] [--values 990000]

(the last two: the worst an export within the bounds can hold, one conversation of
sixty 1 MB messages and one of nearly a million values).

The machine may be shared: resident sets are what this process measured, not a
benchmark of speed (no time is taken).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
T0 = 1_700_000_000


def conversation(title, text: str = "hello") -> str:
    """One ChatGPT conversation as JSON text, its title given as JSON text."""
    msg = {"id": "m1", "author": {"role": "user"}, "create_time": T0,
           "content": {"content_type": "text", "parts": ["PLACEHOLDER"]}}
    conv = {"id": "c1", "title": "TITLE", "create_time": T0, "current_node": "m1",
            "mapping": {"m1": {"id": "m1", "parent": None, "children": [], "message": msg}}}
    return (json.dumps(conv).replace('"TITLE"', title)
            .replace('"PLACEHOLDER"', json.dumps(text)))


def nested_zip(path: Path, depth: int) -> Path:
    body = "[" + conversation("[" * depth + "]" * depth) + "]"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("conversations.json", body)
    return path


def big_message(path: Path, mb: int) -> Path:
    words = "the quick brown fox jumps over the lazy dog and keeps running " * 16
    buf = io.StringIO()
    while buf.tell() < mb * 1024 * 1024:
        buf.write(words)
    path.write_text("[" + conversation('"Huge"', buf.getvalue()) + "]")
    return path


def many_messages(path: Path, mb: int) -> Path:
    """One conversation of `mb` messages of 1 MB each (the most an import keeps of one),
    just under the 64 MB bound of a conversation when mb is 60."""
    words = "the quick brown fox jumps over the lazy dog and keeps running " * 16
    text = (words * (1024 * 1024 // len(words) + 1))[:1024 * 1024 - 100]
    nodes, parent = {}, None
    for k in range(mb):
        nid = f"m{k}"
        nodes[nid] = {"id": nid, "parent": parent, "children": [], "message": {
            "id": nid, "author": {"role": "user" if k % 2 == 0 else "assistant"},
            "create_time": T0 + k, "content": {"content_type": "text", "parts": [text]}}}
        if parent:
            nodes[parent]["children"].append(nid)
        parent = nid
    path.write_text(json.dumps([{"id": "c1", "title": "Many", "create_time": T0,
                                 "current_node": parent, "mapping": nodes}]))
    return path


def many_values(path: Path, values: int) -> Path:
    """One conversation holding `values` small values (zeros), under the bound of
    1,000,000 when values is 990,000: the most Python objects one may make."""
    extra = ', "x": [' + ",".join(["0.5"] * values) + "]"
    path.write_text("[" + conversation('"Values"')[:-1] + extra + "}]")   # after the mapping
    return path


def run(vault: Path, export: Path, cap_gb: float) -> tuple[int, int, str]:
    """(peak resident KB, exit code, first line said) of one import in its own process."""
    cap = int(cap_gb * 1024 ** 3)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENT_EMBED": "off"}
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault), "import",
                              str(export)], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env, preexec_fn=limit)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        lines = out.read().decode("utf-8", "replace").strip().splitlines()
    said = lines[-1] if lines else ""
    return usage.ru_maxrss, p.returncode, said[:150]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", default="1000,10000,20000")
    ap.add_argument("--messages-mb", default="1,16,64")
    ap.add_argument("--within-mb", type=int, default=0,
                    help="also one conversation of this many 1 MB messages (60: at the bound)")
    ap.add_argument("--values", type=int, default=0,
                    help="also one conversation of this many values (990000: at the bound)")
    ap.add_argument("--cap-gb", type=float, default=6.0,
                    help="address space cap of each import (a runaway stops there)")
    args = ap.parse_args()
    from agent.ops.vaults import init_vault

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        vault, _ = init_vault(base / "empty")
        rows = []
        for depth in [int(x) for x in args.depths.split(",") if x]:
            export = nested_zip(base / f"nested-{depth}.zip", depth)
            rows.append((f"nesting {depth:,}", export.stat().st_size, *run(
                vault.root, export, args.cap_gb)))
        for mb in [int(x) for x in args.messages_mb.split(",") if x]:
            export = big_message(base / f"message-{mb}.json", mb)
            fresh, _ = init_vault(base / f"v{mb}")
            rows.append((f"one message of {mb} MB", export.stat().st_size, *run(
                fresh.root, export, args.cap_gb)))
            export.unlink()
        if args.within_mb:
            export = many_messages(base / "many.json", args.within_mb)
            fresh, _ = init_vault(base / "vmany")
            rows.append((f"{args.within_mb} messages of 1 MB", export.stat().st_size, *run(
                fresh.root, export, args.cap_gb)))
            export.unlink()
        if args.values:
            export = many_values(base / "values.json", args.values)
            fresh, _ = init_vault(base / "vvalues")
            rows.append((f"{args.values:,} values", export.stat().st_size, *run(
                fresh.root, export, args.cap_gb)))
            export.unlink()
        print(f"{'export':<24}{'file bytes':>14}{'peak RSS MB':>13}{'exit':>6}  said")
        for what, size, peak, code, said in rows:
            print(f"{what:<24}{size:>14,}{peak / 1024:>13,.0f}{code:>6}  {said}")
        print(f"(each import capped at {args.cap_gb} GB of address space; exit 1 with "
              f"MemoryError or a kill means it hit the cap)")


if __name__ == "__main__":
    main()
