"""The search index (placeholder until the search issue lands)."""


def refresh(vault) -> None:
    return None
