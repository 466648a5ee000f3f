"""Everyday conventions, second round: piped REPL input, when the vault is named, config
get and list agreeing, the gateway's whole reply, completion of keys and ids."""

from __future__ import annotations

import json

from conftest import agent_proc, subjects
from fakeanthropic import reply


# ---- piped REPL input ------------------------------------------------------------------------


def test_piped_repl_input_runs_slash_commands_as_typed(fake_anthropic, vault, tmp_path):
    fake_anthropic.add(reply("Hello back"))
    p = agent_proc("chat", "--session", "cli/script", vault=vault.root,
                   input="/help\nhello\n/undo\n")
    assert p.returncode == 0, p.stderr
    assert "/memory" in p.stdout and "/undo" in p.stdout      # /help's list, not a message
    assert "Hello back" in p.stdout
    assert len(fake_anthropic.calls()) == 1
    sent = fake_anthropic.calls()[0].body["messages"][-1]["content"]
    assert "/help" not in json.dumps(sent) and "hello" in json.dumps(sent)
    assert "agent chat - session" not in p.stdout              # no banner, no prompts
    assert subjects(vault)[0].startswith("undo")                # /undo ran too


def test_piped_text_not_starting_with_a_command_is_still_one_message(fake_anthropic, vault):
    fake_anthropic.add(reply("One answer"))
    p = agent_proc("chat", "--session", "cli/one", vault=vault.root,
                   input="first line\n/help is a word here\n")
    assert p.returncode == 0, p.stderr
    assert len(fake_anthropic.calls()) == 1
    assert "/help is a word here" in json.dumps(fake_anthropic.calls()[0].body["messages"])


# ---- the (vault ...) line ----------------------------------------------------------------


def test_repl_names_an_agent_vault_once_before_the_conversation(fake_anthropic, vault, tmp_path):
    fake_anthropic.add(reply("First"), reply("Second"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = agent_proc("chat", cwd=elsewhere, env={"AGENT_VAULT": str(vault.root)},
                   input="/help\none\ntwo\n")
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("(vault ") == 1, p.stderr
    # before any reply: the line is the first thing said on stderr
    assert p.stderr.lstrip().startswith("(vault "), p.stderr
    p = agent_proc("chat", "--vault", str(vault.root / "memory"), cwd=elsewhere,
                   input="/help\n")
    assert p.returncode == 0 and "(vault " not in p.stderr
    p = agent_proc("chat", cwd=vault.root, env={"AGENT_VAULT": str(vault.root)}, input="/help\n")
    assert p.returncode == 0 and "(vault " not in p.stderr


# ---- config get and list agree -------------------------------------------------------------


def test_config_get_and_list_agree_on_unset_and_default_settings(vault):
    p = agent_proc("config", "list", vault=vault.root)
    rows = {l.split()[0]: l.split(None, 1)[1] for l in p.stdout.splitlines()}
    assert rows["sync.every"] == "(unset)"                      # no placeholder value
    assert "(built-in)" not in p.stdout
    p = agent_proc("config", "get", "sync.every", vault=vault.root)
    assert p.returncode == 1 and p.stdout == ""                 # as git config on an unset key
    assert "sync.every is not set" in p.stderr and "serve does not sync" in p.stderr
    assert rows["web.timeout"] == "20  (default)"
    p = agent_proc("config", "get", "web.timeout", vault=vault.root)
    assert p.returncode == 0 and p.stdout == "20\n"             # a default with a value: shown
    assert agent_proc("config", "set", "sync.every", "5m", vault=vault.root).returncode == 0
    p = agent_proc("config", "get", "sync.every", vault=vault.root)
    assert p.returncode == 0 and p.stdout == "5m\n"
    p = agent_proc("config", "list", vault=vault.root)
    assert any(l.split() == ["sync.every", '"5m"'] for l in p.stdout.splitlines())


# ---- completion of what is in the vault ------------------------------------------------------


def complete(vault, *words: str, cwd=None) -> list[str]:
    """What bash completion offers after `agent WORDS...` (the last word being typed)."""
    words = ["agent", *words]
    p = agent_proc(env={"_AGENT_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(words),
                        "COMP_CWORD": str(len(words) - 1)}, cwd=cwd or vault.root)
    assert p.returncode == 0, p.stderr
    return [line.split(",", 1)[1] for line in p.stdout.splitlines() if "," in line]


def test_completion_offers_sessions_jobs_runs_review_numbers_and_settings(
        fake_anthropic, vault, tmp_path):
    from agent.stores import sessions

    fake_anthropic.add(reply("Hi"), reply("Hi"))
    assert agent_proc("chat", "--session", "cli/garden", "--new", "-m", "hi",
                      vault=vault.root).returncode == 0
    assert agent_proc("chat", "--session", "phone/main", "--new", "-m", "hi",
                      vault=vault.root).returncode == 0
    assert set(sessions.list_sessions(vault.root)) >= {"cli/garden", "phone/main"}
    assert complete(vault, "chat", "--session", "") == sessions.list_sessions(vault.root)
    assert complete(vault, "chat", "--session", "cli/") == ["cli/garden"]
    assert complete(vault, "archive", "--session", "ph") == ["phone/main"]

    p = agent_proc("cron", "add", "water the plants", "--every", "1d", "-m", "remind me",
                   vault=vault.root)
    assert p.returncode == 0, p.stderr
    job = json.loads(agent_proc("cron", "list", "--json", vault=vault.root).stdout)["id"]
    assert complete(vault, "cron", "remove", "") == [job]
    assert complete(vault, "cron", "run", job[:2]) == [job]

    assert complete(vault, "config", "get", "sync.") == ["sync.every", "sync.remote"]
    assert "chat.window_tokens" in complete(vault, "config", "set", "")

    # from another folder: the vault named with --vault is the one read
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert complete(vault, "--vault", str(vault.root), "chat", "--session", "cli/",
                    cwd=elsewhere) == ["cli/garden"]
    # and no vault at all completes nothing, making none
    assert complete(vault, "chat", "--session", "", cwd=elsewhere) == []
    assert not (tmp_path / "home" / ".agent").exists()


def test_completion_offers_sub_agent_run_ids(fake_anthropic, vault):
    from fakeanthropic import tool_use

    fake_anthropic.add(reply(tool_use("spawn_agent", {"prompt": "count the notes"})),
                       reply("I counted 3 notes."), reply("There are three."))
    p = agent_proc("chat", "-m", "how many notes?", vault=vault.root)
    assert p.returncode == 0, p.stderr
    runs = sorted(q.name for q in (vault.root / "sessions" / "agent").iterdir())
    assert len(runs) == 1
    assert complete(vault, "agents", "show", "") == runs
    assert complete(vault, "agents", "show", "zz") == []
