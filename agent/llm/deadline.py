"""A streamed reply stopped at a moment, even while the server sends nothing.

A turn's time limit was checked on each piece of text that arrived; a server that
streams nothing for a while (llama-server holds a tool call back until it has parsed it,
and a small model that never closes the call holds it back to max_tokens) kept the turn
past its limit for as long as it liked. At `Request.deadline` the connection is shut
down under the reader: the blocked read returns, the server sees the client gone and
stops writing, and the provider returns what had arrived, as when `on_text` raises Stop.

    with Closer(request.deadline, stream.response) as closer:
        for chunk in stream: ...
    # on a connection error: closer.fired says whether it was the deadline's doing
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any


class Closer:
    """Shuts `response`'s connection at the monotonic time `deadline` (None: never)."""

    def __init__(self, deadline: float | None, response: Any) -> None:
        self.deadline = deadline
        self.response = response
        self.fired = threading.Event()
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "Closer":
        if self.deadline is not None:
            self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._fire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _fire(self) -> None:
        self.fired.set()
        extensions = getattr(self.response, "extensions", None) or {}
        stream = extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            # shutdown, not close: a close from another thread leaves the read blocked
            # and the server unaware; a shutdown wakes the read and sends the FIN.
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:         # already closed: the reply ended meanwhile
                pass
        else:
            self.response.close()


def http_errors() -> tuple[type[BaseException], ...]:
    """The errors a read raises on a connection shut under it: httpx's, and httpx2's
    (which the openai and anthropic SDKs use from their 3.x and 2.x)."""
    import httpx

    kinds: list[type[BaseException]] = [httpx.HTTPError]
    try:
        import httpx2  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        pass
    else:
        kinds.append(httpx2.HTTPError)
    return tuple(kinds)
