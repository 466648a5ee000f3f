"""Helpers several test modules share, so that no test module imports another: the CLI
run in-process and plain git, clones of a bare remote, the forget tests' planted phrase,
the review dream's seeded vault and its scripted replies."""

from __future__ import annotations

import json
import subprocess

from click.testing import CliRunner

from agent.cli.app import cli
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
