"""A turn's reply as the person sees it stream: the text of each model call as it comes,
the text of a later call (after its tools ran) set apart from the one before by a blank
line."""

from __future__ import annotations

from typing import Callable


class Display:
    """The streamed text handed to `on_text` (the terminal, a channel's live message)."""

    def __init__(self, on_text: Callable[[str], None] | None):
        self.on_text = on_text
        self.any = False            # something was shown already, in this turn
        self.newline = True         # what was shown last ended a line

    def show(self, chunk: str, first_of_call: bool) -> None:
        """`chunk` shown; `first_of_call` when it opens a model call's text."""
        if self.on_text is None or not chunk:
            return
        if self.any and first_of_call and not self.newline:
            self.on_text("\n\n")
        self.on_text(chunk)
        self.any = True
        self.newline = chunk.endswith("\n")
