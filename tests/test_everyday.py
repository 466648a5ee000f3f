"""Everyday use through the real CLI: which vault, finding sessions, `doctor`, `config`,
`edit`, heartbeats and skills from the command line, the pager, the help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from agent.vault.change import Change
from agent.cli.app import cli
from agent.vault.repo import Vault
from conftest import agent_proc, subjects
from fakeanthropic import reply


def today_lines(vault: Vault) -> str:
    return "".join(p.read_text() for p in sorted((vault.root / "memory").glob("*.md")))


# ---- which vault -------------------------------------------------------------------------


def test_the_vault_containing_the_current_folder_wins_over_agent_vault(vault, tmp_path):
    other, _ = Vault.init(tmp_path / "other")
    sub = vault.root / "memory"
    p = agent_proc("note", "from inside", cwd=sub, env={"AGENT_VAULT": str(other.root)})
    assert p.returncode == 0, p.stderr
    assert "from inside" in today_lines(vault)
    assert "from inside" not in today_lines(other)
    assert "(vault" not in p.stderr        # the current folder's vault goes without saying
    p = agent_proc("path", cwd=sub, env={"AGENT_VAULT": str(other.root)})
    assert p.stdout.strip() == str(vault.root)


def test_outside_any_vault_agent_vault_is_used_and_named(vault, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = agent_proc("note", "from outside", cwd=elsewhere, env={"AGENT_VAULT": str(vault.root)})
    assert p.returncode == 0, p.stderr
    assert "from outside" in today_lines(vault)
    assert f"(vault {vault.root})" in p.stderr
    # Reading commands do not say it.
    p = agent_proc("status", cwd=elsewhere, env={"AGENT_VAULT": str(vault.root)})
    assert "(vault" not in p.stderr


def test_vault_option_wins_over_the_current_folder(vault, tmp_path):
    other, _ = Vault.init(tmp_path / "other")
    p = agent_proc("--vault", str(other.root), "note", "explicit", cwd=vault.root)
    assert p.returncode == 0, p.stderr
    assert "explicit" in today_lines(other) and "explicit" not in today_lines(vault)
    assert "(vault" not in p.stderr


def test_the_default_vault_is_named_when_it_is_not_the_current_folders(isolated_env, tmp_path):
    p = agent_proc("note", "first", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"Created a new vault at {isolated_env / '.agent' / 'vault'}" in p.stderr


# ---- help ------------------------------------------------------------------------------


def test_help_shows_each_commands_whole_description():
    p = agent_proc("--help")
    assert p.returncode == 0
    listing = p.stdout.split("Commands:")[1]
    assert "..." not in listing
    flat = " ".join(listing.split())
    assert ("Scheduled jobs (cron.json): a message the agent runs at a time, every interval, "
            "or on a cron expression.") in flat
    for name in ("sessions", "doctor", "config", "edit", "skills"):
        assert f"\n  {name} " in listing, name


def test_help_lists_every_command_family_with_its_own_description():
    """`agent --help` lists the commands of other modules without importing them, from
    descriptions kept in agent/cli/app.py: they must be the commands' own."""
    import importlib

    from agent.cli.app import LAZY

    families = ("search", "chat", "dream", "schedule", "config", "doctor", "skills", "agents",
                "sync", "mcp", "why", "review", "forget", "timetravel")
    commands = {c.name: c for f in families
                for c in importlib.import_module(f"agent.cli.{f}").COMMANDS}
    assert set(LAZY) == set(commands)
    for name, (module, attribute, text) in LAZY.items():
        assert getattr(importlib.import_module(module), attribute) is commands[name]
        assert text == commands[name].get_short_help_str(limit=1000), name
    listing = " ".join(agent_proc("--help").stdout.split())
    for name, (_, _, text) in LAZY.items():
        assert f"{name} {text}" in listing


