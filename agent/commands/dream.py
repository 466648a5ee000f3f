"""Commands of the dream family (filled in by its issue)."""

COMMANDS = []
