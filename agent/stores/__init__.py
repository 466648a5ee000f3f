"""The vault's file formats, one module each: typed records in and out, no git, no model."""


def hand_edit_checks() -> dict:
    """The checks a hand edit must pass before it is committed, by file (for Vault.open):
    a cron.json that does not parse is left uncommitted, and said so."""
    from agent.stores import cron

    return {cron.CRON_FILE: cron.hand_edit_problem}
