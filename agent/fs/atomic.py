"""Atomic writes: a temporary file beside the target, fsync, then os.replace.

A reader sees the old bytes or the new ones, never half of each. The vault's own
writes (`Vault.write_text`) and the derived state files in `.agent/` (serve's and the
heartbeats' schedules, the dream's record of a run) all go through here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any


# The name of a temporary file `write_text` makes: `.NAME.PID.tmp` beside NAME.
TEMPORARY = re.compile(r"(?:^|/)\.[^/]+\.\d+\.tmp$")


def is_temporary(rel: str) -> bool:
    """Whether a vault path is a temporary file of an atomic write (a process that was
    killed halfway leaves one): never a person's file, never committed."""
    return TEMPORARY.search(rel) is not None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: Path, text: str, *, sync_dir: bool = False, mode: int | None = None,
               durable: bool = True) -> None:
    """Replace `path` with `text` (bytes as given: no newline translation); `mode` sets
    the file's permissions before a byte is written (0o600 for a secret). `durable=False`
    skips the fsync, for a record whose loss or tearing in a crash costs nothing (its
    reader takes a torn file as none): a reader still sees old or new, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if mode is not None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        os.fchmod(fd, mode)
        opened = os.fdopen(fd, "w", encoding="utf-8", newline="")
    else:
        opened = open(tmp, "w", encoding="utf-8", newline="")
    try:
        with opened as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # any: the temporary file goes, then the error is raised again
        # Never left behind: in a vault it would look like a file a person added.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    """Replace `path` with `data` as JSON: two-space indents, sorted keys, UTF-8 kept."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
               durable=durable)


def read_json(path: Path, default: Any = None) -> Any:
    """The JSON in `path`, or `default` when it is missing or torn (derived state only)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return default
