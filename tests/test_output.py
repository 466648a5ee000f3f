"""What commands print and how: the pager, colour on a terminal only, NO_COLOR, --json
for scripts, results on stdout, messages that say what happened."""

from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import agent_proc


def run_in_pty(args: list[str], env: dict, cwd=None) -> str:
    """Run `agent ARGS` with a terminal as stdin and stdout; what it printed."""
    import pty
    import subprocess
    master, slave = pty.openpty()
    full = {**os.environ, **env}
    p = subprocess.Popen([sys.executable, "-m", "agent", *args], stdin=slave, stdout=slave,
                         stderr=slave, env=full, cwd=cwd, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    p.wait(timeout=60)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def test_log_pages_and_colours_on_a_terminal_only(vault, run, tmp_path):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n- likes tea\n")
    run("note", "commit the edit")
    paged = tmp_path / "paged.txt"
    pager = f"{sys.executable} -c \"import sys; open('{paged}', 'w').write(sys.stdin.read())\""
    run_in_pty(["--vault", str(vault.root), "log"], {"PAGER": pager})
    text = paged.read_text()
    assert "+- likes tea" in text.replace("\x1b[32m", "").replace("\x1b[m", "")
    assert "\x1b[" in text                       # coloured
    paged.unlink()
    out = run_in_pty(["--vault", str(vault.root), "log", "--no-pager"], {"PAGER": pager})
    assert not paged.exists() and "likes tea" in out
    # Not a terminal: no pager, no colour.
    p = agent_proc("log", vault=vault.root, env={"PAGER": pager})
    assert not paged.exists() and "+- likes tea" in p.stdout and "\x1b[" not in p.stdout


def test_api_errors_are_printed_once_and_401_names_the_key(fake_anthropic, vault, run,
                                                          monkeypatch):
    fake_anthropic.api_keys = {"the-right-key"}
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "wrong")
    p = run("chat", "-m", "hello")
    assert p.exit_code == 1
    assert p.stderr.count("refused the key") == 1, p.stderr
    assert "Check ANTHROPIC_API_KEY" in p.stderr and "turn 1 of" not in p.stderr


def on_a_terminal(*args, vault, env=None) -> str:
    """Run `agent` with stdout and stderr on a pseudo-terminal; what it wrote there."""
    import pty
    import subprocess

    leader, follower = pty.openpty()
    full = {**os.environ, "PAGER": "cat", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault), *args],
                            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=full)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:               # the other end closed: the process is done
            break
        if not chunk:
            break
        out += chunk
    proc.wait()
    os.close(leader)
    return out.decode("utf-8", "replace")


def test_no_color_is_honoured_on_a_terminal_by_search_log_and_the_vault_line(vault, run):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Likes green tea\n")
    assert run("note", "green tea with Ada").exit_code == 0
    for args in (("search", "--mode", "words", "green", "tea"), ("log", "-n", "1")):
        assert "\x1b[" in on_a_terminal(*args, vault=vault.root), args   # coloured by default
        out = on_a_terminal(*args, vault=vault.root, env={"NO_COLOR": "1"})
        assert "\x1b[" not in out and "tea" in out, args


@pytest.mark.slow
def test_no_color_is_honoured_by_chat_on_a_terminal(fake_anthropic, vault):
    from fakeanthropic import reply, tool_use

    for answer in ("Kyoto in April is lovely.", "Still lovely."):
        fake_anthropic.add(reply(tool_use("list_dir", {"path": "."})), reply(answer))
    out = on_a_terminal("chat", "--local", "-m", "Kyoto?", vault=vault.root)
    assert "Kyoto in April is lovely." in out and "\x1b[" in out     # the tool line is dimmed
    out = on_a_terminal("chat", "--local", "-m", "And now?", vault=vault.root, env={"NO_COLOR": "1"})
    assert "Still lovely." in out and "[list_dir]" in out and "\x1b[" not in out


def test_json_on_every_command_that_lists_or_reports(vault, run):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Likes tea\n")
    assert run("cron", "add", "water", "--every", "1h", "--message", "water the plants").exit_code == 0

    def lines(*args):
        r = run(*args, "--json")
        assert r.exit_code == 0, (args, r.output)
        return [json.loads(x) for x in r.stdout.splitlines()]
    [st] = lines("status")
    assert st["vault"] == str(vault.root) and st["facts"]["MEMORY.md"] == 1 and st["hand_edits"] == []
    [job] = lines("cron", "list")
    assert job["name"] == "water" and job["schedule"]["every_seconds"] == 3600
    assert {b["name"] for b in lines("heartbeat", "list")} >= {"morning"}
    assert lines("agents") == []
    assert "memory" in {s["name"] for s in lines("skills", "list")}
    [ix] = lines("index", "status")
    assert ix["path"].endswith("index.sqlite")
    [dr] = lines("dream", "--status")
    assert dr["cursor"] == 0 and dr["waiting"] == 0
    settings = {s["key"]: s for s in lines("config", "list")}
    assert settings["chat.window_tokens"]["value"] == 24000
    log = lines("log")
    assert log[0]["subject"] == "edit: MEMORY.md by hand"
    assert log[0]["files"]["MEMORY.md"]["added"] == ["- Likes tea"]


def test_docs_name_each_exit_status_the_commands_give(vault, run):
    """docs/scripting.md's list of exit statuses holds every one a script can meet: 0,
    1 (an error, a search that found nothing) and 2 (a wrong flag or argument)."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "scripting.md").read_text()
    statuses = " ".join(re.search(r"Exit status:(.*?)\n\n", doc, re.S).group(1).split())
    given = {run("status").exit_code, run("search", "zebra-nowhere").exit_code,
             run("note", "--no-such-flag").exit_code, run("review", "accept").exit_code}
    assert given == {0, 1, 2}
    for code in given:
        assert re.search(rf"(^|[\s,]){code} [a-z]", statuses), (code, statuses)
