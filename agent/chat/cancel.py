"""Stopping a turn and every sub-agent it started: `Cancel`, a flag with children.

Every turn has a `Cancel` (a child of the process-wide ROOT, which `agent serve` sets
on SIGTERM); a sub-agent run's is a child of the turn that started it. Setting one sets
its whole subtree at once. A run marks its Cancel `finished` when it has saved, so the
turn that was stopped can wait, bounded, for its runs to have saved (`settle`).
"""

from __future__ import annotations

import threading
import time


class Cancelled(KeyboardInterrupt):
    """The turn was cancelled (Ctrl-C, SIGTERM, /stop): handled where Ctrl-C is."""


class Cancel:
    """A cancellation flag with children: set() sets the whole subtree."""

    def __init__(self, parent: "Cancel | None" = None, *, track: bool = False):
        self.event = threading.Event()
        self.finished = threading.Event()    # set by the owner once its work is saved
        self.track = track                   # settle() waits for it (a sub-agent run)
        self._children: list[Cancel] = []
        self._lock = threading.Lock()
        if parent is not None:
            parent._adopt(self)

    def _adopt(self, child: "Cancel") -> None:
        with self._lock:
            self._children.append(child)
            now_set = self.event.is_set()
        if now_set:
            child.set()

    def child(self, *, track: bool = False) -> "Cancel":
        return Cancel(self, track=track)

    def set(self) -> None:
        self.event.set()
        with self._lock:
            children = list(self._children)
        for c in children:
            c.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def check(self) -> None:
        if self.event.is_set():
            raise Cancelled()

    def descendants(self) -> list["Cancel"]:
        with self._lock:
            children = list(self._children)
        out = []
        for c in children:
            out.append(c)
            out.extend(c.descendants())
        return out

    def settle(self, timeout: float = 3.0) -> bool:
        """Wait (at most `timeout` s) until every tracked descendant has finished."""
        deadline = time.monotonic() + timeout
        for c in self.descendants():
            if c.track and not c.finished.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True


ROOT = Cancel()


def new_turn_cancel() -> Cancel:
    return ROOT.child()


def cancellable(cancel: Cancel, fn, *args, **kwargs):
    """fn(*args, **kwargs), but returning at once (raising Cancelled) when `cancel` is set.

    Off the main thread (a sub-agent), the call runs in a helper thread and is abandoned
    on cancel (a blocked HTTP read cannot be interrupted; its answer is dropped). On the
    main thread it runs as it is: Ctrl-C interrupts it there.
    """
    if threading.current_thread() is threading.main_thread():
        cancel.check()
        return fn(*args, **kwargs)
    cancel.check()
    box: dict = {}
    done = threading.Event()

    def work():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the caller below, whatever it is
            box["error"] = e
        finally:
            done.set()
    threading.Thread(target=work, daemon=True, name="model-call").start()
    while not done.wait(0.02):
        cancel.check()
    if "error" in box:
        raise box["error"]
    return box["value"]
