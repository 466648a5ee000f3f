"""Operations a person or the model can ask for, one implementation each, which every
front-end (CLI, Telegram, MCP, the gateway) calls and only renders. One module each:
notes (note, remember), handedit, jobs (cron jobs), heartbeats, runs (running a job or
heartbeat now), review (the dream's proposals), forget, undo, search, why, timetravel,
sessions, status (`agent status`), recent (what was noted and learned lately), doctor,
commands (the slash commands of a chat)."""
