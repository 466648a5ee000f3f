"""Commands of the chat family (filled in by its issue)."""

COMMANDS = []
