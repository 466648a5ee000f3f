"""How well a dream's facts trace back to the messages they come from, on LoCoMo.

LoCoMo (Maharana et al., 2024; github.com/snap-research/locomo, `data/locomo10.json`)
ships, for every session of its long conversations, "observation" facts about each
speaker tagged with the ids of the dialogue turns they come from (`D1:3`). This script
turns each session into session lines (message ids = LoCoMo's dia_ids) and one archive
entry, runs the real dream over them (review off: every fact lands), then asks
`agent why` for every fact of MEMORY.md and USER.md: the message ids it resolves to are
the fact's provenance. Each fact is matched to the gold observation it says best (word
overlap) and scored:

- precision: the share of the message ids `why` names that the gold observation cites;
- recall: the share of the gold observation's ids that `why` names;
- resolved: the share of facts `why` resolves to at least one message at all.

With ANTHROPIC_API_KEY set (and no --scripted) it dreams with the real API (plain calls,
full price: a few cents per conversation with the default model). Without a key, or with
--scripted, it runs against the fake API with a scripted model (each longer message
becomes a fact) and says so: that run checks the pipeline, not a model.

    python scripts/eval_dream.py --locomo data/locomo10.json [--conversations 2] [--sessions 5]
    python scripts/eval_dream.py --scripted          # the built-in sample, no key needed
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from agent.vault.change import Change  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)

# A LoCoMo-shaped sample (one conversation, two sessions) for runs without the data set.
SAMPLE = [{
    "sample_id": "sample-0",
    "conversation": {
        "speaker_a": "Caroline", "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel! I went to an LGBTQ support group yesterday and it was so powerful."},
            {"speaker": "Melanie", "dia_id": "D1:2", "text": "That's great to hear! How are you?"},
            {"speaker": "Caroline", "dia_id": "D1:3", "text": "I'm thinking of studying counseling so I can help people like me."},
            {"speaker": "Melanie", "dia_id": "D1:4", "text": "I painted a lake sunrise last year and I still love painting to relax."},
        ],
        "session_2_date_time": "1:14 pm on 25 May, 2023",
        "session_2": [
            {"speaker": "Melanie", "dia_id": "D2:1", "text": "I ran a charity race for mental health last Saturday with my kids cheering."},
            {"speaker": "Caroline", "dia_id": "D2:2", "text": "Nice! The weather was lovely today."},
            {"speaker": "Caroline", "dia_id": "D2:3", "text": "I am applying to adoption agencies because I want to build a family."},
        ],
    },
    "observation": {
        "session_1_observation": {
            "Caroline": [["Caroline attended an LGBTQ support group.", "D1:1"],
                         ["Caroline wants to study counseling to help people.", "D1:3"]],
            "Melanie": [["Melanie painted a lake sunrise and paints to relax.", "D1:4"]]},
        "session_2_observation": {
            "Melanie": [["Melanie ran a charity race for mental health.", "D2:1"]],
            "Caroline": [["Caroline is applying to adoption agencies to build a family.", "D2:3"]]},
    },
}]


# ---- LoCoMo into a vault ----------------------------------------------------------------

def sessions_of(sample: dict, limit: int | None) -> list[tuple[int, list[dict], str]]:
    conv = sample["conversation"]
    out = []
    n = 1
    while f"session_{n}" in conv:
        out.append((n, conv[f"session_{n}"], conv.get(f"session_{n}_date_time", "")))
        n += 1
    return out[:limit] if limit else out


def gold_of(sample: dict, sessions: set[int]) -> list[tuple[str, set[str]]]:
    """(observation text, the dia_ids it cites) for the sessions dreamed."""
    out = []
    for key, by_speaker in (sample.get("observation") or {}).items():
        m = re.match(r"session_(\d+)_observation", key)
        if not m or int(m.group(1)) not in sessions:
            continue
        for items in by_speaker.values():
            for item in items:
                text, ids = item[0], item[1]
                ids = ids if isinstance(ids, list) else [ids]
                out.append((text, {str(i).strip() for i in ids for i in str(i).split(";")}))
    return out


def build(vault: Vault, sample: dict, limit: int | None) -> list[int]:
    from agent.stores import archive
    a, b = sample["conversation"]["speaker_a"], sample["conversation"]["speaker_b"]
    (vault.root / "USER.md").write_text(f"# User\n\n## About\n\n- The user is {a}; they talk with {b}.\n")
    vault.commit(Change("eval", "who the user is"))
    ids = []
    for n, turns, when in sessions_of(sample, limit):
        created = T0 + timedelta(days=7 * n)
        rel = f"sessions/locomo/{sample['sample_id']}/{created:%Y-%m}.jsonl"
        lines = []
        for k, t in enumerate(turns):
            lines.append(json.dumps({
                "id": t["dia_id"], "ts": (created + timedelta(minutes=k)).isoformat(),
                "role": "user" if t["speaker"] == a else "assistant",
                "content": f"{t['speaker']}: {t['text']}", "turn": k // 2 + 1}))
        vault.append_lines(rel, lines)
        entry_id = int(f"{created:%Y%m%d%H%M%S}") * 10_000 + n
        meta = {"session": f"locomo/{sample['sample_id']}", "created": created.isoformat(),
                "source": {"file": rel, "from": turns[0]["dia_id"], "through": turns[-1]["dia_id"]},
                "topic": f"session {n} ({when})", "importance": 0.5, "tokens": 0}
        summary = " ".join(f"{t['speaker']}: {t['text']}" for t in turns)[:1500]
        vault.write_text(archive.entry_path(entry_id, created),
                         archive.render(entry_id, meta, summary))
        ids.append(entry_id)
    vault.commit(Change("eval", f"{len(ids)} archive entries"))
    text = (vault.root / "agent.toml").read_text()
    (vault.root / "agent.toml").write_text(text.replace('review = "changes"', 'review = "off"'))
    vault.commit(Change("eval", "every fact lands"))
    return ids


# ---- the scripted model -------------------------------------------------------------------

def scripted(params: dict):
    """Each message of eight words or more becomes a fact citing its archive entry."""
    from fakeanthropic import json_reply
    content = params["messages"][0]["content"]
    tail = content[-1]["text"]
    if tail.startswith("Phase 1, analyst"):
        m = re.search(r"<archive_data>\n(.*?)\n</archive_data>", tail, re.S)
        findings = []
        for line in (m.group(1).splitlines() if m else []):
            entry = json.loads(line)
            for msg in entry.get("messages", []):
                text = msg.get("text", "")
                if len(text.split()) >= 9:
                    findings.append({"kind": "new", "file": "MEMORY.md", "statement": text,
                                     "evidence": [f"archive:{entry['id']}"], "date": ""})
        return json_reply({"findings": findings})
    m = re.search(r"<findings>\n(.*?)\n</findings>", tail, re.S)
    ops = []
    for line in (m.group(1).splitlines() if m else []):
        f = json.loads(line)
        ops.append({"op": "add", "file": "MEMORY.md", "section": "Facts", "old": "",
                    "new": "- " + f["statement"], "reason": ", ".join(f["evidence"])})
    return json_reply({"ops": ops})


# ---- scoring --------------------------------------------------------------------------------

def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.casefold()) if len(w) > 2}


def score(vault: Vault, gold: list[tuple[str, set[str]]]) -> dict:
    from agent.ops import why
    from agent.stores.memory import FACT
    rows = []
    for name in ("MEMORY.md", "USER.md"):
        for line in (vault.root / name).read_text().splitlines():
            if not FACT.match(line):
                continue
            try:
                story = why.explain(vault, line.lstrip("-*+ "))
            except why.NoMatch:
                continue
            step = story.steps[0] if story.steps else None
            if step is None or step.kind not in ("dream", "review"):
                continue                          # written by hand for the eval, not dreamed
            ids = {m["id"] for e in step.source.get("archive", []) for m in e.get("messages", [])}
            best = max(gold, key=lambda g: len(words(g[0]) & words(line)) / max(1, len(words(g[0]))),
                       default=None)
            if best is None:
                continue
            hit = ids & best[1]
            rows.append({"fact": line, "gold": best[0], "why_ids": sorted(ids),
                         "gold_ids": sorted(best[1]),
                         "precision": len(hit) / len(ids) if ids else 0.0,
                         "recall": len(hit) / len(best[1]) if best[1] else 0.0})
    n = len(rows)
    return {"facts": n,
            "resolved": sum(1 for r in rows if r["why_ids"]) / n if n else 0.0,
            "precision": sum(r["precision"] for r in rows) / n if n else 0.0,
            "recall": sum(r["recall"] for r in rows) / n if n else 0.0,
            "rows": rows}


# ---- main -------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--locomo", type=Path, help="locomo10.json (default: a built-in sample)")
    ap.add_argument("--conversations", type=int, default=1)
    ap.add_argument("--sessions", type=int, default=None, help="sessions per conversation")
    ap.add_argument("--scripted", action="store_true", help="the scripted model, no key")
    ap.add_argument("--json", action="store_true", help="every fact's row as JSON")
    args = ap.parse_args()
    samples = json.loads(args.locomo.read_text()) if args.locomo else SAMPLE
    samples = samples[:args.conversations]
    use_api = bool(os.environ.get("ANTHROPIC_API_KEY")) and not args.scripted
    fake = None
    if not use_api:
        from fakeanthropic import FakeAnthropic
        fake = FakeAnthropic().__enter__()
        fake.default_reply = scripted
        os.environ.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="scripted")
        print("No ANTHROPIC_API_KEY (or --scripted): dreaming with the scripted model on the "
              "fake API. The figures check the pipeline, not a model.")
    from agent.dream import run_dream
    from agent.llm import make_provider
    totals = []
    try:
        for sample in samples:
            with tempfile.TemporaryDirectory() as tmp:
                vault, _ = Vault.init(Path(tmp) / "vault", LAYOUT)
                build(vault, sample, args.sessions)
                out = run_dream(vault, make_provider(lazy=True), T0 + timedelta(days=365),
                                sync=True)
                sessions = {n for n, _, _ in sessions_of(sample, args.sessions)}
                result = score(vault, gold_of(sample, sessions))
                result["sample"], result["dream"] = sample["sample_id"], out.message
                totals.append(result)
                print(f"{sample['sample_id']}: {out.message}")
                print(f"  {result['facts']} facts; resolved to messages {result['resolved']:.0%}; "
                      f"provenance precision {result['precision']:.2f}, recall {result['recall']:.2f}")
    finally:
        if fake is not None:
            fake.__exit__(None, None, None)
    n = sum(t["facts"] for t in totals)
    if n:
        p = sum(t["precision"] * t["facts"] for t in totals) / n
        r = sum(t["recall"] * t["facts"] for t in totals) / n
        print(f"all: {n} facts, provenance precision {p:.2f}, recall {r:.2f} "
              f"({'API' if use_api else 'scripted model'})")
    if args.json:
        print(json.dumps(totals, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
