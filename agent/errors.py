"""The one base class of errors a user can fix: the CLI shows their message, no traceback."""


class UserError(Exception):
    """A problem with the user's input or files; the message names it and the fix."""

    exit_code = 1
