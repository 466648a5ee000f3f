"""Reading a vault file safely: the one rule every read of the vault goes through.

A vault is a folder a person edits and a sync may fill, so a file in it can be anything:
a symlink to `/proc/self/environ` or `/etc/passwd`, a FIFO that blocks a reader
forever, a device, a 200 MB log, bytes that are not UTF-8. `read_bytes` and
`read_text` are the only way the agent reads a vault file; they refuse, with a message
naming the file:

- a path that resolves outside the vault (symlinks leading out, `..`), or into `.git/`;
- anything that is not a regular file (FIFOs, sockets, devices): opened non-blocking
  and checked with fstat on the open descriptor, so a swap after the check is caught;
- a file over the size limit (`limit`, default MAX_BYTES), without reading it.

Decoding is the caller's choice, always naming the file and line of a bad byte:
`errors="strict"` refuses (for a file the agent is about to rewrite), `"replace"`
shows U+FFFD in its place (for a file the agent only reads); `warnings` collects a
line saying so for the command to print.
"""

from __future__ import annotations

import errno
import os
import stat

from agent.errors import UserError

MAX_BYTES = 4 * 1024 * 1024        # a vault file the agent reads whole (MEMORY.md, a note)
PROMPT_BYTES = 256 * 1024          # a file that goes whole into every prompt
COMMIT_BYTES = 50 * 1024 * 1024    # a hand-added file the agent commits on its own


class UnsafeFile(UserError):
    """A vault file the agent will not read; the message names it and why."""


class BadBytes(UserError):
    """A vault file that is not UTF-8 text where the agent needs it to be."""


def _real_root(root: str | os.PathLike[str]) -> str:
    return str(os.path.realpath(root))


def inside(root: str | os.PathLike[str], rel: str) -> str:
    """The real path of `rel` in the vault `root`, or UnsafeFile when it leads outside."""
    base = _real_root(root)
    real = os.path.realpath(os.path.join(base, rel))
    if real != base and not real.startswith(base + os.sep):
        raise UnsafeFile(f"{rel} leads outside the vault (to {real}); the agent does not "
                         f"read it. Replace the link with a file.")
    inner = os.path.relpath(real, base).replace(os.sep, "/")
    if inner == ".git" or inner.startswith(".git/"):
        raise UnsafeFile(f"{rel} leads into .git/; the agent does not read it as a vault file.")
    return real


def open_file(root: str | os.PathLike[str], rel: str, limit: int | None = MAX_BYTES) -> tuple[int, int]:
    """An open read-only descriptor on the regular file `rel` and its size.

    FileNotFoundError when it does not exist; UnsafeFile for everything refused.
    """
    real = inside(root, rel)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0))
    except IsADirectoryError:
        raise UnsafeFile(f"{rel} is a folder, not a file.") from None
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, "no such file in the vault", rel) from None
        if e.errno == errno.ELOOP:
            raise UnsafeFile(f"{rel} changed into a link while being read; run again.") from None
        if e.errno in (errno.ENXIO, errno.EACCES, errno.EPERM):
            raise UnsafeFile(f"{rel} cannot be read ({e.strerror}).") from None
        raise UnsafeFile(f"{rel} cannot be read ({e.strerror or e}).") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UnsafeFile(f"{rel} is a folder, not a file.")
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "a device")
            raise UnsafeFile(f"{rel} is {kind}, not a regular file; the agent does not read it.")
        if limit is not None and st.st_size > limit:
            raise UnsafeFile(f"{rel} is {_size(st.st_size)}, over the {_size(limit)} limit for "
                             f"this file; the agent does not read it whole. Move the bulk "
                             f"of it to another file.")
        # Reads of a regular file never block; clear O_NONBLOCK for plain semantics.
        os.set_blocking(fd, True)
        return fd, st.st_size
    except BaseException:  # any: the descriptor is closed, then the error raised again
        os.close(fd)
        raise


def read_bytes(root: str | os.PathLike[str], rel: str, limit: int | None = MAX_BYTES) -> bytes | None:
    """The bytes of vault file `rel` (None when missing); UnsafeFile when refused."""
    try:
        fd, size = open_file(root, rel, limit)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:   # it grew while being read
        raise UnsafeFile(f"{rel} is over the {_size(limit)} limit for this file.")
    return data


def decode(data: bytes, rel: str, errors: str = "strict",
           warnings: list[str] | None = None) -> str:
    """`data` as UTF-8 text; a bad byte is refused or replaced, naming its line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        where = f"{rel} line {line}: byte 0x{data[e.start]:02x} is not UTF-8"
        if errors == "strict":
            raise BadBytes(f"{where}; save the file as UTF-8 and run again.") from None
        if warnings is not None:
            warnings.append(f"{where} (shown as \ufffd; save the file as UTF-8 to fix)")
        return data.decode("utf-8", errors="replace")


def read_text(root: str | os.PathLike[str], rel: str, *, limit: int | None = MAX_BYTES, errors: str = "strict",
              warnings: list[str] | None = None) -> str | None:
    """The text of vault file `rel` (None when missing); see the module doc."""
    data = read_bytes(root, rel, limit)
    return None if data is None else decode(data, rel, errors, warnings)


def read_given(path: str | os.PathLike[str], limit: int) -> bytes:
    """A file a person names on the command line (it may be outside the vault): only a
    regular file within `limit` is read (not /dev/zero, a FIFO or a folder)."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise UnsafeFile(f"{name}: no such file.") from None
    except IsADirectoryError:
        raise UnsafeFile(f"{name} is a folder; give a file.") from None
    except OSError as e:
        raise UnsafeFile(f"{name} cannot be read ({e.strerror or e}).") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{name} is not a regular file (a device, FIFO or socket); "
                             f"give a file.")
        if st.st_size > limit:
            raise UnsafeFile(f"{name} is {_size(st.st_size)}, over the {_size(limit)} limit.")
        os.set_blocking(fd, True)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(f"{name} is over the {_size(limit)} limit.")
    return data


def _size(count: int) -> str:
    n = float(count)
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{count} {unit}" if unit == "bytes" else f"{n:.0f} {unit}" if n >= 10 else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"
