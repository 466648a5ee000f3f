"""The vault's file formats, one module each: typed records in and out, no git, no model.

What the vault is told about these files when it is opened is `layout` (agent.stores.layout).
"""


def _cursor_problem(text: str) -> str | None:
    from agent.stores import archive

    try:
        archive.Consolidated.parse(text)
    except archive.ArchiveError as e:
        return f"is not a dream cursor the agent reads ({e})"
    return None


def intake_checks() -> dict:
    """The format checks a file a remote sends must pass, by path (agent.sync.incoming):
    one of the agent's own records it cannot read would stop the commands that read it
    on every machine, so it is refused at the door."""
    return {".dream_cursor": _cursor_problem}
