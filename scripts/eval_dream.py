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

`--model PROVIDER/NAME` dreams with any model agent.toml could name; `--base-url URL`
adds the OpenAI-compatible `[providers.PROVIDER]` table for it (no key), so a local
server (llama-server, Ollama, vLLM) is measured the same way. `--review changes` keeps
the dream's review on, as a vault has it by default. Besides the provenance scores it
prints what the model made of each phase: replies that fit the schema at once, after the
one retry, or not at all; the analyst's findings; and the fate of each edit (applied,
proposed for review, skipped, refused by a guard, dropped).

    python scripts/eval_dream.py --locomo data/locomo10.json [--conversations 2] [--sessions 5]
    python scripts/eval_dream.py --scripted          # the built-in sample, no key needed
    python scripts/llama_server.py serve --port 18080 &
    python scripts/eval_dream.py --model local/smollm2 --base-url http://127.0.0.1:18080/v1 \
        --sampling temperature=0 --sampling repeat_penalty=1.15
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
    return ids


def configure(vault: Vault, model: str | None, base_url: str | None, review: str,
              concurrency: int | None, max_tokens: int | None = None,
              sampling: list[str] | None = None) -> None:
    """agent.toml for the run: the dream's model (and its provider's table, with its
    `sampling` options as KEY=VALUE), its review."""
    text = (vault.root / "agent.toml").read_text()
    text = text.replace('review = "changes"', f'review = "{review}"')
    if model:
        text = re.sub(r'(?m)^name = "claude[^"]*"$', f'name = "{model}"', text, count=1)
        text = re.sub(r'(?m)^fallbacks = .*$', "fallbacks = []", text, count=1)
    if concurrency:
        text = text.replace("[dream]\n", f"[dream]\nconcurrency = {concurrency}\n", 1)
    if max_tokens:
        text = text.replace("[dream]\n", f"[dream]\nmax_tokens = {max_tokens}\n", 1)
    if model and base_url:
        name = model.split("/", 1)[0]
        text += f'\n[providers.{name}]\napi = "openai"\nbase_url = "{base_url}"\nkey_env = ""\n'
        for option in sampling or []:
            key, _, value = option.partition("=")
            text += f"{key.strip()} = {float(value)}\n"
    (vault.root / "agent.toml").write_text(text)
    vault.commit(Change("eval", f"dream with {model or 'the default model'}, review {review}"))


