"""`agent skills`: list and show the skills the agent has."""

from __future__ import annotations


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
