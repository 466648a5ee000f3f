"""Which vault a command works on, as git finds its repository: --vault, the vault
containing the current folder, $AGENT_VAULT, ~/.agent/vault; and that a vault other
than the current folder's is named."""

from __future__ import annotations

from agent.ops.vaults import init_vault
from conftest import agent_proc, subjects
from fakeanthropic import reply
from helpers import today_lines


def test_the_vault_containing_the_current_folder_wins_over_agent_vault(vault, tmp_path):
    other, _ = init_vault(tmp_path / "other")
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
    other, _ = init_vault(tmp_path / "other")
    p = agent_proc("--vault", str(other.root), "note", "explicit", cwd=vault.root)
    assert p.returncode == 0, p.stderr
    assert "explicit" in today_lines(other) and "explicit" not in today_lines(vault)
    assert "(vault" not in p.stderr


def test_the_default_vault_is_named_when_it_is_not_the_current_folders(isolated_env, tmp_path):
    p = agent_proc("note", "first", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"Created a new vault at {isolated_env / '.agent' / 'vault'}" in p.stderr


def test_vault_option_pointing_inside_a_vault_finds_the_vault(vault, tmp_path):
    p = agent_proc("--vault", str(vault.root / "memory"), "note", "from a sub-folder", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert subjects(vault)[0].startswith("note: add 1 line to memory/")
    assert not (vault.root / "memory" / "memory").exists()
    p = agent_proc("--vault", str(vault.root / "memory"), "path", cwd=tmp_path)
    assert p.stdout.strip() == str(vault.root)


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


def test_a_new_vault_says_when_git_has_no_identity_for_hand_edits(isolated_env, tmp_path):
    """With no git user.name/user.email, hand edits were committed as root without a word."""
    (isolated_env / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n")
    p = agent_proc("init", str(tmp_path / "v"))
    assert p.returncode == 0
    assert "git has no user.name and user.email" in p.stderr
    assert "git config --global user.name" in p.stderr
    p = agent_proc("doctor", "--vault", str(tmp_path / "v"))
    assert "identity" in p.stdout and "git has no user.name and user.email" in p.stdout
    # with an identity, nothing is said
    (isolated_env / ".gitconfig").write_text("[user]\n\tname = Ana\n\temail = ana@example.org\n")
    p = agent_proc("init", str(tmp_path / "w"))
    assert p.returncode == 0 and "user.name" not in p.stderr
