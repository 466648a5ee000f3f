#!/usr/bin/env python3
"""Retrieval quality of `agent search` on LoCoMo-format conversations.

For each conversation: a fresh vault in a temporary folder, filled by `agent import`
(the command itself, in this process: message ids = dia_id, times from
session_N_date_time, speakers kept, and the vectors it makes), then every question of
categories 1-4 asked through `agent.search.index.search`, or with --cli through `agent
search --json -n K` in a process of its own, as a person runs it. Nothing else runs
between the two (no `agent index embed`, no serve): what is measured is what a person
gets the day they import. Prints any@k, all@k, rec@k per category and overall and the
query times; the last line is one JSON object with the overall figures.

    python scripts/eval_retrieval.py ../shared/bench/locomo-dev.json
    python scripts/eval_retrieval.py DATA.json --conversations 3-4 --ablation
    python scripts/eval_retrieval.py DATA.json --conversations 3-4 --cli --k 10

Scoring: a question's hits are flattened to message ids in rank order (a hit covering
several messages spends several places) and cut at k. Evidence ids are split on `;` and
spaces, and ids that name no message of the conversation are dropped (the data has a
few malformed ones); a question left with no evidence is skipped and counted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).absolute().parent.parent))

from agent.search import fusion as fusion_mod, index  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}

# What the ablation takes away from (or adds to) the default ranking, one at a time.
ABLATIONS = {
    "default": {},
    "bm25 only": {"speaker": 0.0, "neighbours": 0.0, "dates": 0.0, "day": 0.0,
                  "recency": 0.0, "importance": 0.0},
    "- stop words": {"stop_words": False},
    "- speaker": {"speaker": 0.0},
    "- neighbours": {"neighbours": 0.0},
    "neighbours 1 away": {"reach": 1},
    "- dates": {"dates": 0.0},
    "- importance": {"importance": 0.0},
    "- same day": {"day": 0.0},
    "+ recency": {"recency": 0.3},
    "context 2/hit": {"context": 2},
}


def parse_when(text: str) -> datetime:
    """`1:56 pm on 8 May, 2023` as a time (UTC, so runs are the same everywhere)."""
    return datetime.strptime(" ".join(text.replace(",", " ").split()),
                             "%I:%M %p on %d %B %Y").replace(tzinfo=timezone.utc)


def transcript(conv: dict, sample_id: str) -> list[dict]:
    """The conversation as `agent import` lines, in order."""
    c = conv["conversation"]
    a, b = c.get("speaker_a"), c.get("speaker_b")
    n = [int(m.group(1)) for k in c if (m := re.fullmatch(r"session_(\d+)", k))]
    lines = []
    for i in sorted(n):
        turns = c.get(f"session_{i}") or []
        start = parse_when(c[f"session_{i}_date_time"])
        for j, t in enumerate(turns):
            text = t.get("text", "")
            if t.get("blip_caption"):
                text = f"{text} [image: {t['blip_caption']}]".strip()
            lines.append({"session": f"locomo/{sample_id}", "id": t["dia_id"],
                          "ts": (start + timedelta(seconds=30 * j)).isoformat(),
                          "role": "user" if t.get("speaker") == a else "assistant",
                          "speaker": t.get("speaker") or (a if j % 2 == 0 else b),
                          "content": text})
    return lines


def evidence(q: dict, known: set[str]) -> list[str]:
    out = []
    for e in q.get("evidence") or []:
        for part in re.split(r"[;,\s]+", str(e)):
            part = re.sub(r"^D:(\d+)", r"D\1", part.strip())
            if part in known and part not in out:
                out.append(part)
    return out


def build_vault(conv: dict, tmp: Path) -> Vault:
    from click.testing import CliRunner

    from agent.cli import cli

    sample = str(conv.get("sample_id", "conv"))
    vault, _ = Vault.init(tmp / "vault", LAYOUT)
    src = tmp / f"{sample}.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for line in transcript(conv, sample):
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    done = CliRunner().invoke(cli, ["--vault", str(vault.root), "import", str(src)])
    if done.exit_code:
        raise SystemExit(f"agent import failed: {done.output}")
    return vault


class _CliHit:
    """A hit as `agent search --json` prints it (what flat_ids reads)."""

    def __init__(self, obj: dict):
        self.message_ids = obj.get("message_ids") or []
        self.context = [_CliHit(c) for c in obj.get("context") or []]


def cli_search(vault: Vault, question: str, limit: int) -> list:
    """The hits of `agent search --json -n LIMIT QUESTION`, run as a person runs it."""
    import subprocess
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "search",
                        "--json", "-n", str(limit), "--", question], capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir(),
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).absolute().parent.parent)})
    if p.returncode not in (0, 1):
        raise SystemExit(f"agent search failed: {p.stderr[-500:]}")
    return [_CliHit(json.loads(x)) for x in p.stdout.splitlines() if x.startswith("{")]


def score(ids: list[str], ev: list[str], k: int) -> tuple[float, float, float]:
    got = set(ids[:k]) & set(ev)
    return float(bool(got)), float(len(got) == len(ev)), len(got) / len(ev)


def flat_ids(hits) -> list[str]:
    """Message ids in the order a person reads them: a hit, then the context under it."""
    out = []
    for h in hits:
        out.extend(h.message_ids)
        for c in h.context:
            out.extend(c.message_ids)
    return out


def run(data, ks, ranking, vaults, questions, mode="auto", fusion=None,
        cli: bool = False) -> tuple[dict, list[float]]:
    """Per category and overall: {k: (any, all, rec)} sums and counts; query times."""
    kmax = max(ks)
    sums: dict = {}
    times = []
    for ci, vault in vaults.items():
        for q, ev in questions[ci]:
            t0 = time.perf_counter()
            hits = (cli_search(vault, q["question"], kmax) if cli else
                    index.search(vault, q["question"], limit=kmax, ranking=ranking, mode=mode,
                                 fusion=fusion))
            times.append(time.perf_counter() - t0)
            ids = flat_ids(hits)
            for cat in (q["category"], "overall"):
                s = sums.setdefault(cat, {"n": 0, **{k: [0.0, 0.0, 0.0] for k in ks}})
                s["n"] += 1
                for k in ks:
                    for i, v in enumerate(score(ids, ev, k)):
                        s[k][i] += v
    return sums, times


def table(sums, ks) -> list[str]:
    rows = []
    head = f"{'category':<14}{'n':>5}" + "".join(
        f"{f'any@{k}':>9}{f'all@{k}':>9}{f'rec@{k}':>9}" for k in ks)
    rows.append(head)
    for cat in [c for c in CATEGORIES if c in sums] + ["overall"]:
        s = sums[cat]
        name = CATEGORIES.get(cat, cat) if cat != "overall" else "overall"
        rows.append(f"{name:<14}{s['n']:>5}" + "".join(
            f"{s[k][0] / s['n']:>9.3f}{s[k][1] / s['n']:>9.3f}{s[k][2] / s['n']:>9.3f}" for k in ks))
    return rows


def overall(sums, ks) -> dict:
    s = sums["overall"]
    out = {"questions": s["n"]}
    for k in ks:
        out[f"any@{k}"] = round(s[k][0] / s["n"], 4)
        out[f"all@{k}"] = round(s[k][1] / s["n"], 4)
        out[f"rec@{k}"] = round(s[k][2] / s["n"], 4)
    return out


def pick(spec: str | None, n: int) -> list[int]:
    if not spec:
        return list(range(n))
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return [i for i in out if i < n]


def _typed(default, value: str):
    """`value` as the type of the setting's default (a flag: true/false, 1/0, yes/no)."""
    if isinstance(default, bool):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return type(default)(value)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="LoCoMo-format JSON (a list of conversations)")
    ap.add_argument("--k", default="1,5,10,20", help="cut-offs, comma-separated (default 1,5,10,20)")
    ap.add_argument("--conversations", help="which ones, by position: e.g. 0-2 or 3,4 (default all)")
    ap.add_argument("--ablation", action="store_true",
                    help="also score the ranking with each feature taken away")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a ranking weight (e.g. --set neighbours=0.3)")
    ap.add_argument("--workdir", type=Path,
                    help="keep the built vaults here and reuse them on the next run (tuning)")
    ap.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2",
                    help="also score hybrid with each value of a fusion setting (tuning)")
    ap.add_argument("--mode", default="all", choices=("all", *index.MODES),
                    help="words, dense, hybrid, or all three one after the other (default)")
    ap.add_argument("--cli", action="store_true",
                    help="ask each question through `agent search --json` in a new process "
                         "(the default settings; slower)")
    ap.add_argument("--fuse", action="append", default=[], metavar="NAME=VALUE",
                    help="override a fusion setting (e.g. --fuse dense=0.5 --fuse k=30)")
    args = ap.parse_args(argv)
    ks = sorted({int(k) for k in args.k.split(",")})
    ranking = index.RANKING
    for item in args.set:
        name, _, value = item.partition("=")
        ranking = replace(ranking, **{name: _typed(getattr(ranking, name), value)})
    fusion = fusion_mod.FUSION
    for item in args.fuse:
        name, _, value = item.partition("=")
        fusion = replace(fusion, **{name: _typed(getattr(fusion, name), value)})

    for var, val in (("GIT_AUTHOR_NAME", "eval"), ("GIT_AUTHOR_EMAIL", "eval@localhost"),
                     ("GIT_COMMITTER_NAME", "eval"), ("GIT_COMMITTER_EMAIL", "eval@localhost")):
        os.environ.setdefault(var, val)

    data = json.loads(args.data.read_text(encoding="utf-8"))
    chosen = pick(args.conversations, len(data))
    with tempfile.TemporaryDirectory(prefix="agent-eval-") as tmp:
        if args.workdir:
            tmp = args.workdir
            tmp.mkdir(parents=True, exist_ok=True)
        vaults, questions, skipped = {}, {}, 0
        t0 = time.perf_counter()
        for ci in chosen:
            conv = data[ci]
            d = Path(tmp) / str(ci)
            if (d / "vault" / ".git").is_dir():
                vaults[ci] = Vault(d / "vault")
            else:
                d.mkdir(exist_ok=True)
                vaults[ci] = build_vault(conv, d)
            index.refresh(vaults[ci])
            known = {t["dia_id"] for k, v in conv["conversation"].items()
                     if re.fullmatch(r"session_\d+", k) for t in v}
            questions[ci] = []
            for q in conv.get("qa", []):
                if q.get("category") not in CATEGORIES:
                    continue
                ev = evidence(q, known)
                if ev:
                    questions[ci].append((q, ev))
                else:
                    skipped += 1
        build = time.perf_counter() - t0
        print(f"{args.data.name}: conversations {','.join(map(str, chosen))}, "
              f"{sum(map(len, questions.values()))} questions (skipped {skipped} without "
              f"valid evidence); vaults built and indexed in {build:.1f}s")
        print(f"ranking: {ranking}")
        print(f"fusion: {fusion}")
        modes = ("words", "dense", "hybrid") if args.mode == "all" else (args.mode,)
        if args.cli:
            modes = ("auto",)
        results = {}
        for mode in modes:
            sums, times = run(data, ks, ranking, vaults, questions, mode, fusion, args.cli)
            print(f"\n{mode} (ran as {'agent search --json' if args.cli else index.LAST.get('mode')})")
            print("\n".join(table(sums, ks)))
            times.sort()
            med = statistics.median(times) * 1000
            p95 = times[int(0.95 * (len(times) - 1))] * 1000
            print(f"query time: median {med:.1f} ms, p95 {p95:.1f} ms (refresh included)")
            results[mode] = {**overall(sums, ks), "median_ms": round(med, 2), "p95_ms": round(p95, 2)}
        for item in args.grid:
            name, _, values = item.partition("=")
            print(f"\nhybrid, {name} varied (overall)")
            print(f"{name:<10}{'any@5':>8}{'rec@5':>8}{'any@10':>8}{'all@10':>8}{'rec@10':>8}")
            for value in values.split(","):
                f = replace(fusion, **{name: _typed(getattr(fusion, name), value)})
                s_, _ = run(data, ks, ranking, vaults, questions, "hybrid", f)
                o = overall(s_, ks)
                print(f"{value:<10}" + "".join(f"{o.get(m, float('nan')):>8.3f}" for m in
                      ("any@5", "rec@5", "any@10", "all@10", "rec@10")))
        if args.ablation:
            print("\nablation (overall)")
            print(f"{'variant':<16}{'any@5':>8}{'rec@5':>8}{'any@10':>8}{'all@10':>8}{'rec@10':>8}{'rec@20':>8}")
            for name, change in ABLATIONS.items():
                r = replace(ranking, **change)
                s, _ = run(data, ks, r, vaults, questions, modes[-1], fusion)
                o = overall(s, ks)
                print(f"{name:<16}" + "".join(f"{o.get(m, float('nan')):>8.3f}" for m in
                      ("any@5", "rec@5", "any@10", "all@10", "rec@10", "rec@20")))
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
