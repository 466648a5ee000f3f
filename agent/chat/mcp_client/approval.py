"""Which MCP servers the person approved on this machine: no server of agent.toml starts
until its exact command line was approved once here.

agent.toml is a vault file, and a vault file may come from a synced remote, a hand edit
on another machine or a restored backup; a server's command runs outside the sandbox
with the person's environment. So a server starts only when the fingerprint of what it
would run matches one the person approved with `agent mcp approve NAME`:

- a stdio server: its command, args, the names of the environment variables passed
  through, the folder it runs in (`.agent/mcp/`, see server_cwd), and the content of
  any vault file its command line names (a script in the vault edited by a sync asks
  again);
- a streamable HTTP server: its url and header templates (a `${VAR}` in a header sends
  that variable's value to the url).

The approvals live in `.agent/mcp-approved.json`: git-ignored, never committed or
synced, local to this machine. A command line that changed since it was approved is
unapproved again.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime
from pathlib import Path

from agent.config.mcp_servers import ServerConfig
from agent.fs import atomic, safe
from agent.fs.offlimits import STATE_DIR, is_off_limits

FILE = "mcp-approved.json"
FILE_BYTES = safe.COMMIT_BYTES       # a script the command line names, hashed whole


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


def vault_files(root, c: ServerConfig) -> list[str]:
    """The vault files a stdio server's command line names (as vault paths)."""
    if c.url:
        return []
    base = os.path.abspath(root)
    cwd = str(server_cwd(base))
    out = []
    for word in (c.command or "", *c.args):
        if not word or "\0" in word:
            continue
        full = os.path.normpath(os.path.join(cwd, os.path.expanduser(word)))
        if not full.startswith(base + os.sep) or not os.path.lexists(full):
            continue
        rel = os.path.relpath(full, base).replace(os.sep, "/")
        if is_off_limits(rel) or (os.path.isdir(full) and not os.path.islink(full)):
            continue
        if rel not in out:
            out.append(rel)
    return out


def _file_digest(root, rel: str) -> str:
    try:
        data = safe.read_bytes(root, rel, limit=FILE_BYTES)
    except safe.UnsafeFile as e:
        # Not readable as a vault file (a link out, too big): its refusal is what is
        # approved, so any change to what it is asks again.
        return "refused:" + str(e)
    return "missing" if data is None else hashlib.sha256(data).hexdigest()


def fingerprint(root, c: ServerConfig) -> str:
    """The sha256 of everything the server would run as (see the module doc)."""
    what = {"url": c.url, "headers": [list(h) for h in c.headers]} if c.url else {
        "command": c.command, "args": list(c.args), "env": list(c.env),
        "cwd": os.path.realpath(server_cwd(root)),
        "files": {rel: _file_digest(root, rel) for rel in vault_files(root, c)}}
    blob = json.dumps(what, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


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
        lines.append(f"  file     {rel} (its content is part of the approval)")
    return lines


def _load(root) -> dict:
    data = atomic.read_json(_path(root), default=None)
    if not isinstance(data, dict) or not isinstance(data.get("servers"), dict):
        return {"version": 1, "servers": {}}
    return data


def status(root, c: ServerConfig) -> str:
    """"approved", "changed" (approved once, the command line differs now) or
    "unapproved"."""
    entry = _load(root)["servers"].get(c.name)
    if not isinstance(entry, dict):
        return "unapproved"
    return "approved" if entry.get("sha256") == fingerprint(root, c) else "changed"


def approve(root, c: ServerConfig, now: datetime) -> bool:
    """Approve the server's current command line; False when it already was."""
    digest = fingerprint(root, c)
    data = _load(root)
    if (data["servers"].get(c.name) or {}).get("sha256") == digest:
        return False
    data["servers"][c.name] = {"sha256": digest, "approved": now.isoformat(timespec="seconds"),
                               "where": c.where}
    atomic.write_json(_path(root), data)
    return True


def revoke(root, name: str) -> bool:
    """Forget the approval of server `name`; False when there was none."""
    data = _load(root)
    if data["servers"].pop(name, None) is None:
        return False
    atomic.write_json(_path(root), data)
    return True
