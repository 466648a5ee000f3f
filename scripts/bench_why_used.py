#!/usr/bin/env python3
"""What the record of "what shaped this answer" (agent.stores.used) costs: bytes per turn.

A vault with a MEMORY.md of --facts lines, a USER.md, today's and yesterday's daily
notes and --history earlier conversations (so retrieval finds messages), then --turns
chat turns through run_turn with the in-process scripted model: every third reply calls
memory_search first, every fifth loads a skill. Prints, per turn:

- the record's bytes on the reply's transcript line (mean, max), and as a share of the
  bytes the turn added to its session file;
- what it adds to the turn's commit: the compressed size of the commit's objects with
  and without the record (git stores the session file zlib-compressed);
- the request the model got is unchanged (the record is never sent): checked, not timed;
- the time to tell one reply's record back (`agent.ops.used.used`), median.

    python scripts/bench_why_used.py [--facts 200] [--history 300] [--turns 30]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AGENT_EMBED", "off")

from agent.chat.turn import run_turn  # noqa: E402
from agent.llm.anthropic import wire  # noqa: E402
from agent.llm.scripted import ScriptedProvider, reply, tool_call  # noqa: E402
from agent.ops import used as telling  # noqa: E402
from agent.stores import memory  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

WORDS = ("boat harbour Kiel Lisbon tea train Kyoto ryokan berth sister garden piano "
         "budget flight invoice dentist Tuesday project alpha release tomatoes bike").split()


def sentence(rng: random.Random, n: int = 9) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize()


def build(root: Path, facts: int, history: int, rng: random.Random, now: datetime) -> Vault:
    vault, _ = Vault.init(root, LAYOUT)
    (root / memory.MEMORY).write_text("# Memory\n\n## Facts\n\n" + "".join(
        f"- {sentence(rng)} (fact {i})\n" for i in range(facts)))
    (root / memory.USER).write_text("# User\n\n" + "".join(
        f"- {sentence(rng, 6)}\n" for _ in range(20)))
    for day in (now.date(), now.date() - timedelta(days=1)):
        rel = root / memory.daily_path(day)
        rel.parent.mkdir(parents=True, exist_ok=True)
        rel.write_text(f"# {day}\n\n" + "".join(f"- 09:{i:02d} {sentence(rng, 5)}\n"
                                                for i in range(8)))
    skill = root / "skills" / "harbours" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: harbours\ndescription: Finding a berth.\n---\nAsk.\n")
    vault.git("add", "-A")
    vault.git("commit", "-qm", "bench: memory files")
    p = ScriptedProvider()
    p.default = reply("Noted.")
    for i in range(history):
        run_turn(vault, p, f"cli/old{i % 5}", sentence(rng, 12), now - timedelta(days=30 - i % 30))
    return vault


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--facts", type=int, default=200)
    ap.add_argument("--history", type=int, default=300)
    ap.add_argument("--turns", type=int, default=30)
    args = ap.parse_args()
    rng = random.Random(35)
    now = datetime(2030, 1, 1, 10, 0, tzinfo=timezone.utc)
    with tempfile.TemporaryDirectory() as tmp:
        vault = build(Path(tmp) / "vault", args.facts, args.history, rng, now)
        record_bytes, turn_bytes, packed_with, packed_without, sent_used = [], [], [], [], 0
        p = ScriptedProvider()
        for i in range(args.turns):
            question = f"What about the {rng.choice(WORDS)} and the {rng.choice(WORDS)}?"
            if i % 3 == 0:
                p.add(reply(tool_call("memory_search", {"query": rng.choice(WORDS)})))
            if i % 5 == 0:
                p.add(reply(tool_call("load_skill", {"name": "harbours"})))
            p.add(reply(sentence(rng, 14)))
            result = run_turn(vault, p, "cli/default", question, now + timedelta(minutes=i))
            rel = vault.git("show", "--name-only", "--format=", result.sha).split()
            session = next(r for r in rel if r.startswith("sessions/cli/default/"))
            added = vault.git("show", "--format=", "-U0", result.sha, "--", session)
            lines = [json.loads(x[1:]) for x in added.splitlines()
                     if x.startswith("+{")]
            answer = [x for x in lines if x.get("role") == "assistant"][-1]
            rec = json.dumps({"used": answer["used"]}, ensure_ascii=False,
                             separators=(",", ":"))
            record_bytes.append(len(rec.encode()) - 1)       # and the comma before it
            whole = "".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n"
                            for x in lines)
            turn_bytes.append(len(whole.encode()))
            text = (vault.root / session).read_bytes()
            rows = [json.loads(x) for x in text.splitlines()]
            bare = "".join(json.dumps({k: v for k, v in x.items() if k != "used"},
                                      ensure_ascii=False, separators=(",", ":")) + "\n"
                           for x in rows).encode()
            packed_with.append(len(zlib.compress(text)))
            packed_without.append(len(zlib.compress(bare)))
            sent_used += sum('"used"' in json.dumps(wire(r.request.messages))
                             for r in p.requests if r.request is not None)
        times = []
        reply_id = answer["id"]
        report = None
        for _ in range(5):
            t = time.perf_counter()
            report = telling.used(vault, telling.find_reply(vault, reply_id, "cli/default"))
            times.append(time.perf_counter() - t)
        assert report is not None
        print(f"record on the reply line: mean {statistics.mean(record_bytes):.0f} B, "
              f"max {max(record_bytes)} B per turn "
              f"({statistics.mean(r / t for r, t in zip(record_bytes, turn_bytes)):.1%} of the "
              f"bytes a turn adds to its session file)")
        print(f"memories recorded per turn: {report.count} in the last "
              f"({len(report.items)} told back)")
        print(f"session file compressed (as git stores it), with / without records: "
              f"{packed_with[-1]:,} / {packed_without[-1]:,} B "
              f"(ratio {packed_with[-1] / packed_without[-1]:.3f}; "
              f"{(packed_with[-1] - packed_without[-1]) / args.turns:.0f} B per turn)")
        print(f"requests carrying a record: {sent_used} of {len(p.requests)}")
        print(f"telling one reply's record back: median {statistics.median(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
