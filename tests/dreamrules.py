"""A scripted dream model that follows rules, for the dream's scenario suite and
scripts/eval_dream.py (in the style of the MEME and FactConsolidation benchmarks: facts
planted, updated and retracted among distractors).

Archive summaries speak a tiny language: `SET key = value` states a fact, `UNSET key`
retracts it; anything else is a distractor. The analyst reports, per entry of its
chunk, every statement (new, or about a line memory has) and every retraction (and not
what the person rejected); the editor takes, per key, the finding with the newest evidence and
turns it into edits of `- key: value` lines, as a careful model would. It adds one line
per finding of the final value (duplicates are the product's to refuse), so the suite
tests the dream, not the script.

    server.default_reply = respond        # every request, in any order, any batch
"""

from __future__ import annotations

import json
import re

from fakeanthropic import json_reply

SET = re.compile(r"\bSET (\w+) = ([^.;\n]+)")
UNSET = re.compile(r"\bUNSET (\w+)\b")
FACT = re.compile(r"^- (\w+): (.*)$")


def _memory(block: str) -> dict[str, str]:
    """key -> the line, from the numbered memory files of the shared prefix."""
    out = {}
    for raw in block.splitlines():
        line = raw.split("\t", 1)[1] if "\t" in raw else ""
        m = FACT.match(line)
        if m:
            out[m.group(1)] = line
    return out


def _data(tail: str, tag: str) -> list[dict]:
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", tail, re.S)
    return [json.loads(x) for x in m.group(1).splitlines() if x.strip()] if m else []


def analyst(memory: dict[str, str], tail: str) -> dict:
    rejected = {r.get("statement", "").removeprefix("- ") for r in _data(tail, "rejected_data")}
    findings = []
    for entry in _data(tail, "archive_data"):
        ev = [f"archive:{entry['id']}"]
        text = entry.get("summary", "")
        for key, value in SET.findall(text):
            statement = f"{key}: {value.strip()}"
            if statement in rejected:
                continue
            # Reported even when memory has it: the editor needs every statement's date
            # to tell which is the newest.
            line = memory.get(key)
            findings.append({"kind": "update" if line else "new", "file": "MEMORY.md",
                             "statement": statement, "evidence": ev, "date": ""})
        for key in UNSET.findall(text):
            findings.append({"kind": "stale", "file": "MEMORY.md", "statement": key,
                             "evidence": ev, "date": ""})
    return {"findings": findings}


def _newest(f: dict) -> int:
    return max(int(e.split(":")[1]) for e in f["evidence"])


def editor(memory: dict[str, str], tail: str) -> dict:
    by_key: dict[str, list[dict]] = {}
    for f in _data(tail, "findings"):
        key = f["statement"].split(":")[0].strip()
        by_key.setdefault(key, []).append(f)
    ops = []
    for key, found in sorted(by_key.items()):
        last = max(found, key=_newest)
        line = memory.get(key)
        why = f"archive:{_newest(last)}"
        if last["kind"] == "stale":
            if line:
                ops.append({"op": "delete", "file": "MEMORY.md", "section": "", "old": line,
                            "new": "", "reason": f"{why}: retracted"})
            continue
        new = f"- {last['statement']}"
        if line == new:
            continue
        if line:
            ops.append({"op": "update", "file": "MEMORY.md", "section": "", "old": line,
                        "new": new, "reason": f"{why}: changed"})
            continue
        for f in found:
            if f["statement"] == last["statement"]:
                ops.append({"op": "add", "file": "MEMORY.md", "section": "Facts", "old": "",
                            "new": new, "reason": f"archive:{_newest(f)}: stated"})
    return {"ops": ops}


def respond(params: dict):
    """The reply to one analyst or editor request (the fake's default_reply)."""
    content = params["messages"][0]["content"]
    memory, tail = _memory(content[0]["text"]), content[-1]["text"]
    if tail.startswith("Phase 1, analyst"):
        return json_reply(analyst(memory, tail))
    return json_reply(editor(memory, tail))
