"""JSON from files the agent did not write (an export, a synced transcript or cron.json,
a manifest, a model's tool arguments) read within bounds: nested at most `MAX_DEPTH`
levels, and, streamed, at most so many bytes and values per element.

    data = boundedjson.loads(text)                 # ValueError (TooDeep) past the depth
    reader = boundedjson.Reader(f, max_item_bytes=64 << 20)
    for obj in ijson.items(reader, "item"):        # each element of a huge array
        reader.took_item()                         # ... the element's budget starts again

Why: a parser given `[[[[...` a hundred thousand levels deep either recurses until
Python's stack runs out (json: RecursionError, a traceback) or, streamed (ijson), builds
a prefix string per level per event: memory grows with the square of the depth (80,000
levels of a 363-byte zip took 15.7 GB). A real export nests under 20 levels, our own
files under 10, so anything past `MAX_DEPTH` is refused before a parser sees it.

The depth is counted by `Scanner`, which reads bytes as they arrive and knows only
strings (skipped, escapes included, even when split between two reads) and brackets, in
C-speed regex and bytes operations per read: the streamed parse keeps ijson's C speed.
"""

from __future__ import annotations

import json
from itertools import accumulate
from typing import IO, Any

MAX_DEPTH = 100                 # levels of arrays and objects; a real export has under 20

_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b"[]{},")
_SLICE = 1 << 20
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class TooDeep(ValueError):
    """JSON nested past the bound (a ValueError, so callers that refuse bad JSON refuse
    it too)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"nested more than {limit} levels deep (no real file is; a "
                         f"hostile one, to exhaust memory)")
        self.limit = limit


class TooBig(ValueError):
    """One element of a streamed array past its budget of bytes or values."""


class Scanner:
    """The nesting depth of JSON read a piece at a time; TooDeep as soon as a piece
    goes past `max_depth`. Counts values too (commas and opened containers), for a
    budget of values per element."""

    def __init__(self, max_depth: int = MAX_DEPTH) -> None:
        self.max_depth = max_depth
        self.depth = 0
        self.values = 0             # commas and opened containers seen
        self._in_string = False
        self._escaped = False       # the last piece ended inside a string on a backslash

    def feed(self, piece: bytes) -> None:
        """Count `piece`, the next bytes of the document."""
        if self._escaped:                   # the last piece ended on a lone backslash
            piece, self._escaped = piece[1:], False
        # Escapes out first (`\\` pairs, then an escaped quote), so every quote left
        # opens or closes a string; all of it in bytes operations, at memchr speed.
        if b"\\" in piece:
            piece = piece.replace(b"\\\\", b"")
            if piece.endswith(b"\\"):         # its escaped character is in the next piece
                piece, self._escaped = piece[:-1], True
            piece = piece.replace(b'\\"', b"")
        runs = piece.split(b'"')
        outside = runs[1::2] if self._in_string else runs[0::2]
        if len(runs) % 2 == 0:              # an odd number of quotes: the state flips
            self._in_string = not self._in_string
        marks = b"".join(outside).translate(None, _NOT_STRUCTURE)
        commas = marks.count(b",")
        if commas:
            marks = marks.replace(b",", b"")
        opens = marks.count(b"[") + marks.count(b"{")
        self.values += commas + opens
        if self.depth + opens > self.max_depth and self._deepest(marks) > self.max_depth:
            raise TooDeep(self.max_depth)
        self.depth += 2 * opens - len(marks)

    def _deepest(self, marks: bytes) -> int:
        """The deepest level `marks` (brackets only) reach, or a bound above it: a pass
        takes out the empty pairs, at most two levels (`[]`, then a `{}` that held
        one), so after k passes what is left reaches at most 2k above its own opens;
        only when that bound is past the limit is every bracket walked."""
        passes, rest = 0, marks
        while passes <= self.max_depth:
            shorter = rest.replace(b"[]", b"").replace(b"{}", b"")
            if len(shorter) == len(rest):
                break
            rest, passes = shorter, passes + 1
        bound = self.depth + rest.count(b"[") + rest.count(b"{") + 2 * passes
        if bound <= self.max_depth:
            return bound
        return max(accumulate(map(_STEP.__getitem__, marks), initial=self.depth))


def check(data: bytes | str, max_depth: int = MAX_DEPTH, max_values: int | None = None
          ) -> None:
    """TooDeep when the JSON text `data` nests past `max_depth`, TooBig when it holds
    more than `max_values` values (arrays, objects and the items between commas).
    Cheap when it opens fewer brackets than `max_depth` and no values bound is asked."""
    if isinstance(data, str):
        opens = data.count("[") + data.count("{")
    else:
        opens = data.count(b"[") + data.count(b"{")
    if max_values is None and opens <= max_depth:
        return
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    scanner = Scanner(max_depth)
    for at in range(0, len(raw), _SLICE):          # a few copies of a slice, not of it all
        scanner.feed(raw[at:at + _SLICE])
        if max_values is not None and scanner.values > max_values:
            raise TooBig(f"holds over {max_values:,} values")


def loads(data: bytes | str, max_depth: int = MAX_DEPTH, max_values: int | None = None,
          **kw: Any) -> Any:
    """json.loads, refusing JSON nested past `max_depth` (TooDeep) or holding more than
    `max_values` values (TooBig); both are ValueErrors, as bad JSON is."""
    check(data, max_depth, max_values)
    try:
        return json.loads(data, **kw)
    except RecursionError:
        raise TooDeep(max_depth) from None


class Reader:
    """A binary file given to a streaming parser, each read counted: TooDeep past the
    depth, TooBig when more than `max_item_bytes` bytes or `max_item_values` values are
    read since the last `took_item()` (one element of the array must fit in memory)."""

    def __init__(self, f: IO[bytes], *, max_depth: int = MAX_DEPTH,
                 max_item_bytes: int | None = None,
                 max_item_values: int | None = None) -> None:
        self.f = f
        self.scanner = Scanner(max_depth)
        self.max_item_bytes = max_item_bytes
        self.max_item_values = max_item_values
        self.item_bytes = 0
        self._values_at = 0

    def took_item(self) -> None:
        """The parser gave an element whole: the next one's budget starts now."""
        self.item_bytes = 0
        self._values_at = self.scanner.values

    def read(self, size: int = -1) -> bytes:
        piece = self.f.read(size)
        if not piece:
            return piece
        self.scanner.feed(piece)
        self.item_bytes += len(piece)
        if self.max_item_bytes is not None and self.item_bytes > self.max_item_bytes:
            raise TooBig(f"is over {self.max_item_bytes // 1024 // 1024} MB of JSON")
        if (self.max_item_values is not None
                and self.scanner.values - self._values_at > self.max_item_values):
            raise TooBig(f"holds over {self.max_item_values:,} values")
        return piece
