"""The tool registry and the built-in tools, called as the loop calls them (real vault,
real files, staged writes applied under the real lock)."""

from __future__ import annotations

import pkgutil
import sys
from datetime import datetime, timedelta, timezone
from typing import Literal

import pytest

import agent.chat.tools
from agent.vault.change import Change
from agent.vault.staged import StagedVault
from agent.chat.tools import registry
from agent.chat.tools.files import edit_file, list_dir, read_file, write_file
from agent.chat.tools.memory import memory_get, remember
from agent.stores.memory import add_fact
from agent.chat.tools.registry import REGISTRY, ToolContext, ToolError, tool, use_context
from conftest import subjects

NOW = datetime(2026, 11, 20, 9, 30, tzinfo=timezone(timedelta(hours=1)))


@pytest.fixture
def staged(vault):
    s = StagedVault(vault)
    with use_context(ToolContext(s, "cli/default", NOW)):
        yield s


def save(vault, staged, message=Change("test", "apply")):  # noqa: B008 - a frozen dataclass
    with vault.locked():
        staged.apply()
        return vault.commit(message)


# ---- the decorator -------------------------------------------------------------------


def test_schema_from_type_hints_and_docstring():
    def plan_trip(city: str, days: int, budget: float = 100.0, tags: list[str] | None = None,
                  pace: Literal["slow", "fast"] = "slow", note: str | None = None,
                  confirm: bool = False) -> str:
        """Plan a trip to a city.

        Longer explanation for the model.

        Args:
            city: Where to go.
            days: How many days,
                counted from arrival.
            budget: Euros per day.
            tags: Interests.
            pace: How packed the days are.
            note (str): Anything else.
            confirm: Ask before booking.

        Returns:
            A plan.
        """
        return f"{city} {days}"

    try:
        assert tool(plan_trip) is plan_trip              # returned unchanged
        assert plan_trip("Kyoto", 3) == "Kyoto 3"
        d = REGISTRY["plan_trip"].definition()
    finally:
        REGISTRY.pop("plan_trip", None)
    assert d.name == "plan_trip"
    assert d.description == "Plan a trip to a city.\n\nLonger explanation for the model."
    s = d.schema
    assert s["required"] == ["city", "days"] and s["additionalProperties"] is False
    p = s["properties"]
    assert p["city"] == {"type": "string", "description": "Where to go."}
    assert p["days"] == {"type": "integer", "description": "How many days, counted from arrival."}
    assert p["budget"] == {"type": "number", "description": "Euros per day.", "default": 100.0}
    # pydantic's schema of the signature: an optional parameter may be sent null
    assert p["tags"] == {"anyOf": [{"type": "array", "items": {"type": "string"}},
                                   {"type": "null"}],
                         "description": "Interests.", "default": None}
    assert p["pace"] == {"enum": ["slow", "fast"], "type": "string",
                         "description": "How packed the days are.", "default": "slow"}
    assert p["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}],
                         "description": "Anything else.", "default": None}
    assert p["confirm"] == {"type": "boolean", "description": "Ask before booking.", "default": False}


def test_decorator_with_name_and_refusals():
    def f(x: str) -> str:
        """Echo.

        Args:
            x: Text.
        """
        return x

    try:
        assert tool(name="echo_it")(f) is f and "echo_it" in REGISTRY
    finally:
        REGISTRY.pop("echo_it", None)

    def no_doc(x: str):
        return x

    def no_hint(x):
        """Doc."""

    def star(*args: str):
        """Doc."""

    for bad, msg in [(no_doc, "needs a docstring"), (no_hint, "needs a type hint"),
                     (star, "cannot be described")]:
        with pytest.raises(ValueError, match=msg):
            tool(bad)
    assert not {"no_doc", "no_hint", "star"} & set(REGISTRY)


def test_input_checking_names_the_problem():
    t = registry.load_all()["remember"]
    assert registry.check_input(t, {"text": "x"}) == {"text": "x"}
    for data, msg in [({"txt": "x"}, "remember has no parameter txt"),
                      ({}, "remember needs text"),
                      ({"text": 3}, "text must be a string, got 3"),
                      ({"text": "x", "target": "diary"}, 'target must be one of "daily"'),
                      ({"text": "x", "section": 5}, "section must be a string"),
                      ("just text", "must be a JSON object")]:
        with pytest.raises(registry.ToolInputError, match=msg):
            registry.check_input(t, data)
    g = registry.load_all()["memory_get"]
    assert registry.check_input(g, {"path": "a", "lines": 5.0}) == {"path": "a", "lines": 5}
    with pytest.raises(registry.ToolInputError, match="lines must be a whole number"):
        registry.check_input(g, {"path": "a", "lines": True})


