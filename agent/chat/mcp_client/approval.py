"""Which MCP servers the person approved on this machine: no server of agent.toml starts
until what it would run was approved once here.

agent.toml is a vault file, and a vault file may come from a synced remote, a hand edit
on another machine or a restored backup; a server's command runs outside the sandbox
with the person's environment. So a server starts only when the fingerprint of what it
would run matches one the person approved with `agent mcp approve NAME`:

- a stdio server: its command, args, the names of the environment variables passed
  through, the folder it runs in (`.agent/mcp/`, see server_cwd), and the content of
  every vault file it can load. A script does not run alone: `python tools/server.py`
  imports `tools/helper.py`, `python tools/pkgsrv` runs `tools/pkgsrv/__main__.py`,
  node requires what sits beside its script. So each vault path the command line names
  pins a whole folder, recursively: the folder of a file, or the folder named. A sync
  that changes any file there asks again, naming the file. The vault's top folder is
  never pinned (every synced file would be within reach of the server, and the
  approval would lapse at every turn): a server started from there is refused with the
  fix (give it a folder of its own);
- a streamable HTTP server: its url and header templates (a `${VAR}` in a header sends
  that variable's value to the url).

The approvals live in `.agent/mcp-approved.json` (agent.fs.approvals, which keeps a key's
approvals too): git-ignored, never committed or synced, local to this machine. Each
keeps the digest of every pinned file, so a server that changed says which file did.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime
from pathlib import Path

from agent.chat.mcp_client import APPROVED_FILE
from agent.config.mcp_servers import ServerConfig
from agent.errors import UserError
from agent.fs import safe
from agent.fs.approvals import Approvals
from agent.fs.offlimits import STATE_DIR, is_off_limits

FILE = APPROVED_FILE
FILE_BYTES = safe.COMMIT_BYTES       # one pinned file, hashed whole
MAX_FILES = 5000                     # files pinned for one server
MAX_BYTES = 200 * 1024 * 1024        # their total size


class Unpinnable(UserError):
    """What a server can load cannot be pinned; the message names why and the fix."""


def not_approved_line(name: str) -> str:
    """What chat and serve say about a server that is not started for lack of approval."""
    return (f"MCP server {name} is not approved on this machine: review agent.toml, then "
            f"run agent mcp approve {name}")


def _path(root) -> Path:
    return Path(root) / STATE_DIR / FILE


def server_cwd(root) -> Path:
    """The folder a stdio server runs in: `.agent/mcp/`, machine-local and empty of
    anything synced. Not the vault: npx, uvx and `python -m` pick up code and settings
    from the folder they run in, and a sync could put some there."""
    return Path(root) / STATE_DIR / "mcp"


def _words(c: ServerConfig):
    """The command line's words, and the value of each `--option=value`."""
    for word in (c.command or "", *c.args):
        yield word
        if word.startswith("-") and "=" in word:
            yield word.split("=", 1)[1]


def vault_files(root, c: ServerConfig) -> list[str]:
    """The vault paths (files and folders) a stdio server's command line names."""
    if c.url:
        return []
    base = os.path.abspath(root)
    cwd = str(server_cwd(base))
    out = []
    for word in _words(c):
        if not word or "\0" in word:
            continue
        full = os.path.normpath(os.path.join(cwd, os.path.expanduser(word)))
        if full != base and not full.startswith(base + os.sep):
            continue
        if not os.path.lexists(full):
            continue
        rel = os.path.relpath(full, base).replace(os.sep, "/")
        if is_off_limits(rel):
            continue
        if rel not in out:
            out.append(rel)
    return out


def pinned_folders(root, c: ServerConfig) -> list[str]:
    """The vault folders whose every file the approval covers: the folder of each named
    file and each named folder (outermost only). Unpinnable for the vault's top."""
    base = os.path.abspath(root)
    folders = []
    for rel in vault_files(root, c):
        full = os.path.join(base, rel)
        folder = rel if os.path.isdir(full) and not os.path.islink(full) else \
            os.path.dirname(rel)
        if folder in ("", "."):
            raise Unpinnable(
                f"MCP server {c.name} is started from the vault's top folder ({rel}), where "
                f"every synced file is within its reach, so no approval can pin what it "
                f"runs. Move its files into a folder of their own (e.g. tools/{c.name}/) and "
                f"name that in agent.toml.")
        folders.append(folder)
    outer = [f for f in folders if not any(f.startswith(o + "/") for o in folders if o != f)]
    return list(dict.fromkeys(outer))


def _walk(root, folder: str):
    """Every vault path under `folder`, following links to folders inside the vault
    once each (a server follows them too). A link leading out, or into .git/ or
    .agent/, is listed as a file, and its refusal is what gets pinned."""
    base = os.path.realpath(root)
    seen = set()
    stack = [folder]
    while stack:
        rel = stack.pop()
        real = os.path.realpath(os.path.join(base, rel))
        if real in seen:
            continue
        seen.add(real)
        if real == base:
            raise Unpinnable(f"{rel} leads to the vault's top folder; an MCP server's folder "
                             f"cannot be pinned through it. Replace the link.")
        try:
            entries = sorted(os.scandir(real), key=lambda e: e.name)
        except OSError:
            yield rel           # gone, or not a folder: its digest says so
            continue
        for e in entries:
            sub = f"{rel}/{e.name}"
            target = os.path.realpath(e.path)
            inner = os.path.relpath(target, base).replace(os.sep, "/")
            walkable = e.is_dir() and target.startswith(base + os.sep) and not is_off_limits(inner)
            if walkable:
                stack.append(sub)
            else:
                yield sub