def test_a_note_imports_no_other_command_family(vault):
    code = ("import sys; from agent.cli import main; sys.argv = ['agent', 'note', 'quick']\n"
            "try: main()\nexcept SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('agent.cli.', 'anthropic', "
            "'agent.search', 'agent.chat'))))")
    p = subprocess.run([sys.executable, "-c", code], cwd=vault.root, capture_output=True,
                       text=True, env={**os.environ, "AGENT_VAULT": str(vault.root)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "['agent.cli.app', 'agent.cli.common']"
    assert "quick" in today_lines(vault)


# ---- sessions --------------------------------------------------------------------------


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


# ---- config -------------------------------------------------------------------------------


def test_config_set_changes_one_line_keeps_comments_and_commits(vault, run):
    before = (vault.root / "agent.toml").read_text()
    r = run("config", "set", "chat.window_tokens", "32000")
    assert r.exit_code == 0, r.output
    after = (vault.root / "agent.toml").read_text()
    assert after == before.replace("window_tokens = 24000", "window_tokens = 32000")
    assert subjects(vault)[0] == "config: set chat.window_tokens = 32000"
    assert vault.git("show", "--name-only", "--format=", "HEAD").split() == ["agent.toml"]
    assert run("config", "get", "chat.window_tokens").output == "32000\n"
    # A setting the file does not have yet goes into its table; a string is quoted.
    assert run("config", "set", "serve.idle_compact_minutes", "30").exit_code == 0
    assert run("config", "set", "dream.model", "claude-haiku-4-5").exit_code == 0
    text = (vault.root / "agent.toml").read_text()
    assert "[serve]\nidle_compact_minutes = 30\n" in text
    assert 'model = "claude-haiku-4-5"' in text
    assert subjects(vault)[0] == 'config: set dream.model = "claude-haiku-4-5"'
    assert run("config", "get", "dream.model").output == "claude-haiku-4-5\n"
    assert run("config", "set", "model.fallbacks", "a,b").exit_code == 0
    assert run("config", "get", "model.fallbacks").output == '["a", "b"]\n'


def test_config_set_refuses_bad_values_and_unknown_keys(vault, run):
    before = (vault.root / "agent.toml").read_text()
    head = vault.head()
    r = run("config", "set", "chat.window_tokens", "lots")
    assert r.exit_code == 1 and "chat.window_tokens must be a whole number, not 'lots'" in r.output
    r = run("config", "set", "chat.window_tokens", "--", "-5")
    assert r.exit_code == 1 and "chat.window_tokens must be at least 1, not -5" in r.output
    r = run("config", "set", "chat.window_token", "5")
    assert r.exit_code == 1 and "did you mean chat.window_tokens?" in r.output
    r = run("config", "get", "chat.windw_tokens")
    assert r.exit_code == 1 and "did you mean chat.window_tokens?" in r.output
    assert (vault.root / "agent.toml").read_text() == before and vault.head() == head
    assert "Traceback" not in r.output


def test_config_check_names_every_bad_key(vault, run):
    assert run("config", "check").exit_code == 0
    path = vault.root / "agent.toml"
    text = path.read_text().replace("window_tokens = 24000", 'window_tokens = "lots"')
    path.write_text(text + "\n[serve]\nidle_compact_minute = 5\n")
    r = run("config", "check")
    assert r.exit_code == 1
    assert "chat.window_tokens must be a whole number, not 'lots'" in r.output
    assert ("unknown setting serve.idle_compact_minute (did you mean "
            "serve.idle_compact_minutes?)") in r.output
    assert "invalid literal" not in r.output


def test_every_command_names_the_bad_key_of_agent_toml(fake_anthropic, vault, run):
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace("window_tokens = 24000", "window_tokens = -5"))
    head = vault.head()
    for args in (["note", "x"], ["chat", "-m", "hi"]):
        r = run(*args)
        assert r.exit_code == 1, args
        assert "agent.toml: chat.window_tokens must be at least 1, not -5" in r.output
    assert vault.head() == head and not fake_anthropic.calls()
    # config set repairs it (the hand edit is committed first, as the person's).
    assert run("config", "set", "chat.window_tokens", "24000").exit_code == 0
    assert subjects(vault)[:2] == ["config: set chat.window_tokens = 24000", "edit: agent.toml by hand"]
    assert run("note", "x").exit_code == 0


# ---- doctor -------------------------------------------------------------------------------


def test_doctor_all_well(fake_anthropic, vault, run):
    import shutil
    r = run("doctor")
    lines = r.output.splitlines()
    for name in ("API key", "agent.toml", "git", "git fsck", "index", "cron.json", "heartbeats",
                 "skills"):
        assert any(l.startswith("ok") and f"  {name}  " in l for l in lines), (name, r.output)
    assert any("  sandbox  " in l for l in lines)
    assert [c.path for c in fake_anthropic.requests] == ["/v1/models"]
    h = fake_anthropic.requests[0].headers
    assert "test-key" in (h.get("x-api-key"), h.get("authorization", "").removeprefix("Bearer "))
    if shutil.which("bwrap"):
        sandbox = next(l for l in lines if "  sandbox  " in l)
        if sandbox.startswith("ok"):
            assert r.exit_code == 0 and "All is well." in r.output
    data = json.loads(run("doctor", "--json").stdout)
    assert {c["name"] for c in data["checks"]} >= {"API key", "models", "sandbox", "git fsck"}


def test_doctor_names_each_problem_and_fails(fake_anthropic, vault, run):
    fake_anthropic.api_keys = {"another-key"}
    (vault.root / "cron.json").write_text("{ not json")
    hb = vault.root / "heartbeat" / "broken.md"
    hb.write_text("---\nname: broken\nevery: often\n---\nhi\n")
    r = run("doctor")
    assert r.exit_code == 1
    assert "FAIL  API key" in r.output and "check ANTHROPIC_API_KEY" in r.output
    assert "FAIL  cron.json   cron.json:1:3: not valid JSON" in r.output
    assert "FAIL  heartbeats  heartbeat/broken.md" in r.output
    data = json.loads(run("doctor", "--json").stdout)
    assert data["ok"] is False
    assert {c["name"]: c["status"] for c in data["checks"]}["git fsck"] == "ok"


def test_doctor_finds_a_damaged_repository(fake_anthropic, vault, run):
    sha = vault.git("rev-parse", "HEAD:USER.md").strip()
    obj = vault.root / ".git" / "objects" / sha[:2] / sha[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"garbage")
    r = run("doctor")
    assert r.exit_code == 1
    line = next(l for l in r.output.splitlines() if "git fsck" in l)
    assert line.startswith("FAIL") and sha[:2] in r.output


def test_doctor_unknown_model_and_missing_key(fake_anthropic, vault, run, monkeypatch):
    assert run("config", "set", "model.name", "claude-nonesuch-9").exit_code == 0
    r = run("doctor")
    assert r.exit_code == 1
    assert "FAIL  models" in r.output and "unknown to the API: claude-nonesuch-9" in r.output
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    r = run("doctor")
    assert r.exit_code == 1 and "ANTHROPIC_API_KEY is not set" in r.output


# ---- edit ---------------------------------------------------------------------------------


def editor(tmp_path, script: str) -> str:
    """An $EDITOR command running `script` (python) on the file it is given."""
    path = tmp_path / "editor.py"
    path.write_text("import sys\np = sys.argv[1]\n" + script)
    return f"{sys.executable} {path}"


def test_edit_commits_the_change_as_the_persons(vault, tmp_path):
    ed = editor(tmp_path, "open(p, 'a').write('- likes green tea\\n')\n")
    p = agent_proc("edit", vault=vault.root, env={"EDITOR": ed, "VISUAL": ""})
    assert p.returncode == 0, p.stderr
    assert "Committed your edit:" in p.stdout and "edit: MEMORY.md by hand" in p.stdout
    assert (vault.root / "MEMORY.md").read_text().endswith("- likes green tea\n")
    assert vault.git("log", "-1", "--format=%an|%s").strip() == "Test User|edit: MEMORY.md by hand"
    assert vault.dirty_paths() == []


def test_edit_a_file_relative_to_the_current_folder_and_nothing_changed(vault, tmp_path):
    ed = editor(tmp_path, "open(p, 'a').write('x\\n')\n")
    (vault.root / "memory" / "2026-11-20.md").write_text("# 2026-11-20\n")
    vault.git("add", "-A")
    vault.git("commit", "-qm", "a day")
    p = agent_proc("edit", "2026-11-20.md", cwd=vault.root / "memory", env={"VISUAL": ed})
    assert p.returncode == 0, p.stderr
    assert vault.git("log", "-1", "--format=%s").strip() == "edit: memory/2026-11-20.md by hand"
    head = vault.head()
    p = agent_proc("edit", "USER.md", vault=vault.root, env={"VISUAL": editor(tmp_path, "pass\n")})
    assert p.returncode == 0 and "USER.md unchanged; nothing committed." in p.stdout
    assert vault.head() == head


def test_edit_of_agent_toml_left_broken_is_named_and_not_committed(vault, tmp_path):
    ed = editor(tmp_path, "t = open(p).read().replace('window_tokens = 24000', 'window_tokens = \"lots\"')\n"
                          "open(p, 'w').write(t)\n")
    head = vault.head()
    p = agent_proc("edit", "agent.toml", vault=vault.root, env={"VISUAL": ed})
    assert p.returncode == 1
    assert "chat.window_tokens must be a whole number, not 'lots'" in p.stderr
    assert "Traceback" not in p.stderr and vault.head() == head
    assert vault.dirty_paths() == ["agent.toml"]     # the person's edit is kept
    # And `agent edit agent.toml` is how it is repaired.
    fix = editor(tmp_path, "t = open(p).read().replace('\"lots\"', '30000')\nopen(p, 'w').write(t)\n")
    p = agent_proc("edit", "agent.toml", vault=vault.root, env={"VISUAL": fix})
    assert p.returncode == 0, p.stderr
    assert "window_tokens = 30000" in vault.git("show", "HEAD:agent.toml")


def test_edit_refuses_the_agents_own_state(vault, run):
    r = run("edit", ".git/config")
    assert r.exit_code == 1 and "not edited by hand" in r.output


# ---- heartbeats and skills ----------------------------------------------------------------


def test_heartbeat_enable_disable_changes_one_line_and_commits(vault, run):
    path = vault.root / "heartbeat" / "morning.md"
    before = path.read_text()
    r = run("heartbeat", "enable", "morning")
    assert r.exit_code == 0, r.output
    assert path.read_text() == before.replace("enabled: false", "enabled: true")
    assert subjects(vault)[0] == 'heartbeat: enable "morning"'
    assert "already enabled" in run("heartbeat", "enable", "morning").output
    assert run("heartbeat", "disable", "morning").exit_code == 0
    assert path.read_text() == before
    assert subjects(vault)[0] == 'heartbeat: disable "morning"'
    r = run("heartbeat", "enable", "mornin")
    assert r.exit_code == 1 and "Did you mean morning?" in r.output


def test_heartbeat_add_writes_a_file_the_list_shows(vault, run):
    r = run("heartbeat", "add", "inbox", "--every", "2h", "--active-hours", "08:00-20:00",
            "-m", "Look at the inbox note")
    assert r.exit_code == 0, r.output
    assert subjects(vault)[0] == 'heartbeat: add "inbox" (every 2h)'
    text = (vault.root / "heartbeat" / "inbox.md").read_text()
    assert "every: 2h" in text and text.rstrip().endswith("Look at the inbox note")
    listing = run("heartbeat", "list").output
    assert any(l.startswith("inbox") and "08:00-20:00" in l and " yes " in l
               for l in listing.splitlines())
    head = vault.head()
    r = run("heartbeat", "add", "inbox", "--every", "1h", "-m", "again")
    assert r.exit_code == 1 and "exists already" in r.output
    r = run("heartbeat", "add", "bad", "--every", "often", "-m", "x")
    assert r.exit_code == 1 and "'often' is not a duration" in r.output
    assert vault.head() == head and not (vault.root / "heartbeat" / "bad.md").exists()


def test_skills_list_and_show(vault, run):
    d = vault.root / "skills" / "groceries"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text("---\nname: groceries\ndescription: Keep the shopping list\n"
                                "requires:\n  env: [NO_SUCH_VAR_X]\n---\nAdd items to list.md.\n")
    r = run("skills", "list")
    assert r.exit_code == 0
    rows = r.output.splitlines()
    assert rows[0].split() == ["NAME", "FROM", "USABLE", "DESCRIPTION"]
    assert any(l.startswith("groceries") and "vault" in l and "needs $NO_SUCH_VAR_X" in l
               for l in rows)
    assert any(l.startswith("memory") and "built-in" in l for l in rows)
    r = run("skills", "show", "groceries")
    assert r.exit_code == 0 and "Add items to list.md." in r.stdout
    r = run("skills", "show", "grocerys")
    assert r.exit_code == 1 and "Did you mean groceries?" in r.output


# ---- the pager ----------------------------------------------------------------------------


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


def test_shell_completion_as_the_readme_sets_it_up():
    p = agent_proc(env={"_AGENT_COMPLETE": "bash_complete", "COMP_WORDS": "agent sess",
                        "COMP_CWORD": "1"})
    assert p.returncode == 0 and p.stdout.split() == ["plain,sessions"]
    p = agent_proc(env={"_AGENT_COMPLETE": "zsh_source"})
    assert "compdef" in p.stdout


# ---- messages -----------------------------------------------------------------------------


def test_undo_says_truthfully_when_everything_was_undone(vault, run):
    r = run("undo")
    assert r.exit_code == 1
    assert "Nothing to undo: the agent has changed nothing since the vault was made." in r.output
    run("note", "one")
    assert run("undo").exit_code == 0
    undo_sha = vault.head()[:7]
    r = run("undo")
    assert r.exit_code == 1
    assert (f"Nothing to undo: every agent change since the vault was made has been undone "
            f"(the last by {undo_sha}).") in r.output


def test_undo_conflict_names_a_deleted_file(vault, run):
    (vault.root / "notes.md").write_text("a\n")
    run("note", "commit the file")                     # notes.md committed as a hand edit
    with vault.locked():
        vault.write_text("notes.md", "a\nb\n")
        agent_sha = vault.commit(Change("remember", "add b to notes.md"))
    (vault.root / "notes.md").unlink()
    run("note", "deleted by hand")
    r = run("undo", agent_sha)
    assert r.exit_code == 1
    assert "conflicts with later changes in notes.md." in r.output
    assert "tree" not in r.output


def test_api_errors_are_printed_once_and_401_names_the_key(fake_anthropic, vault):
    fake_anthropic.api_keys = {"the-right-key"}
    p = agent_proc("chat", "-m", "hello", vault=vault.root,
                   env={"ANTHROPIC_BASE_URL": fake_anthropic.url, "ANTHROPIC_API_KEY": "wrong"})
    assert p.returncode == 1
    assert p.stderr.count("refused the key") == 1, p.stderr
    assert "Check ANTHROPIC_API_KEY" in p.stderr and "turn 1 of" not in p.stderr


def test_import_accepts_a_byte_order_mark_and_names_an_empty_file(vault, run, tmp_path):
    f = tmp_path / "bom.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps({"session": "telegram/me", "role": "user",
                                                 "content": "hi", "ts": "2024-03-01T10:00:00+09:00",
                                                 "id": "t1"}).encode() + b"\n")
    r = run("import", str(f))
    assert r.exit_code == 0 and "Imported 1 message into 1 session" in r.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    r = run("import", str(empty))
    assert r.exit_code == 0 and "Nothing to import: empty.jsonl is empty." in r.output


def test_init_counts_what_the_commit_adds(tmp_path, run):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("- milk\n")
    r = run("init", str(notes))
    assert r.exit_code == 0, r.output
    v = Vault.open(notes)
    subject = v.git("log", "-1", "--format=%s").strip()
    added = v.git("show", "--name-status", "--format=", "HEAD").splitlines()
    n = sum(1 for l in added if l.startswith("A"))
    assert subject == f"init: adopt this folder as a vault ({n} files added)"


def test_cron_add_refuses_a_second_job_of_the_same_name(vault, run):
    assert run("cron", "add", "daily", "-m", "plan", "--every", "1h").exit_code == 0
    head = vault.head()
    r = run("cron", "add", "daily", "-m", "again", "--every", "2h")
    assert r.exit_code == 1 and 'a cron job is already named "daily"' in r.output
    assert vault.head() == head
    assert run("cron", "remove", "daily").exit_code == 0


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
