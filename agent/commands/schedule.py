"""Commands of the schedule family (filled in by its issue)."""

COMMANDS = []
