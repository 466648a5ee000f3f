"""The merge drivers git runs for the vault's own formats during a sync.

`.gitattributes` names a driver per path (`MEMORY.md merge=agent-facts`); the vault's
git config says how to run it (`python -m agent.sync.mergedriver facts %O %A %B %P`),
and `agent sync` passes the same settings on its own git calls. git hands the driver
three temporary files (base, ours, theirs); the merged result replaces "ours". Exit 0
is a clean merge; exit 1 leaves the path to the sync's fallback, which keeps both
versions (never git's conflict markers).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# What shlex.quote leaves unquoted (its _find_unsafe: ASCII \w and these).
_BARE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def git_config() -> list[tuple[str, str]]:
    """The `merge.<driver>.*` settings that make git run these drivers, one per merge
    rule of the formats (agent.stores.kinds.DRIVERS)."""
    from agent.stores.kinds import DRIVERS

    exe = sys.executable
    if not exe or set(exe) - _BARE:     # else shlex.quote leaves it as it is (unloaded)
        import shlex
        exe = shlex.quote(exe)
    out = []
    for name, what in DRIVERS.items():
        kind = name.removeprefix("agent-")
        out.append((f"merge.{name}.name", f"agent: {what}"))
        out.append((f"merge.{name}.driver", f"{exe} -m agent.sync.mergedriver {kind} %O %A %B %P"))
    return out


def merge_bytes(kind: str, base: bytes, ours: bytes, theirs: bytes, path: str) -> bytes | None:
    from agent.stores import merge    # here: a sync reads this module's settings only
    if kind == "lines":
        merged = merge.merge_appended(base, ours, theirs, jsonl=path.endswith(".jsonl"))
        return merged if merged is not None else merge.merge_union_lines(base, ours, theirs)
    if kind == "facts":
        return merge.merge_facts(base, ours, theirs)
    if kind == "cron":
        return merge.merge_cron(base, ours, theirs)
    if kind == "set":
        return merge.merge_set(base, ours, theirs)
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print("usage: python -m agent.sync.mergedriver KIND BASE OURS THEIRS PATH", file=sys.stderr)
        return 2
    kind, base, ours, theirs, path = argv
    try:
        data = [Path(p).read_bytes() for p in (base, ours, theirs)]
    except OSError as e:
        print(f"agent merge driver: {path}: {e}", file=sys.stderr)
        return 1
    merged = merge_bytes(kind, *data, path)
    if merged is None:
        return 1
    tmp = f"{ours}.agent-merge"
    with open(tmp, "wb") as f:
        f.write(merged)
    os.replace(tmp, ours)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
