"""`agent --help` by topic, as gh lists its commands, and the examples each command's
own `--help` ends with: one table here, so a command's module need not know of either."""

from __future__ import annotations

# Topic -> commands, in the order a newcomer meets them. A command missing from every
# topic is listed under "Other commands", so a new command is never hidden.
TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Talk with the agent", ("chat", "sessions", "web", "agents", "archive")),
    ("Memory", ("note", "search", "dream", "review", "why", "log", "show", "restore",
                "undo", "edit", "forget", "import", "stats")),
    ("Schedules and reach", ("serve", "cron", "heartbeat", "skills", "mcp")),
    ("The vault and its settings", ("init", "path", "status", "doctor", "config", "models",
                                    "keys", "sync", "clone", "git", "index", "completion")),
)

EXAMPLES: dict[str, tuple[str, ...]] = {
    "chat": ('agent chat', 'agent chat -m "I always want a window seat on trains"',
             'agent chat -c                      # resume the last conversation'),
    "sessions": ('agent sessions', 'agent sessions --json'),
    "web": ('agent web                          # needs [gateway] port and agent serve',),
    "agents": ('agent agents',),
    "archive": ('agent archive                      # every conversation, now',),
    "note": ('agent note "Dentist moved to Thursday 10:30"',
             'echo "Idea: a shed for the bikes" | agent note'),
    "search": ('agent search kyoto', 'agent search "window seat" --json',
               'agent search trip --since 2026-11-01'),
    "dream": ('agent dream --status', 'agent dream'),
    "review": ('agent review', 'agent review accept 1', 'agent review reject 2 --because "moved"'),
    "why": ('agent why Lisbon', 'agent why --history Lisbon', 'agent why --last'),
    "log": ('agent log', 'agent log --since "last week" USER.md'),
    "show": ('agent show MEMORY.md --as-of 2026-11-01',),
    "restore": ('agent restore "Lives in Lisbon"',),
    "undo": ('agent undo', 'agent undo 3f9c2a1'),
    "edit": ('agent edit', 'agent edit USER.md'),
    "forget": ('agent forget "my old phone number 555-0100"',),
    "import": ('agent import ~/Downloads/chatgpt-export.zip', 'agent import transcript.jsonl'),
    "stats": ('agent stats', 'agent stats --since 2026-11-01 --json'),
    "serve": ('agent serve',),
    "cron": ('agent cron add plants --message "water the plants" --every 2d',
             'agent cron list'),
    "heartbeat": ('agent heartbeat list',),
    "skills": ('agent skills list',),
    "mcp": ('claude mcp add memory -- agent mcp',),
    "init": ('agent init', 'agent init ~/notes                  # adopt a folder of notes'),
    "path": ('cd "$(agent path)"',),
    "status": ('agent status', 'agent status --json'),
    "doctor": ('agent doctor',),
    "config": ('agent config list', 'agent config set model.name openai/gpt-5-mini',
               'agent config check'),
    "models": ('agent models',),
    "keys": ('agent keys', 'agent keys approve OPENROUTER_API_KEY https://openrouter.ai'),
    "sync": ('agent sync', 'agent sync held', 'agent sync accept agent.toml'),
    "clone": ('agent clone git@example.org:me/vault.git ~/vault',),
    "git": ('agent git log --oneline', 'agent git log -p MEMORY.md'),
    "index": ('agent index rebuild',),
    "completion": ('eval "$(agent completion bash)"',),
}


def epilog(name: str) -> str | None:
    """The examples block of `agent NAME --help` (click keeps lines after a \\b)."""
    lines = EXAMPLES.get(name)
    if not lines:
        return None
    return "\b\nExamples:\n" + "\n".join(f"  $ {line}" for line in lines)


def grouped(names: list[str]) -> list[tuple[str, list[str]]]:
    """The commands in `names` under their topics, then any the table does not name."""
    seen: set[str] = set()
    out = []
    for title, members in TOPICS:
        present = [n for n in members if n in names]
        seen.update(present)
        if present:
            out.append((title, present))
    rest = sorted(n for n in names if n not in seen)
    if rest:
        out.append(("Other commands", rest))
    return out