def test_every_module_of_the_tools_package_is_loaded():
    registry.load_all()
    names = [m.name for m in pkgutil.iter_modules(agent.chat.tools.__path__)
             if m.name != "registry" and not m.name.startswith("_")]
    assert {"files", "memory", "skills"} <= set(names)
    for name in names:
        assert f"agent.chat.tools.{name}" in sys.modules
    modules = {t.fn.__module__ for t in REGISTRY.values()}
    assert {"agent.chat.tools.files", "agent.chat.tools.memory", "agent.chat.tools.skills"} <= modules


def test_a_raising_tool_is_an_error_result_and_logged(vault, staged):
    @tool
    def buggy(n: int) -> str:
        """Divide by zero.

        Args:
            n: A number.
        """
        return str(n / 0)

    logged = []
    try:
        text, is_error = registry.call("buggy", {"n": 1}, log=lambda name, e: logged.append((name, e)))
    finally:
        REGISTRY.pop("buggy", None)
    assert is_error and text == "buggy failed: ZeroDivisionError: division by zero"
    assert logged and logged[0][0] == "buggy"


# ---- confinement ------------------------------------------------------------------------


def test_paths_outside_the_vault_are_refused(vault, staged, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("secret")
    (vault.root / "out").symlink_to(outside)
    (vault.root / "notes").mkdir()
    (vault.root / "notes" / "ok.md").write_text("fine\n")
    (vault.root / "inside-link.md").symlink_to(vault.root / "notes" / "ok.md")
    for call, msg in [(lambda: read_file("../outside/f.txt"), "outside the vault"),
                      (lambda: read_file("out/f.txt"), "outside the vault"),
                      (lambda: read_file(str(outside / "f.txt")), "absolute paths are refused"),
                      (lambda: read_file("~/x"), "absolute paths are refused"),
                      (lambda: read_file(".git/HEAD"), ".git/ is off limits"),
                      (lambda: read_file("notes/../.git/HEAD"), ".git/ is off limits"),
                      (lambda: list_dir(".agent"), ".agent/ is off limits"),
                      (lambda: write_file("out/new.txt", "x"), "outside the vault"),
                      (lambda: write_file("", "x"), "Give a path"),
                      (lambda: write_file(".", "x"), "the vault folder itself"),
                      (lambda: write_file("sessions/cli/x/2026-11.jsonl", "x"), "session transcripts"),
                      (lambda: edit_file("../../etc/passwd", "root", "x"), "outside the vault")]:
        with pytest.raises(ToolError, match=msg):
            call()
    # Inside the vault, `..` that stays inside and symlinks to inside files are fine.
    assert read_file("notes/../notes/ok.md") == "fine\n"
    assert read_file("inside-link.md") == "fine\n"
    assert staged.staged_paths() == []
    assert (outside / "f.txt").read_text() == "secret" and not (outside / "new.txt").exists()


def test_list_dir_hides_git_and_agent_state(vault, staged):
    listing = list_dir(".")
    assert "MEMORY.md  (" in listing and "memory/" in listing
    names = [line.split("  (")[0] for line in listing.splitlines()]
    assert ".git/" not in names and ".agent/" not in names and ".gitignore" in names
    write_file("drafts/a.md", "x")
    assert "drafts/  (new, not saved yet)" in list_dir(".")
    assert list_dir("drafts") == "a.md  (new, not saved yet)"


# ---- staged writes --------------------------------------------------------------------------


def test_writes_are_staged_until_saved_and_reads_see_them(vault, staged):
    head = vault.head()
    write_file("notes/a.md", "one\n")
    edit_file("notes/a.md", "one", "two")
    assert read_file("notes/a.md") == "two\n"
    assert not (vault.root / "notes/a.md").exists() and vault.dirty_paths() == []
    assert staged.changed() == ["notes/a.md"]
    sha = save(vault, staged)
    assert sha and vault.head() != head
    assert (vault.root / "notes/a.md").read_text() == "two\n"
    assert vault.git("show", "--name-only", "--format=", "HEAD").split() == ["notes/a.md"]


def test_staged_edit_is_replayed_on_the_file_as_it_is_when_saved(vault, staged):
    remember("The user's sister is Ana", target="memory", section="Family")
    # Meanwhile the person edits MEMORY.md by hand (another line).
    path = vault.root / "MEMORY.md"
    path.write_text(path.read_text().replace("## Facts", "## Facts\n- Hand fact"))
    save(vault, staged, Change("chat", "test", scope="cli/default"))
    text = path.read_text()
    assert "- Hand fact" in text and text.endswith("## Family\n\n- The user's sister is Ana\n")
    assert subjects(vault)[:2] == ["chat(cli/default): test", "edit: MEMORY.md by hand"]


def test_an_edit_whose_text_vanished_is_skipped_and_reported(vault, staged):
    (vault.root / "notes").mkdir()
    (vault.root / "notes/a.md").write_text("alpha\nbeta\n")
    vault.git("add", "notes/a.md")
    vault.commit(Change("test", "add"), paths=["notes/a.md"])
    edit_file("notes/a.md", "beta", "gamma")
    (vault.root / "notes/a.md").write_text("alpha\nBETA by hand\n")
    save(vault, staged)
    assert (vault.root / "notes/a.md").read_text() == "alpha\nBETA by hand\n"
    assert staged.problems and "notes/a.md: not changed" in staged.problems[0]


# ---- memory tools -----------------------------------------------------------------------------


def test_remember_daily_appends_a_timed_bullet(vault, staged):
    assert remember("Call  the\ndentist") == "Noted in memory/2026-11-20.md: - 09:30 Call the dentist"
    remember("Buy milk", target="daily", section="ignored")
    save(vault, staged)
    assert (vault.root / "memory/2026-11-20.md").read_text() == \
        "# 2026-11-20\n\n- 09:30 Call the dentist\n- 09:30 Buy milk\n"


def test_remember_into_memory_changes_only_its_lines(vault, staged):
    path = vault.root / "MEMORY.md"
    original = "# Memory\n\nIntro  with  odd   spacing.\n\n## Facts\n* star bullet\n\n## Travel\n- Kyoto\n"
    path.write_text(original)
    with vault.locked():
        pass                                    # commits the hand edit
    assert remember("Likes ramen", target="memory", section="Facts") == \
        "Added to MEMORY.md under Facts: - Likes ramen"
    remember("Visited Nara", target="memory", section="travel")     # headings match any case
    remember("Has a bike", target="memory", section="Things")       # a new section at the end
    assert remember("Likes ramen", target="memory", section="Facts") == \
        "MEMORY.md already has: - Likes ramen"
    save(vault, staged)
    assert path.read_text() == ("# Memory\n\nIntro  with  odd   spacing.\n\n## Facts\n* star bullet\n"
                                "- Likes ramen\n\n## Travel\n- Kyoto\n- Visited Nara\n\n"
                                "## Things\n\n- Has a bike\n")
    diff = vault.git("show", "--format=", "--unified=0", "HEAD", "--", "MEMORY.md")
    removed = [l for l in diff.splitlines() if l.startswith("-") and not l.startswith("---")]
    assert removed == []


@pytest.mark.parametrize("before, section, after", [
    ("# M\n\n## Facts\n", "Facts", "# M\n\n## Facts\n\n- X\n"),
    ("# M\n\n## Facts\n\n## Next\n- y\n", "Facts", "# M\n\n## Facts\n\n- X\n\n## Next\n- y\n"),
    ("# M\n\n## Facts\n## Next\n", "Facts", "# M\n\n## Facts\n\n- X\n\n## Next\n"),
    ("# M\n\n## A\n- a\n\n## B\n- b\n", None, "# M\n\n## A\n- a\n\n## B\n- b\n- X\n"),
    ("# M\n\n## A\n### Sub\n- s\n## B\n", "A", "# M\n\n## A\n### Sub\n- s\n- X\n## B\n"),
    (None, None, "# Memory\n\n- X\n"),
    ("no newline at end", "S", "no newline at end\n\n## S\n\n- X\n"),
])
def test_add_fact_placement(before, section, after):
    assert add_fact(before, "X", section, "# Memory") == after


def test_memory_get_numbers_lines(vault, staged):
    out = memory_get("MEMORY.md", start_line=2, lines=3)
    assert out.splitlines()[0] == "MEMORY.md lines 2-4 of 6:"
    assert out.splitlines()[2].startswith("3  Long-term facts")
    assert "nothing at line 99" in memory_get("MEMORY.md", start_line=99)
    with pytest.raises(ToolError, match="no such file"):
        memory_get("nope.md")
