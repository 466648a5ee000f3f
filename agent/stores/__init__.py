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
