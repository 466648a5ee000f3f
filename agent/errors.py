"""The one base class of errors a user can fix: the CLI shows their message, no traceback."""


class UserError(Exception):
    """A problem with the user's input or files; the message names it and the fix."""

    exit_code = 1


def did_you_mean(word: str, choices, cutoff: float = 0.75) -> str:
    """" Did you mean X?" for the choice closest to a mistyped `word`, else ""."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return f" Did you mean {close[0]}?" if close else ""
