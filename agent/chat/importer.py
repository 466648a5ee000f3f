"""Importing a transcript into the vault: the code `agent import` runs, reusable by scripts."""

from __future__ import annotations

from pathlib import Path

from agent.chat.compact import mark_backlog
from agent.config import load_settings
from agent.stores import sessions, transcripts
from agent.vault.change import Change
from agent.vault.repo import Vault


def import_file(vault: Vault, path: Path) -> tuple[int, int, str | None]:
    """Append a transcript's new messages and commit them: (added, sessions, commit sha).

    The file is JSONL (`session`, `role`, `content`, `ts`, optional `id` and `speaker`);
    messages whose id a session already has are left out, so importing twice adds
    nothing (then the result is (0, 0, None)). A malformed file raises SessionError
    naming every bad line, and nothing is written.
    """
    path = Path(path)
    records = transcripts.parse_import(path)
    with vault.locked():
        plan = transcripts.plan_import(vault.root, records)
        added = sum(len(lines) for lines in plan.values())
        if not added:
            return 0, 0, None
        before: dict[str, dict[str, int]] = {}
        for rel in plan:
            dest = vault.root / rel
            before.setdefault(sessions.key_of(rel), {})[rel] = (
                dest.stat().st_size if dest.exists() else 0)
        for rel, lines in plan.items():
            vault.append_lines(rel, lines)
        # History beyond the window waits to be archived in chunks: the next turn sends
        # only the window (agent.chat.compact.mark_backlog).
        settings = load_settings(vault.root)
        for key, appended in before.items():
            mark_backlog(vault, key, settings, appended)
        keys = {rel.rsplit("/", 1)[0] for rel in plan}
        sha = vault.commit(Change("import", f"add {added} message{'s' * (added != 1)} to "
                                  f"{len(keys)} session{'s' * (len(keys) != 1)} from {path.name}"))
    return added, len(keys), sha