def _file_digest(root, rel: str) -> str:
    link = os.readlink(os.path.join(root, rel)) if os.path.islink(os.path.join(root, rel)) else None
    try:
        data = safe.read_bytes(root, rel, limit=FILE_BYTES)
    except safe.UnsafeFile as e:
        # Not readable as a vault file (a link out, too big): its refusal is what is
        # approved, so any change to what it is asks again.
        digest = "refused:" + str(e)
    else:
        digest = "missing" if data is None else hashlib.sha256(data).hexdigest()
    return digest if link is None else f"link:{link}:{digest}"


def pinned_files(root, c: ServerConfig) -> dict[str, str]:
    """The digest of every vault file the server can load; Unpinnable beyond the limits."""
    out: dict[str, str] = {}
    for rel in vault_files(root, c):
        out[rel] = _file_digest(root, rel) if not os.path.isdir(os.path.join(root, rel)) \
            else "folder"
    total = 0
    for folder in pinned_folders(root, c):
        for rel in _walk(root, folder):
            if len(out) >= MAX_FILES:
                raise Unpinnable(f"{folder}/ holds more than {MAX_FILES} files; an MCP server's "
                                 f"folder is pinned whole. Give the server a smaller folder.")
            try:
                total += os.stat(os.path.join(root, rel)).st_size
            except OSError:
                pass
            if total > MAX_BYTES:
                raise Unpinnable(f"{folder}/ holds more than {MAX_BYTES // 2**20} MB; an MCP "
                                 f"server's folder is pinned whole. Give the server a smaller "
                                 f"folder.")
            out[rel] = _file_digest(root, rel)
    return out


def _what(root, c: ServerConfig) -> dict:
    if c.url:
        return {"url": c.url, "headers": [list(h) for h in c.headers]}
    return {"command": c.command, "args": list(c.args), "env": list(c.env),
            "cwd": os.path.realpath(server_cwd(root)), "files": pinned_files(root, c)}


def _digest(what: dict) -> str:
    blob = json.dumps(what, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def fingerprint(root, c: ServerConfig) -> str:
    """The sha256 of everything the server would run as (see the module doc);
    Unpinnable when that cannot be pinned."""
    return _digest(_what(root, c))


def describe(root, c: ServerConfig) -> list[str]:
    """The command line as the person reviews it before approving."""
    if c.url:
        lines = [f"  url      {c.url}"]
        lines += [f"  header   {k}: {v}" for k, v in c.headers]
        return lines
    lines = [f"  command  {json.dumps([c.command, *c.args], ensure_ascii=False)}",
             f"  cwd      {server_cwd(os.path.realpath(root))}"]
    if c.env:
        lines.append(f"  env      {', '.join(c.env)} (passed from your environment)")
    for rel in vault_files(root, c):
        if not os.path.isdir(os.path.join(root, rel)):
            lines.append(f"  file     {rel} (its content is part of the approval)")
    try:
        files = pinned_files(root, c)
        for folder in pinned_folders(root, c):
            n = sum(1 for rel in files if rel.startswith(folder + "/"))
            lines.append(f"  folder   {folder}/ (all {n} file{'s' * (n != 1)} in it, which the "
                         f"server can load, are part of the approval)")
    except Unpinnable as e:
        lines.append(f"  cannot be approved: {e}")
    return lines


def _approvals(root) -> Approvals:
    return Approvals(_path(root), "servers")


def status(root, c: ServerConfig) -> str:
    """"approved", "changed" (approved once, what it would run differs now),
    "unapproved", or "unpinnable" (what it can load cannot be pinned)."""
    entry = _approvals(root).get(c.name)
    try:
        digest = fingerprint(root, c)
    except Unpinnable:
        return "unpinnable"
    if not isinstance(entry, dict):
        return "unapproved"
    return "approved" if entry.get("sha256") == digest else "changed"


def changes(root, c: ServerConfig) -> list[str]:
    """What differs from the approval: the vault files added, removed or changed, or
    agent.toml for the command line itself."""
    entry = _approvals(root).get(c.name)
    if entry is None:
        return []
    try:
        now = _what(root, c)
    except Unpinnable:
        return []
    then = entry.get("files")
    if not isinstance(then, dict):
        return ["agent.toml or a file it names"]     # approved before files were kept
    files = now.pop("files", {})
    out = ["agent.toml"] if entry.get("line") not in (None, _digest(now)) else []
    out += sorted(rel for rel in set(files) | set(then) if files.get(rel) != then.get(rel))
    return out


def refusal_line(root, c: ServerConfig) -> str | None:
    """Why chat and serve do not start server `c` (None: approved), in one line."""
    state = status(root, c)
    if state == "approved":
        return None
    if state == "unpinnable":
        try:
            fingerprint(root, c)
        except Unpinnable as e:
            return f"MCP server {c.name} is not started: {e}"
    if state == "changed":
        what = changes(root, c)
        named = ", ".join(what[:3]) + (f" and {len(what) - 3} more" if len(what) > 3 else "")
        return (f"MCP server {c.name} changed since it was approved"
                + (f" ({named})" if named else "")
                + f": it is not started until you review it and run agent mcp approve {c.name}")
    return not_approved_line(c.name)


def approve(root, c: ServerConfig, now: datetime) -> bool:
    """Approve what the server would run now; False when it already was. Unpinnable
    when that cannot be pinned."""
    what = _what(root, c)
    digest = _digest(what)
    approvals = _approvals(root)
    if (approvals.get(c.name) or {}).get("sha256") == digest:
        return False
    files = what.pop("files", {})
    approvals.put(c.name, {"sha256": digest, "approved": now.isoformat(timespec="seconds"),
                           "where": c.where, "line": _digest(what), "files": files})
    return True


def revoke(root, name: str) -> bool:
    """Forget the approval of server `name`; False when there was none."""
    return _approvals(root).drop(name)
