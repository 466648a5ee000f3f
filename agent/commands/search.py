"""Commands of the search family (filled in by its issue)."""

COMMANDS = []
