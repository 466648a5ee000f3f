"""A turn saved: its staged writes applied, its transcript lines appended and one commit,
under the vault lock, with Ctrl-C held until the save is done; a turn that cannot be
committed is still written and journalled (NotCommitted says so), never dropped."""

from __future__ import annotations

import dataclasses
import signal
import threading
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

from agent.errors import UserError
from agent.stores import sessions
from agent.vault.change import Change
from agent.vault.staged import StagedVault

if TYPE_CHECKING:
    from agent.vault.repo import Vault


class _HeldSigint:
    """Ctrl-C waits while the turn is being written (milliseconds, or as long as another
    process holds the vault lock), then takes effect: the handler that was in place runs
    (a KeyboardInterrupt in the terminal; `agent serve` stops as on SIGINT)."""

    def __init__(self) -> None:
        self.got: list[tuple[int, FrameType | None]] = []
        self.previous: Any = None
        self.holding = False

    def __enter__(self) -> "_HeldSigint":
        if threading.current_thread() is threading.main_thread():
            try:
                self.previous = signal.signal(signal.SIGINT,
                                              lambda *a: self.got.append(a))
                self.holding = True
            except ValueError:      # a main thread without signals (an embedding host)
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        if self.holding:
            signal.signal(signal.SIGINT, self.previous)
            self.holding = False

    def deliver(self) -> None:
        """The Ctrl-C held meanwhile, given to the handler it was meant for."""
        if not self.got:
            return
        signum, frame = self.got[0]
        self.got.clear()
        if callable(self.previous):
            self.previous(signum, frame)
        elif self.previous == signal.SIG_DFL:
            signal.raise_signal(signum)


class SavedThenInterrupted(KeyboardInterrupt):
    """Ctrl-C came while the turn was being saved: it is saved (commit `sha`), then stopped."""

    def __init__(self, sha: str | None):
        super().__init__()
        self.sha = sha


class NotCommitted(Exception):
    """The turn is written to its files (journalled for the next command to commit) but
    its commit could not be made; or, said so, it could not even be written."""


def persist(vault: Vault, staged: StagedVault | None, session: str, now: datetime,
            lines: list[sessions.Line],
            change: Change, before_commit: Callable[[], None] | None = None) -> str | None:
    """Apply the turn's staged changes, append its lines and commit, under the vault lock.

    `before_commit()` runs under the lock just before the commit: what it writes through
    the vault lands in the same commit. When the vault cannot commit (its repair fails:
    an unfinished merge, a sync's checkout git refuses; or the commit itself fails), the
    turn is still written and journalled, so the next command that can commits it as
    this turn, and NotCommitted says so: an answered turn is never dropped.
    """
    from agent.search import index

    rel = sessions.month_file(session, now)
    done = {"lines": False}

    def write(change: Change) -> Change:
        change = _renumber(vault, session, lines, change)
        # The commit this will be, journalled first: a kill before it lands leaves a
        # `recover` commit that tells the turn (and undo takes back); the transcript
        # goes in before the memory files, so a fact never lands without it.
        vault.intend(change)
        if lines:
            kept = vault.append_lines(rel, [line.dumps() for line in lines])
            if staged is not None:
                staged.removed.extend(kept)
        done["lines"] = True
        if staged is not None:
            staged.apply()
        if before_commit is not None:
            before_commit()
        return change

    held = _HeldSigint()
    try:
        with held:
            sha = _save(vault, rel, change, write, done)
            index.refresh(vault, after_commit=True)
    except BaseException:  # any: the held signal is delivered, then the failure raised again
        held.deliver()      # a Ctrl-C pressed meanwhile: it wins over the failure
        raise
    try:
        held.deliver()
    except KeyboardInterrupt:
        raise SavedThenInterrupted(sha) from None
    return sha


def _save(vault: Vault, rel: str, change: Change, write: Callable[[Change], Change],
          done: dict[str, bool]) -> str | None:
    """The turn written and committed under the lock, or NotCommitted (see persist)."""
    try:
        with vault.locked():
            return vault.commit(write(change))
    except UserError as e:
        if not done["lines"]:
            try:
                with vault.locked(repair=False):
                    write(change)
            except (UserError, OSError) as again:
                raise NotCommitted(f"This turn could not be saved: {again} (and: {e})") \
                    from None
        # The error's own advice is for a command that wrote nothing; this one did.
        why = str(e).replace("; then run the command again", "").replace(
            " Nothing was changed.", "")
        raise NotCommitted(f"This turn is saved in {rel} but not committed; the next "
                           f"command commits it once this is fixed: {why}") from None


def _renumber(vault: Vault, session: str, lines: list[sessions.Line], change: Change) -> Change:
    """Give the turn the next free number as the session is now, under the lock.

    The number was taken when the prompt was built, before the model call; a concurrent
    turn on the same session may have saved that number meanwhile.
    """
    if not lines or lines[0].turn is None:
        return change
    last = sessions.Session(vault.root, session).last_turn()
    if last < lines[0].turn:
        return change
    turn = last + 1
    for line in lines:
        line.turn = turn
        if isinstance(line.id, str) and "." in line.id:
            line.id = f"{turn}.{line.id.split('.', 1)[1]}"
    if "Turn" in change.trailers:
        change = dataclasses.replace(change, trailers={**change.trailers, "Turn": str(turn)})
    return change
