"""A file's signature: its mtime, size and inode, from one stat and no read, so that a
reader notices the file changed (a hand edit, another process's write) cheaply."""

from __future__ import annotations

import os
from pathlib import Path


def signature(path: str | Path) -> tuple[int, int, int] | None:
    """(mtime in ns, size, inode) of `path`; None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)