class Counting:
    """The provider's own backend, with each structured reply checked against its schema
    as the router will check it: what the model made of each phase (a script's
    measurement; the router retries a misfit once, so a phase shows two replies then)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.replies: list[dict] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def create(self, models, request, *, parse=None):
        from agent.llm.structured import misfit
        msg = self.inner.create(models, request, parse=parse)
        tail = request.messages[0].text if request.messages else ""
        phase = ("analyst" if "Phase 1, analyst" in tail else
                 "editor" if "Phase 2, editor" in tail else "other")
        problem = misfit(parse, msg.text) if parse is not None else None
        items = None
        if problem is None and parse is not None:
            data = json.loads(msg.text)
            items = len(data.get("findings") or data.get("ops") or [])
        self.replies.append({"phase": phase, "retry": len(request.messages) > 1,
                             "fits": problem is None, "problem": problem, "items": items,
                             "output_tokens": msg.usage.output_tokens,
                             "stop": msg.stop_reason, "text": msg.text[:300]})
        return msg


def phases(replies: list[dict]) -> dict:
    """Per phase: replies, fitting at first, fitting after the retry, not fitting, items."""
    out: dict = {}
    for r in replies:
        p = out.setdefault(r["phase"], {"replies": 0, "fit_first": 0, "fit_retry": 0,
                                        "misfit": 0, "items": 0, "output_tokens": 0})
        p["replies"] += 1
        p["output_tokens"] += r["output_tokens"]
        if not r["fits"]:
            p["misfit"] += 1
        elif r["retry"]:
            p["fit_retry"] += 1
        else:
            p["fit_first"] += 1
        p["items"] += r["items"] or 0
    return out


def fates(outcome) -> dict[str, int]:
    """How many of the editor's operations were applied, proposed, skipped, refused, dropped."""
    out = {"applied": 0, "proposed": 0, "skipped": 0, "refused": 0, "dropped": 0}
    report = outcome.report
    for r in report.results if report is not None else []:
        out[r.status] = out.get(r.status, 0) + 1
    out["duplicates"] = outcome.duplicates
    return out


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
    ap.add_argument("--model", help="the dream's model, as agent.toml names it "
                    "(local/smollm2, openai/gpt-5-mini); default: agent.toml's")
    ap.add_argument("--base-url", help="the OpenAI-compatible server of --model's provider "
                    "(a [providers.NAME] table without a key is added)")
    ap.add_argument("--review", choices=["off", "changes", "all"], default="off",
                    help="[dream] review for the run (default off: every fact lands)")
    ap.add_argument("--concurrency", type=int, help="[dream] concurrency (1 suits a laptop)")
    ap.add_argument("--max-tokens", type=int, help="[dream] max_tokens: a reply's budget "
                    "(a small model may write until it; default 16000)")
    ap.add_argument("--sampling", action="append", metavar="KEY=VALUE",
                    help="a sampling option of --base-url's provider table, as "
                    "temperature=0 or repeat_penalty=1.15 (docs/providers.md); repeatable")
    ap.add_argument("--json", action="store_true", help="every fact's row as JSON")
    args = ap.parse_args()
    samples = json.loads(args.locomo.read_text()) if args.locomo else SAMPLE
    samples = samples[:args.conversations]
    use_model = bool(args.model) and not args.scripted
    use_api = use_model or (bool(os.environ.get("ANTHROPIC_API_KEY")) and not args.scripted)
    fake = None
    if not use_api:
        from fakeanthropic import FakeAnthropic
        fake = FakeAnthropic().__enter__()
        fake.default_reply = scripted
        os.environ.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="scripted")
        print("No ANTHROPIC_API_KEY nor --model (or --scripted): dreaming with the scripted "
              "model on the fake API. The figures check the pipeline, not a model.")
    from agent.config import load_settings
    from agent.dream import run_dream
    from agent.llm import make_provider
    from agent.llm.spec import split
    totals = []
    try:
        for sample in samples:
            with tempfile.TemporaryDirectory() as tmp:
                vault, _ = Vault.init(Path(tmp) / "vault", LAYOUT)
                build(vault, sample, args.sessions)
                configure(vault, args.model if use_model else None, args.base_url,
                          args.review, args.concurrency, args.max_tokens, args.sampling)
                settings = load_settings(vault.root)
                provider = make_provider(settings, lazy=True, model=settings.dream_model)
                name = split(settings.dream_model)[0]
                counting = Counting(provider.backend(name))
                provider._made[name] = counting     # measured where the router calls it
                out = run_dream(vault, provider, T0 + timedelta(days=365), sync=True)
                sessions = {n for n, _, _ in sessions_of(sample, args.sessions)}
                result = score(vault, gold_of(sample, sessions))
                result["sample"], result["dream"] = sample["sample_id"], out.message
                result["phases"], result["fates"] = phases(counting.replies), fates(out)
                result["replies"] = counting.replies
                totals.append(result)
                print(f"{sample['sample_id']} ({settings.dream_model}): {out.message}")
                for phase, c in result["phases"].items():
                    print(f"  {phase}: {c['replies']} replies, {c['fit_first']} fit the schema "
                          f"at once, {c['fit_retry']} after the retry, {c['misfit']} did not; "
                          f"{c['items']} {'findings' if phase == 'analyst' else 'edits'}, "
                          f"{c['output_tokens']} output tokens")
                f = result["fates"]
                print(f"  edits: {f['applied']} applied, {f['proposed']} proposed for review, "
                      f"{f['skipped']} skipped (misquoted), {f['refused']} refused by a guard, "
                      f"{f['dropped']} dropped, {f['duplicates']} duplicates of memory")
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
              f"({'the model' if use_api else 'scripted model'})")
    if args.json:
        print(json.dumps(totals, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
