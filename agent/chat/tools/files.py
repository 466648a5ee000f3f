"""File tools: read, write, edit and list files of the vault, never outside it."""

from __future__ import annotations

import os

from agent.chat.tools.registry import ToolError, current_context, tool
from agent.fs.offlimits import OFF_LIMITS, is_off_limits
from agent.stores import holds
from agent.errors import UserError
from agent.stores import ledger
from agent.stores.memory import memory_file, normalise
from agent.vault import heldwrites
from agent.stores import kinds
from agent.vault.repo import CONTROL_FILES

MAX_READ = 60_000          # characters read_file returns before pointing to memory_get


def confine(path: str, *, write: bool = False) -> str:
    """The vault-relative path for `path`, or ToolError when it leads outside the vault.

    Paths are resolved with realpath, so `..` and symlinks pointing out are caught;
    absolute paths, `.git/` and `.agent/` are refused; `sessions/` is written only by
    the agent loop.
    """
    if not isinstance(path, str) or not path.strip():
        raise ToolError("Give a path relative to the vault, for example MEMORY.md.")
    raw = path.strip()
    if "\0" in raw:
        raise ToolError(f"{raw!r}: a path cannot hold a NUL byte; give a path relative to "
                        f"the vault, for example MEMORY.md.")
    if os.path.isabs(raw) or raw.startswith("~"):
        raise ToolError(f"{raw}: absolute paths are refused; give a path relative to the "
                        f"vault, for example memory/2026-11-20.md.")
    root = os.path.realpath(current_context().vault.root)
    real = os.path.realpath(os.path.join(root, raw))
    if real != root and not real.startswith(root + os.sep):
        raise ToolError(f"{raw}: outside the vault; only files inside it can be used "
                        f"(.. and symlinks leading out are refused).")
    rel = os.path.relpath(real, root).replace(os.sep, "/")
    first = rel.split("/", 1)[0]
    if is_off_limits(rel):
        raise ToolError(f"{raw}: {first}/ is off limits (git's and the agent's own state).")
    if write and rel == ".":
        raise ToolError(f"{raw} is the vault folder itself; give a file path.")
    # `Memory.md` is MEMORY.md on a disk that folds case (macOS, Windows): the same file
    # here too, so its writes wait for review as MEMORY.md's do, and no clone gets a twin.
    rel = memory_file(rel) or rel
    if write:
        _writable(raw, rel)
    return rel


def _writable(raw: str, rel: str) -> None:
    """ToolError when the model may not write `rel`: the rule of its kind (agent.stores.kinds),
    and any path another clone's sync would refuse."""
    problem = kinds.path_problem(rel)
    if problem:
        raise ToolError(f"{raw}: {problem}; another machine's sync would refuse it. Choose "
                        f"another name.")
    kind = kinds.kind_of(rel)
    if kind is kinds.RECORD or kind is kinds.FORGOTTEN:
        raise ToolError(f"{raw} is {kind.what}, written only by the commands that keep them; "
                        f"you can read it, not write it.")
    if rel in CONTROL_FILES or kind is kinds.CONTROL:
        raise ToolError(f"{raw} is the person's to change (the vault's settings, identity "
                        f"and git rules); you can read it, not write it. Ask the person.")
    if kind is kinds.CRON:
        # The cron tools say who made a job; a job written here could claim the person.
        raise ToolError(f"{raw}: scheduled jobs are changed with cron_add and cron_remove, "
                        f"not by writing the file.")
    if kind is kinds.SESSION:
        raise ToolError(f"{raw}: session transcripts are written only by the conversation "
                        f"itself; write notes with remember or to another file.")
    if kind.model == "refuse":       # a kind added later: refused until it says otherwise
        raise ToolError(f"{raw} is {kind.what}; you can read it, not write it.")


def _read(rel: str, errors: str = "strict") -> str:
    """The file's text as this turn sees it; strict refuses bad bytes (before a rewrite),
    "replace" shows them as U+FFFD (to read only)."""
    vault = current_context().vault
    full = vault.root / rel
    if full.is_dir():
        raise ToolError(f"{rel} is a folder; use list_dir to see what it holds.")
    try:
        text = vault.current(rel, errors=errors)
    except UserError as e:
        raise ToolError(str(e)) from None
    except FileNotFoundError:
        text = None
    if text is None:
        raise ToolError(f"{rel}: no such file in the vault (list_dir shows what there is).")
    return text


@tool
def read_file(path: str, offset: int = 0, limit: int = 0) -> str:
    """Read a text file of the vault, whole or one page of it.

    Args:
        path: The file's path relative to the vault, e.g. MEMORY.md or memory/2026-11-20.md.
        offset: For a page: the character to start at (0: the start).
        limit: For a page: how many characters to read (at most 60000; 0: the whole file).
    """
    rel = confine(path)
    text = _read(rel, errors="replace")
    if offset or limit:
        offset = max(0, int(offset))
        limit = min(int(limit) if limit and int(limit) > 0 else MAX_READ, MAX_READ)
        page = text[offset:offset + limit]
        left = len(text) - offset - len(page)
        more = (f"\n[... {left:,} more characters; read on with read_file(path={rel!r}, "
                f"offset={offset + len(page)}, limit={limit})]") if left > 0 else ""
        return page + more
    if len(text) > MAX_READ:
        shown = text[:MAX_READ]
        lines = shown.count("\n")
        return (shown + f"\n[... {len(text) - MAX_READ} more characters; read on with "
                f"memory_get(path={rel!r}, start_line={lines + 1})]")
    return text


