"""The vault's file formats, one module each: typed records in and out, no git, no model."""

CRON_FILE = "cron.json"     # agent.stores.cronfile.CRON_FILE, named here without loading it


def _cron_problem(root) -> str | None:
    # The cron store (and the schedules it parses) loads only when cron.json was edited
    # by hand: a command with nothing of the kind to commit (a sync) does not pay for it.
    from agent.stores import cronfile

    return cronfile.hand_edit_problem(root)


def hand_edit_checks() -> dict:
    """The checks a hand edit must pass before it is committed, by file (for Vault.open):
    a cron.json that does not parse is left uncommitted, and said so."""
    return {CRON_FILE: _cron_problem}


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
