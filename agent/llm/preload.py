"""Import the model SDK in the background while the command does its other work.

`import anthropic` costs over a second of CPU on a slow machine, and `agent chat` needs it
only when the request leaves. `preload()` starts that import in a daemon thread at once;
the first `import anthropic` elsewhere waits for it to finish (Python's import lock), so
the import overlaps with reading the vault and building the prompt, and in the REPL with
the person's typing. Commands that need no model never call it.
"""

from __future__ import annotations

import sys
import threading

_started = False


def _load(name: str) -> None:
    try:
        __import__(name)
    except BaseException:  # noqa: BLE001, S110 - the import in the foreground raises it again, and says so
        pass


def preload(name: str = "anthropic") -> None:
    """Start importing `name` in a background thread (once; no-op if already imported)."""
    global _started
    if _started or name in sys.modules:
        return
    _started = True
    threading.Thread(target=_load, args=(name,), name=f"preload-{name}", daemon=True).start()
