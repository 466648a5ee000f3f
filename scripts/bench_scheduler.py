#!/usr/bin/env python3
"""Tokens of retrieved context per turn, and whether the evidence reaches it, on a
scripted 50-turn conversation: before the memory scheduler, with it, and with it and
the session's working set (agent/search/recall.py, agent/chat/working.py).

The vault is one LoCoMo conversation imported as `agent import` does; the 50 turns
repeat: a question (categories 1-4, in order), a follow-up about the same thing that
names nothing to search for ("When was that?", "Tell me more."; its evidence is the
question's), small talk ("hi", "thanks", 你好, ありがとう), each the new user message of
a turn with the turns before it as the window. For each turn: the tokens (chars / 4)
of the memories block `agent.chat.prompt.context_block` adds, and, for questions and
follow-ups, whether a message the answer rests on is in it.

    python scripts/bench_scheduler.py ../shared/bench/locomo-dev.json --conversation 3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).absolute().parent.parent))
sys.path.insert(0, str(Path(__file__).absolute().parent))

from agent.chat import prompt  # noqa: E402
from agent.search import index, recall  # noqa: E402
from eval_retrieval import CATEGORIES, build_vault, evidence  # noqa: E402

SMALL_TALK = ["hi", "thanks!", "ok", "haha nice", "你好", "ありがとう", "cool, thanks",
              "good morning", "great", "thank you so much"]
FOLLOW_UPS = ["When was that?", "Tell me more.", "Why?", "And then what happened?",
              "Who said that?", "Really? How so?"]


def script(conv: dict, turns: int = 50) -> list[tuple[str, list[str], str]]:
    """(message, evidence ids, kind) for each turn: a question, a follow-up, small talk."""
    known = {t["dia_id"] for k, v in conv["conversation"].items()
             if re.fullmatch(r"session_\d+", k) for t in v}
    qs = [(q["question"], evidence(q, known)) for q in conv["qa"]
          if q.get("category") in CATEGORIES]
    qs = [q for q in qs if q[1]]
    out: list[tuple[str, list[str], str]] = []
    qi = fi = si = 0
    while len(out) < turns:
        if len(out) % 3 == 0:
            out.append((*qs[qi % len(qs)], "question"))
            qi += 1
        elif len(out) % 3 == 1:
            out.append((FOLLOW_UPS[fi % len(FOLLOW_UPS)], out[-1][1], "follow-up"))
            fi += 1
        else:
            out.append((SMALL_TALK[si % len(SMALL_TALK)], [], "small talk"))
            si += 1
    return out


MODES = {"before": (False, False), "scheduler": (True, False), "working set": (True, True)}


def run(vault, turns, mode: str) -> tuple[list[int], dict[str, list[bool]]]:
    prompt.SCHEDULER, prompt.WORKING_SET = MODES[mode]
    now = datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)
    session = "cli/bench" + mode.replace(" ", "")
    base = len(prompt.context_block(now, session, [])["text"]) // 4
    tokens: list[int] = []
    found: dict[str, list[bool]] = {"question": [], "follow-up": []}
    window: list[dict] = []
    for n, (text, ev, kind) in enumerate(turns):
        now += timedelta(minutes=1)
        memories = prompt.retrieve(vault, text, window, now, session)
        tokens.append(len(prompt.context_block(now, session, memories)["text"]) // 4 - base)
        if kind in found:
            ids = {i for m in memories for i in m["ids"]}
            found[kind].append(bool(ids & set(ev)))
        window = (window + [{"id": f"w{n}", "role": "user", "content": text}])[-20:]
    return tokens, found


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
        for mode in MODES:
            tokens, found = run(vault, turns, mode)
            by_kind = {k: [t for t, turn in zip(tokens, turns) if turn[2] == k]
                       for k in ("question", "follow-up", "small talk")}
            result[mode] = {
                "total": sum(tokens), "mean": round(statistics.mean(tokens), 1),
                "max": max(tokens),
                **{f"{k}_mean": round(statistics.mean(v), 1) for k, v in by_kind.items()},
                "searches": sum(1 for text, _, _ in turns
                                if not MODES[mode][0] or recall.needs_retrieval(text)),
                **{f"{k}s_with_evidence_in_context": f"{sum(v)}/{len(v)}"
                   for k, v in found.items()}}
            print(f"{mode:<12} tokens per turn: " + " ".join(map(str, tokens)))
        print(json.dumps({"turns": len(turns), "search": index.LAST.get("mode"), **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
