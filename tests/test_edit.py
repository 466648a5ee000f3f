"""`agent edit`: a person's edit in $VISUAL/$EDITOR committed as theirs, names resolved
from anywhere in the vault, a broken agent.toml named and not committed."""

from __future__ import annotations

from conftest import agent_proc, subjects
from helpers import editor


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


def test_edit_refuses_an_unknown_name_with_a_suggestion_and_new_makes_one(vault, tmp_path):
    ed = editor(tmp_path, "open(p, 'a').write('- a fact\\n')\n")
    head = vault.head()
    p = agent_proc("edit", "MEMROY.md", vault=vault.root, env={"VISUAL": ed})
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "There is no MEMROY.md" in p.stderr and "Did you mean MEMORY.md?" in p.stderr
    assert "agent edit --new MEMROY.md" in p.stderr
    assert not (vault.root / "MEMROY.md").exists() and vault.head() == head
    p = agent_proc("edit", "--new", "ideas.md", vault=vault.root, env={"VISUAL": ed})
    assert p.returncode == 0, p.stderr
    assert subjects(vault)[0] == "edit: ideas.md by hand"
    assert (vault.root / "ideas.md").read_text() == "- a fact\n"


def test_edit_from_a_sub_folder_finds_the_vaults_own_files(vault, tmp_path):
    ed = editor(tmp_path, "open(p, 'a').write('# tweaked\\n')\n")
    sub = vault.root / "memory"
    p = agent_proc("edit", "agent.toml", cwd=sub, env={"VISUAL": ed})
    assert p.returncode == 0, p.stderr
    assert subjects(vault)[0] == "edit: agent.toml by hand"
    assert not (sub / "agent.toml").exists()
    assert (vault.root / "agent.toml").read_text().endswith("# tweaked\n")
    # A file of the current folder is still found there first.
    (sub / "2026-11-20.md").write_text("# 2026-11-20\n")
    p = agent_proc("edit", "2026-11-20.md", cwd=sub, env={"VISUAL": ed})
    assert p.returncode == 0, p.stderr
    assert subjects(vault)[0] == "edit: memory/2026-11-20.md by hand"
