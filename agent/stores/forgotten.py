"""The `.forgotten` file: the tombstones of `agent forget`, one per forgotten phrase,
that carry a history rewrite to every other clone; never the phrase itself.

    {"version": 1, "forgotten": [
      {"id": "f-…", "at": "…", "salt": "…", "hash": pbkdf2(salt, phrase), "length": 23,
       "rewrote": {"<old commit>": "<new commit>", …}}]}

The hash is PBKDF2 (`ITERATIONS` rounds), so that trying guesses against a tombstone
costs what a password hash costs; a short phrase (a 4-digit PIN) can still be guessed:
`agent forget` says so. How another clone finds the phrase from its own copy of the
commits `rewrote` names is agent.vault.rewrite.recover; which tombstones this machine
applies is agent.sync.tombstones'; the rewrite itself agent.vault.rewrite's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.fs import boundedjson

FILE = ".forgotten"
ITERATIONS = 20_000


@dataclass
class Tombstone:
    id: str
    at: str
    salt: str
    hash: str
    length: int
    rewrote: dict[str, str] = field(default_factory=dict)

    def matches(self, text: str) -> bool:
        return len(text) == self.length and digest(self.salt, text) == self.hash

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "at": self.at, "salt": self.salt, "hash": self.hash,
                "length": self.length, "rewrote": self.rewrote}

    @classmethod
    def from_dict(cls, it: Any) -> Tombstone:
        """A tombstone from its JSON (KeyError, TypeError or ValueError if malformed)."""
        return cls(str(it["id"]), str(it["at"]), str(it["salt"]), str(it["hash"]),
                   int(it["length"]),
                   {str(k): str(v) for k, v in dict(it.get("rewrote") or {}).items()})


def digest(salt: str, text: str) -> str:
    import hashlib       # here: a sync with no tombstones to test need not load OpenSSL
    return hashlib.pbkdf2_hmac("sha256", text.encode("utf-8"), bytes.fromhex(salt),
                               ITERATIONS).hex()


def new_tombstone(text: str, at: str, rewrote: dict[str, str]) -> Tombstone:
    import secrets
    salt = secrets.token_hex(16)
    return Tombstone(f"f-{secrets.token_hex(6)}", at, salt, digest(salt, text), len(text),
                     rewrote)


def parse(data: str | None) -> list[Tombstone]:
    """The tombstones of a `.forgotten` file's text (malformed entries are skipped)."""
    if not data:
        return []
    try:
        doc = boundedjson.loads(data)
    except ValueError:
        return []
    items = doc.get("forgotten", []) if isinstance(doc, dict) else []
    out = []
    for it in items if isinstance(items, list) else []:
        try:
            out.append(Tombstone.from_dict(it))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def dumps(stones: list[Tombstone]) -> str:
    return json.dumps({"version": 1, "forgotten": [s.as_dict() for s in stones]},
                      indent=1) + "\n"