@tool(writes=True)
def write_file(path: str, content: str) -> str:
    """Create a file of the vault or replace its whole content.

    Prefer edit_file to change part of an existing file.

    Args:
        path: The file's path relative to the vault.
        content: The complete new text of the file.
    """
    rel = confine(path, write=True)
    vault = current_context().vault
    if (vault.root / rel).is_dir():
        raise ToolError(f"{rel} is a folder; give a file path.")
    existed = vault.exists(rel)
    if content and not content.endswith("\n"):
        content += "\n"
    if kinds.kind_of(rel).model == "hold":
        return _hold(rel, content)
    if memory_file(rel) and holds.holds(current_context().settings):
        return _held_for_review(rel, vault.current(rel) or "", content)
    vault.write_text(rel, content)
    return f"{'Replaced' if existed else 'Created'} {rel} ({len(content)} characters)."


def replace_once(text: str | None, old: str, new: str, rel: str) -> str:
    if text is None:
        raise ToolError(f"{rel}: no such file in the vault.")
    count = text.count(old)
    if count == 0:
        raise ToolError(f"{rel}: the text to replace was not found; read the file and "
                        f"quote it exactly (whitespace included).")
    if count > 1:
        raise ToolError(f"{rel}: the text to replace occurs {count} times; quote more of "
                        f"it so that it occurs once.")
    return text.replace(old, new, 1)


@tool(writes=True)
def edit_file(path: str, old: str, new: str) -> str:
    """Replace one exact passage of a vault file, leaving the rest of it as it is.

    Args:
        path: The file's path relative to the vault.
        old: The exact text to replace; it must occur exactly once in the file.
        new: The text to put in its place (empty to delete the passage).
    """
    rel = confine(path, write=True)
    if not old:
        raise ToolError("old must not be empty; to add to a file, quote the line before "
                        "the addition and repeat it in new.")
    text = _read(rel)
    if kinds.kind_of(rel).model == "hold":
        return _hold(rel, replace_once(text, old, new, rel))
    if memory_file(rel) and holds.holds(current_context().settings):
        return _held_for_review(rel, text, replace_once(text, old, new, rel))
    current_context().vault.update(rel, lambda text: replace_once(text, old, new, rel))
    return f"Edited {rel}."


def _held_for_review(rel: str, old: str, new: str) -> str:
    """A write of MEMORY.md or USER.md under `[dream] review = "all"`: its fact-line
    edits wait for the person's review, the file stays as it is."""
    ops = holds.ops_between(rel, old, new)
    if not ops:
        raise ToolError(f"{rel} is changed only through review here ([dream] review = "
                        f"\"all\"), and this write changes no fact line (a bullet): "
                        f"nothing was written. Add facts with remember.")
    return hold(rel, ops)


def hold(rel: str, ops: list[dict]) -> str:
    """`ops` on a memory file recorded as proposals waiting for review (agent.dream.holds),
    in this turn's commit; the file stays as it is."""
    ctx = current_context()
    vault = ctx.vault
    waiting = {(p.get("file"), normalise(str(p.get("line") or p.get("old") or "")))
               for p in ledger.waiting(vault.root)}
    ops = [o for o in ops if (o["file"], normalise(o["new"] or o["old"])) not in waiting]
    if not ops:
        return f"That already waits for the person's review (`agent review`); {rel} is unchanged."
    run = holds.run_of(vault.host(), ctx.now)
    make = holds.records(ops, run, ctx.now.isoformat(timespec="seconds"),
                         ctx.parent or f"{ctx.session}")
    vault.update(ledger.LEDGER, holds.append(vault.state, make))
    return (f"Not written to {rel}: {holds.describe(ops)}; "
            + holds.HELD.format(file=rel) + ". Tell the person it waits for their review.")


def _hold(rel: str, text: str) -> str:
    """A heartbeat or skill runs on its own: what the model writes there waits for the
    person (agent.vault.heldwrites), the file stays as it is."""
    ctx = current_context()
    heldwrites.hold(ctx.vault, rel, text, f"chat {ctx.session}")
    return (f"Held {rel} for the person's decision: it is not written and does not run "
            f"until they accept it (agent sync held shows it; agent sync accept {rel} "
            f"takes it). Tell them.")


@tool
def list_dir(path: str = ".") -> str:
    """List a folder of the vault: sub-folders end with /, files show their size.

    Args:
        path: The folder's path relative to the vault; "." is the vault itself.
    """
    rel = confine(path)
    vault = current_context().vault
    base = vault.root / rel if rel != "." else vault.root
    if base.is_file():
        raise ToolError(f"{rel} is a file; use read_file to read it.")
    entries: dict[str, str] = {}
    if base.is_dir():
        for entry in base.iterdir():
            if rel == "." and entry.name in OFF_LIMITS:
                continue
            if entry.is_dir():
                entries[entry.name + "/"] = ""
            else:
                entries[entry.name] = f"  ({entry.stat().st_size} bytes)"
    # Files this turn created but has not saved yet.
    prefix = "" if rel == "." else rel + "/"
    for staged in getattr(vault, "staged_paths", lambda: [])():
        if staged.startswith(prefix):
            name = staged[len(prefix):].split("/", 1)
            key = name[0] + ("/" if len(name) > 1 else "")
            entries.setdefault(key, "  (new, not saved yet)")
    if not entries:
        if not base.is_dir():
            raise ToolError(f"{rel}: no such folder in the vault.")
        return f"{rel}: empty folder"
    return "\n".join(f"{name}{info}" for name, info in sorted(entries.items()))
