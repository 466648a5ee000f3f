"""Helpers several test modules share, so that no test module imports another: the CLI
run in-process and plain git, clones of a bare remote, the forget tests' planted phrase,
the review dream's seeded vault and its scripted replies, `agent mcp` driven by the SDK's
client, serve's router of conversations and its transcripts."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from contextlib import asynccontextmanager

import anyio
from click.testing import CliRunner
from mcp import Client, StdioServerParameters
from mcp_types import Implementation

from agent.cli.app import cli
from agent.clock import now as vault_now
from agent.config import load_settings
from agent.llm import make_provider
from agent.serve.conversations import Conversations
from agent.vault.repo import Vault
from dreamkit import finding, op, write_entries
from fakeanthropic import json_reply

# ---- the CLI and git ----------------------------------------------------------------------


def agent(vault_path, *args, ok=True):
    """`agent --vault PATH ARGS...` in-process; asserts exit 0 unless `ok=False`."""
    result = CliRunner().invoke(cli, ["--vault", str(vault_path), *args], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def git(cwd, *args, input=None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=input, check=True,
                          capture_output=True, text=True).stdout


# ---- sync: clones and a remote's pushes ------------------------------------------------------


def clone(tmp_path, remote, name) -> Vault:
    result = CliRunner().invoke(cli, ["clone", str(remote), str(tmp_path / name)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return Vault.open(tmp_path / name)


def with_a_job(remote, vault):
    """The remote after `vault` synced a cron job to it (what an attacker would change)."""
    agent(vault.root, "cron", "add", "water", "--every", "1h", "--message", "water the plants")
    agent(vault.root, "sync")
    return remote


def push(evil, message="update"):
    """Commit everything in a plain git clone and push it to the remote's main."""
    git(evil, "add", "-A")
    git(evil, "commit", "-qm", message)
    git(evil, "push", "-q", "origin", "HEAD:main")


# ---- forget: a planted phrase --------------------------------------------------------------

PHRASE = 'the safe code is "4417" under the fernwood'


def every_object(path) -> bytes:
    return subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=path,
                          capture_output=True, check=True).stdout


def holds(vault, phrase: str = PHRASE, word: str = "fernwood") -> list[str]:
    """Every place of a clone that still holds the phrase (or its JSON-escaped form)."""
    forms = [phrase, json.dumps(phrase)[1:-1]]
    places = []
    log = vault.git("log", "--all", "-p")
    if any(f in log for f in forms):
        places.append("git log --all -p")
    blob = every_object(vault.root)
    if any(f.encode() in blob for f in forms):
        places.append("git cat-file --batch-all-objects")
    for path in vault.root.rglob("*"):
        if path.is_file() and ".git" not in path.parts and ".agent" not in path.parts:
            if any(f in path.read_text(errors="replace") for f in forms):
                places.append(str(path.relative_to(vault.root)))
    found = agent(vault.root, "search", word, ok=False)
    if found.exit_code != 1 or not found.output.startswith("No matches"):   # grep's exit 1
        places.append("agent search")
    return places


# ---- review: a dream that proposes ---------------------------------------------------------

MEMORY = "# Memory\n\n## Facts\n\n- The team uses Postgres 16\n"
USER = "# User\n\n## About\n\n- Lives in Berlin\n- Prefers tea to coffee\n"
LISBON = "- Lives in Lisbon (since 2026-11-13)"
KYOTO = "- Flying to Kyoto on 2026-12-03"


def seed(vault):
    """Facts by hand, then two archive entries: a trip, and a move."""
    (vault.root / "MEMORY.md").write_text(MEMORY)
    (vault.root / "USER.md").write_text(USER)
    vault.git("add", "-A")
    vault.git("commit", "-q", "-m", "edit: facts by hand")
    write_entries(vault, ["Planned the Kyoto trip; flights booked for 3 December.",
                          {"summary": "The user moved from Berlin to Lisbon last week.",
                           "message": "I moved from Berlin to Lisbon last week!"}])
    return vault


def script(server, *, first=1, second=2):
    """The dream's two replies: a trip to add to MEMORY.md, a move updating USER.md."""
    server.add(json_reply({"findings": [
        finding("Flying to Kyoto on 2026-12-03", evidence=[f"archive:{first}"]),
        finding("The user lives in Lisbon", kind="update", file="USER.md",
                evidence=[f"archive:{second}"])]}))
    server.add(json_reply({"ops": [
        op("add", section="Travel", new=KYOTO, reason=f"archive:{first}: flights booked"),
        op("update", "USER.md", old="- Lives in Berlin", new=LISBON,
           reason=f"archive:{second}: moved last week")]}))


def read(vault, rel):
    return (vault.root / rel).read_text()


# ---- agent mcp, driven by the SDK's stdio client ---------------------------------------------


@asynccontextmanager
async def connect(vault, *args, name="Claude Code", mode="legacy"):
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "agent", "--vault", str(vault.root), "mcp", *args],
                                   env=dict(os.environ))
    async with Client(params, client_info=Implementation(name=name, version="9.9"),
                      mode=mode) as client:
        yield client


def text_of(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def drive(vault, steps, *args, **kw):
    """Run `steps(client)` against a fresh `agent mcp`; its return value."""
    out = {}

    async def main():
        async with connect(vault, *args, **kw) as client:
            out["value"] = await steps(client)
    anyio.run(main)
    return out.get("value")


# ---- serve's router of conversations -------------------------------------------------------


def router(vault, **settings) -> Conversations:
    base = load_settings(vault.root)
    s = dataclasses.replace(base, **settings) if settings else base
    return Conversations(vault, make_provider(), clock=vault_now, settings_fn=lambda: s)


def after(event: threading.Event, item, timeout=10.0):
    """A scripted reply the fake gives only once `event` is set (the test's cue)."""
    def answer(_request):
        assert event.wait(timeout), "the test never gave the cue"
        return item
    return answer


def transcript(vault, session) -> list[dict]:
    """The session's messages (not the lines saying a message was received)."""
    files = sorted((vault.root / "sessions" / session).glob("*.jsonl"))
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    return [x for x in lines if x.get("type") != "received"]
