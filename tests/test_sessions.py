"""Conversations from the command line: `agent sessions`, `chat --continue`, a mistyped
or new session name, `archive`, the counts `status` shows."""

from __future__ import annotations

import json
import os
import sys

from conftest import subjects
from fakeanthropic import reply


def test_sessions_lists_conversations_and_json(fake_anthropic, vault, run):
    fake_anthropic.add(reply("Hello there."), reply("Noted, the dentist on Friday."))
    assert run("chat", "-m", "hi").exit_code == 0
    assert run("chat", "--session", "telegram/42", "-m", "dentist friday").exit_code == 0
    r = run("sessions")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["SESSION", "MESSAGES", "FIRST", "LAST", "LAST", "LINE"]
    assert lines[1].startswith("telegram/42") and "assistant: Noted, the dentist on Friday." in lines[1]
    assert lines[2].startswith("cli/default") and " 2 " in lines[2]
    data = json.loads(run("sessions", "--json").stdout)
    assert [d["session"] for d in data] == ["telegram/42", "cli/default"]
    assert data[1]["messages"] == 2 and data[1]["last_text"] == "Hello there."
    assert data[1]["first"] <= data[1]["last"]


def test_sessions_piped_keeps_whole_titles_and_lines(vault, run, tmp_path, monkeypatch):
    """Cut to the terminal's width in a terminal; a pipe or a file (a script, grep) gets
    each title and last line whole."""
    title = "Planning the long walk from Kyoto to Tokyo along the old Nakasendo road, " \
            "with every post town we want to stay in"
    said = "Magome, Tsumago and Narai first; the passes after that, weather permitting."
    conv = {"id": "c-walk", "title": title, "create_time": 1_700_000_000,
            "update_time": 1_700_000_100, "current_node": "m0", "mapping": {
                "root": {"id": "root", "parent": None, "children": ["m0"], "message": None},
                "m0": {"id": "m0", "parent": "root", "children": [], "message": {
                    "id": "m0", "author": {"role": "user"}, "create_time": 1_700_000_000,
                    "weight": 1.0, "content": {"content_type": "text", "parts": [said]},
                    "metadata": {}}}}}
    (tmp_path / "conversations.json").write_text(json.dumps([conv]))
    assert run("import", str(tmp_path / "conversations.json")).exit_code == 0
    monkeypatch.setenv("COLUMNS", "80")
    r = run("sessions")                       # CliRunner's output is no terminal
    assert r.exit_code == 0, r.output
    assert f"{title}: user: {said}" in r.output


def test_sessions_in_a_new_vault(vault, run):
    r = run("sessions")
    assert r.exit_code == 0 and "No conversations yet" in r.output
    assert json.loads(run("sessions", "--json").stdout) == []


def test_chat_continue_resumes_the_last_session(fake_anthropic, vault, run):
    fake_anthropic.add(reply("one"), reply("two"))
    assert run("chat", "--session", "cli/work", "-m", "start work").exit_code == 0
    r = run("chat", "-c", "-m", "and then?")
    assert r.exit_code == 0, r.output
    assert "[continuing cli/work]" in r.output
    assert subjects(vault)[0] == "chat(cli/work): and then?"
    # The resumed request carries the earlier turn.
    assert "start work" in json.dumps(fake_anthropic.calls()[1].body["messages"])


def test_chat_continue_with_nothing_to_continue(vault, run):
    r = run("chat", "-c", "-m", "hi")
    assert r.exit_code == 1 and "Nothing to continue" in r.output


def test_chat_with_a_mistyped_session_refuses_with_did_you_mean(fake_anthropic, vault, run):
    fake_anthropic.add(reply("ok"), reply("ok"))
    assert run("chat", "--session", "cli/work", "-m", "hi").exit_code == 0
    before = subjects(vault)
    r = run("chat", "--session", "cli/wrok", "-m", "hello")
    assert r.exit_code == 1
    assert "No session cli/wrok" in r.output and "Did you mean cli/work?" in r.output
    assert subjects(vault) == before and not (vault.root / "sessions/cli/wrok").exists()
    assert len(fake_anthropic.calls()) == 1
    r = run("chat", "--session", "cli/wrok", "--new", "-m", "hello")
    assert r.exit_code == 0 and (vault.root / "sessions/cli/wrok").is_dir()


def test_chat_with_a_new_unlike_session_starts_it_and_says_so(fake_anthropic, vault, run):
    fake_anthropic.add(reply("ok"))
    r = run("chat", "--session", "telegram/42", "-m", "hello")
    assert r.exit_code == 0 and "[new session telegram/42]" in r.output


def test_archive_of_an_unknown_session_is_an_error(vault, run):
    r = run("archive", "--session", "nosuch/thing")
    assert r.exit_code == 1
    assert "No session nosuch/thing" in r.output and "agent sessions" in r.output


def test_status_counts_messages_from_the_index(fake_anthropic, vault, run):
    fake_anthropic.add(reply("a"), reply("b"))
    run("chat", "-m", "one")
    run("chat", "--session", "cli/x", "--new", "-m", "two")
    r = run("status")
    assert "sessions:   2 (4 messages)" in r.output
    # A hand-added line is counted too (the index catches up first).
    f = next((vault.root / "sessions/cli/x").glob("*.jsonl"))
    with open(f, "a") as fh:
        fh.write(json.dumps({"id": "h1", "ts": "2026-11-20T10:00:00+00:00", "role": "user",
                             "content": "by hand", "turn": 9}) + "\n")
    assert "sessions:   2 (5 messages)" in run("status").output


def test_ctrl_c_during_archive_says_what_was_kept(fake_anthropic, vault, run):
    import signal
    import subprocess
    from fakeanthropic import json_reply
    fake_anthropic.add(reply("hi"), reply("there"))
    run("chat", "-m", "hello")
    run("chat", "--session", "cli/b", "--new", "-m", "hello b")
    fake_anthropic.add(json_reply({"topic": "Greeting", "summary": "They said hello.",
                                   "importance": 0.2}),
                       json_reply({"topic": "B", "summary": "b", "importance": 0.2}, delay=30))
    env = {**os.environ, "ANTHROPIC_BASE_URL": fake_anthropic.url, "ANTHROPIC_API_KEY": "test-key"}
    proc = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "archive",
                             "--all"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    fake_anthropic.wait_for_requests(4, path="/v1/messages", timeout=60)
    head = vault.head()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "cli/b: archive entry" in out and "cli/default: archive" not in out
    assert "[interrupted: cli/b archived; cli/default is unchanged]" in err
    assert "Aborted" not in err and "Traceback" not in err
    assert vault.head() == head
