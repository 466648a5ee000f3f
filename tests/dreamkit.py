"""Builders shared by the dream tests and scripts/bench_dream.py: archive entries as
compaction writes them, with the session messages they cover."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from agent.vault.change import Change
from agent.stores import archive

T0 = datetime(2026, 11, 20, 14, 0, tzinfo=timezone.utc)

ANALYST_SCHEMA = json.loads("""{"type": "object", "properties": {"findings": {"type": "array", "items": {"type": "object", "properties": {"kind": {"enum": ["new", "update", "contradiction", "stale"], "type": "string"}, "file": {"enum": ["MEMORY.md", "USER.md"], "type": "string"}, "statement": {"type": "string"}, "evidence": {"type": "array", "items": {"type": "string"}}, "date": {"type": "string"}}, "required": ["kind", "file", "statement", "evidence", "date"], "additionalProperties": false}}}, "required": ["findings"], "additionalProperties": false}""")
EDITOR_SCHEMA = json.loads("""{"type": "object", "properties": {"ops": {"type": "array", "items": {"type": "object", "properties": {"op": {"enum": ["add", "update", "delete"], "type": "string"}, "file": {"enum": ["MEMORY.md", "USER.md"], "type": "string"}, "section": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}, "reason": {"type": "string"}}, "required": ["op", "file", "section", "old", "new", "reason"], "additionalProperties": false}}}, "required": ["ops"], "additionalProperties": false}""")


def write_entries(vault, specs, *, start: int | None = None, messages_per_entry: int = 4,
                  commit: bool = True) -> list[int]:
    """Archive entries (and the session lines they cover) for `specs`: each a summary
    string or a dict with `summary` and optionally `session`, `topic`, `message` (every
    message's text) or `messages` (one text each, user and assistant in turn). Returns
    the ids."""
    first = start if start is not None else archive.newest_id(vault.root) + 1
    ids = []
    for n, spec in enumerate(specs):
        spec = {"summary": spec} if isinstance(spec, str) else dict(spec)
        entry_id = first + n
        session = spec.get("session", "cli/default")
        # Small ids (1, 2, ...) as older vaults had; stamped ids (18 digits) as today.
        created = T0 + timedelta(minutes=10 * (entry_id % 100_000))
        rel = f"sessions/{session}/{created:%Y-%m}.jsonl"
        lines = []
        for k in range(messages_per_entry):
            lines.append(json.dumps({
                "id": f"e{entry_id}m{k}", "ts": (created + timedelta(seconds=k)).isoformat(),
                "role": "user" if k % 2 == 0 else "assistant",
                "content": spec["messages"][k] if "messages" in spec else spec.get(
                    "message", f"message {k} of entry {entry_id}: {spec['summary']}"),
                "turn": entry_id}))
        vault.append_lines(rel, lines)
        meta = {"session": session, "created": created.isoformat(),
                "source": {"file": rel, "from": f"e{entry_id}m0",
                           "through": f"e{entry_id}m{messages_per_entry - 1}"},
                "topic": spec.get("topic", f"topic {entry_id}"), "importance": 0.5,
                "tokens": 200}
        vault.write_text(archive.entry_path(entry_id, created),
                         archive.render(entry_id, meta, spec["summary"]))
        ids.append(entry_id)
    if commit:
        vault.commit(Change("compact", f"{len(ids)} archive entries"))
    return ids


def finding(statement: str, *, kind: str = "new", file: str = "MEMORY.md",
            evidence=("archive:1",), date: str = "") -> dict:
    return {"kind": kind, "file": file, "statement": statement, "evidence": list(evidence),
            "date": date}


def op(kind: str, file: str = "MEMORY.md", *, section: str = "", old: str = "", new: str = "",
       reason: str = "because") -> dict:
    return {"op": kind, "file": file, "section": section, "old": old, "new": new,
            "reason": reason}


def set_review(vault, mode: str) -> None:
    """`[dream] review = mode` in the vault's agent.toml, committed as a person's edit."""
    path = vault.root / "agent.toml"
    text = path.read_text()
    if 'review = "' in text:
        import re
        text = re.sub(r'(?m)^review = "[a-z]+"', f'review = "{mode}"', text)
    else:
        text += f'\n[dream]\nreview = "{mode}"\n'
    path.write_text(text)
    vault.git("add", "agent.toml")
    vault.git("commit", "-q", "-m", f"edit: dream review {mode}")
