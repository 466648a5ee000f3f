"""`agent config`: set changes one line and keeps comments, get and list agree, check
names every bad key, and every command names a bad key of agent.toml."""

from __future__ import annotations

from conftest import subjects


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


def test_config_get_and_list_agree_on_unset_and_default_settings(vault, run):
    p = run("config", "list")
    rows = {l.split()[0]: l.split(None, 1)[1] for l in p.stdout.splitlines()}
    assert rows["sync.every"] == "(unset)"                      # no placeholder value
    assert "(built-in)" not in p.stdout
    p = run("config", "get", "sync.every")
    assert p.exit_code == 1 and p.stdout == ""                 # as git config on an unset key
    assert "sync.every is not set" in p.stderr and "serve does not sync" in p.stderr
    assert rows["web.timeout"] == "20  (default)"
    p = run("config", "get", "web.timeout")
    assert p.exit_code == 0 and p.stdout == "20\n"             # a default with a value: shown
    assert run("config", "set", "sync.every", "5m").exit_code == 0
    p = run("config", "get", "sync.every")
    assert p.exit_code == 0 and p.stdout == "5m\n"
    p = run("config", "list")
    assert any(l.split() == ["sync.every", '"5m"'] for l in p.stdout.splitlines())


def test_config_check_findings_are_its_result_on_stdout(vault, run):
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace("window_tokens = 24000", 'window_tokens = "lots"'))
    p = run("config", "check")
    assert p.exit_code == 1
    assert "chat.window_tokens must be a whole number, not 'lots'" in p.stdout and p.stderr == ""


def test_config_set_of_a_telegram_token_points_to_the_environment(vault, run):
    before = (vault.root / "agent.toml").read_text()
    r = run("config", "set", "channels.telegram.token", "123:SECRET")
    assert r.exit_code == 1 and "$TELEGRAM_BOT_TOKEN" in r.output
    assert "enabled" not in r.output and "SECRET" not in r.output
    assert (vault.root / "agent.toml").read_text() == before
