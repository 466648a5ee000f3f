#!/usr/bin/env python3
"""Tokens of retrieved context per turn, before and after the memory scheduler
(agent/search/scheduler.py), on a scripted 50-turn conversation.

The vault is one LoCoMo conversation imported as `agent import` does; the 50 turns are
its questions (categories 1-4, in order) with small talk between them ("hi", "thanks",
"ok", "haha nice", 你好, ありがとう), each asked as the new user message of a turn with
the turns before it as the window. For each turn: the tokens (chars / 4) of the memories
block `agent.chat.prompt.context_block` adds, and, for questions, whether a message the
answer rests on is in it.

    python scripts/bench_scheduler.py ../shared/bench/locomo-dev.json --conversation 3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).absolute().parent.parent))
sys.path.insert(0, str(Path(__file__).absolute().parent))

from agent.chat import prompt  # noqa: E402
from agent.search import index, scheduler  # noqa: E402
from eval_retrieval import CATEGORIES, build_vault, evidence  # noqa: E402

SMALL_TALK = ["hi", "thanks!", "ok", "haha nice", "你好", "ありがとう", "cool, thanks",
              "good morning", "great", "thank you so much"]


def script(conv: dict, turns: int = 50) -> list[tuple[str, list[str]]]:
    """(message, evidence ids) for each turn: about two questions, then small talk."""
    known = {t["dia_id"] for k, v in conv["conversation"].items()
             if re.fullmatch(r"session_\d+", k) for t in v}
    qs = [(q["question"], evidence(q, known)) for q in conv["qa"]
          if q.get("category") in CATEGORIES]
    qs = [q for q in qs if q[1]]
    out, qi, si = [], 0, 0
    while len(out) < turns:
        if len(out) % 3 == 2:
            out.append((SMALL_TALK[si % len(SMALL_TALK)], []))
            si += 1
        else:
            out.append(qs[qi % len(qs)])
            qi += 1
    return out


def run(vault, turns, scheduler: bool) -> tuple[list[int], int, int]:
    prompt.SCHEDULER = scheduler
    now = datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)
    base = len(prompt.context_block(now, "bench", [])["text"]) // 4
    tokens, found, asked = [], 0, 0
    window: list[dict] = []
    for n, (text, ev) in enumerate(turns):
        hits = prompt.retrieve(vault, text, window, now.date())
        tokens.append(len(prompt.context_block(now, "bench", hits)["text"]) // 4 - base)
        if ev:
            asked += 1
            ids = {m for h in hits for m in h.message_ids} | {
                m for h in hits for c in getattr(h, "context", []) for m in c.message_ids}
            found += bool(ids & set(ev))
        window = (window + [{"id": f"w{n}", "role": "user", "content": text}])[-20:]
    return tokens, found, asked


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--conversation", type=int, default=3)
    ap.add_argument("--turns", type=int, default=50)
    args = ap.parse_args(argv)
    conv = json.loads(args.data.read_text(encoding="utf-8"))[args.conversation]
    turns = script(conv, args.turns)
    with tempfile.TemporaryDirectory(prefix="agent-sched-") as tmp:
        vault = build_vault(conv, Path(tmp))
        index.refresh(vault)
        index.vectors_now(vault)
        result = {}
        for name, on in (("before", False), ("after", True)):
            tokens, found, asked = run(vault, turns, on)
            small = [t for t, (_, ev) in zip(tokens, turns) if not ev]
            result[name] = {"total": sum(tokens), "mean": round(statistics.mean(tokens), 1),
                            "max": max(tokens), "small_talk_mean": round(statistics.mean(small), 1),
                            "searches": sum(1 for text, _ in turns
                                            if not on or scheduler.needs_retrieval(text)),
                            "questions_with_evidence_in_context": f"{found}/{asked}"}
            print(f"{name:<7} tokens per turn: " + " ".join(map(str, tokens)))
        print(json.dumps({"turns": len(turns), "search": index.LAST.get("mode"), **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
