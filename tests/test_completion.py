"""Shell completion: the script for each shell as the README sets it up, and completion
of what is in the vault (sessions, jobs, runs, review numbers, settings)."""

from __future__ import annotations

import json

import pytest

from conftest import agent_proc
from fakeanthropic import reply
from helpers import complete


def test_shell_completion_as_the_readme_sets_it_up():
    p = agent_proc(env={"_AGENT_COMPLETE": "bash_complete", "COMP_WORDS": "agent sess",
                        "COMP_CWORD": "1"})
    assert p.returncode == 0 and p.stdout.split() == ["plain,sessions"]
    p = agent_proc(env={"_AGENT_COMPLETE": "zsh_source"})
    assert "compdef" in p.stdout


def test_completion_prints_the_script_for_each_shell(vault, tmp_path):
    for shell, mark in (("bash", "complete -o nosort -F _agent_completion agent"),
                        ("zsh", "compdef _agent_completion agent"),
                        ("fish", "complete --no-files --command agent")):
        p = agent_proc("completion", shell, vault=vault.root)
        assert p.returncode == 0 and mark in p.stdout, (shell, p.stdout[-300:])
    # The script it prints completes the commands.
    p = agent_proc(env={"_AGENT_COMPLETE": "bash_complete", "COMP_WORDS": "agent sta",
                        "COMP_CWORD": "1"})
    assert "plain,status" in p.stdout.split()


@pytest.mark.slow
def test_completion_offers_sessions_jobs_runs_review_numbers_and_settings(
        fake_anthropic, vault, run, tmp_path, monkeypatch):
    from agent.stores import sessions

    fake_anthropic.add(reply("Hi"), reply("Hi"))
    assert run("chat", "--session", "cli/garden", "--new", "-m", "hi").exit_code == 0
    assert run("chat", "--session", "phone/main", "--new", "-m", "hi").exit_code == 0
    assert set(sessions.list_sessions(vault.root)) >= {"cli/garden", "phone/main"}
    assert complete(vault, monkeypatch, "chat", "--session", "") == sessions.list_sessions(vault.root)
    assert complete(vault, monkeypatch, "chat", "--session", "cli/") == ["cli/garden"]
    assert complete(vault, monkeypatch, "archive", "--session", "ph") == ["phone/main"]

    p = run("cron", "add", "water the plants", "--every", "1d", "-m", "remind me")
    assert p.exit_code == 0, p.output
    job = json.loads(run("cron", "list", "--json").stdout)["id"]
    assert complete(vault, monkeypatch, "cron", "remove", "") == [job]
    assert complete(vault, monkeypatch, "cron", "run", job[:2]) == [job]

    assert complete(vault, monkeypatch, "config", "get", "sync.") == ["sync.every", "sync.remote"]
    assert "chat.window_tokens" in complete(vault, monkeypatch, "config", "set", "")

    # from another folder: the vault named with --vault is the one read
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert complete(vault, monkeypatch, "--vault", str(vault.root), "chat", "--session", "cli/",
                    cwd=elsewhere) == ["cli/garden"]
    # and no vault at all completes nothing, making none
    assert complete(vault, monkeypatch, "chat", "--session", "", cwd=elsewhere) == []
    assert not (tmp_path / "home" / ".agent").exists()


@pytest.mark.slow
def test_completion_offers_sub_agent_run_ids(fake_anthropic, vault, run, monkeypatch):
    from fakeanthropic import tool_use

    fake_anthropic.add(reply(tool_use("spawn_agent", {"prompt": "count the notes"})),
                       reply("I counted 3 notes."), reply("There are three."))
    p = run("chat", "-m", "how many notes?")
    assert p.exit_code == 0, p.output
    runs = sorted(q.name for q in (vault.root / "sessions" / "agent").iterdir())
    assert len(runs) == 1
    assert complete(vault, monkeypatch, "agents", "show", "") == runs
    assert complete(vault, monkeypatch, "agents", "show", "zz") == []
