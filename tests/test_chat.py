"""`agent chat` and `agent archive` end to end: the real CLI, the real SDK, the fake API,
real git. Assertions are on files, `git log` and the requests the fake server received."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Literal

import pytest

from agent.stores import archive
from agent.stores import window
from agent.llm import make_provider
from agent.chat.turn import run_turn
from conftest import ROOT, subjects
from fakeanthropic import error, json_reply, reply, text, tool_use
from helpers import Terminal, session_lines

NOW = datetime(2026, 11, 20, 14, 5, tzinfo=timezone(timedelta(hours=1)))


def trailers(vault, rev="HEAD") -> dict:
    out = vault.git("log", "-1", "--format=%(trailers:only,unfold)", rev)
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def changed_files(vault, rev="HEAD") -> list[str]:
    return sorted(vault.git("show", "--name-only", "--format=", rev).split())


def set_toml(vault, old: str, new: str) -> None:
    path = vault.root / "agent.toml"
    text_ = path.read_text()
    assert old in text_
    path.write_text(text_.replace(old, new))


def tool_results(request) -> list[dict]:
    last = request.body["messages"][-1]
    return [b for b in last["content"] if b.get("type") == "tool_result"]


# ---- one turn -------------------------------------------------------------------------


def test_one_message_is_answered_streamed_and_committed(fake_anthropic, vault, run):
    fake_anthropic.add(reply("Kyoto in April is lovely."))
    r = run("chat", "-m", "Plan the Kyoto trip for April, please")
    assert r.exit_code == 0, r.output
    assert "Kyoto in April is lovely." in r.output
    assert subjects(vault)[0] == "chat(cli/default): Plan the Kyoto trip for April, please"
    t = trailers(vault)
    assert t["Session"] == "cli/default" and t["Turn"] == "1"
    assert t["Model"] == "claude-sonnet-5-5"
    assert t["Tokens"].endswith("cache write") and " in, " in t["Tokens"]
    assert vault.git("log", "-1", "--format=%an").strip() == "agent"
    lines = session_lines(vault)
    assert [(m["role"], m["content"], m["turn"]) for m in lines] == [
        ("user", "Plan the Kyoto trip for April, please", 1),
        ("assistant", "Kyoto in April is lovely.", 1)]
    for m in lines:
        assert m["id"] and datetime.fromisoformat(m["ts"]).utcoffset() is not None
    req = fake_anthropic.calls()[0].body
    assert req["stream"] is True and req["model"] == "claude-sonnet-5-5"
    assert {t["name"] for t in req["tools"]} >= {
        "remember", "memory_search", "memory_get", "read_file", "write_file", "edit_file",
        "list_dir", "load_skill"}


def test_long_message_subject_is_shortened(fake_anthropic, vault, run):
    fake_anthropic.add(reply("ok"))
    msg = "please look at " + "the very long list of things " * 10
    assert run("chat", "-m", msg).exit_code == 0
    subject = subjects(vault)[0]
    assert subject.startswith("chat(cli/default): please look at the very long")
    assert subject.endswith("...") and len(subject) < 90


def test_piped_stdin_is_one_message(fake_anthropic, vault, run):
    fake_anthropic.add(reply("Piped answer"))
    r = run("chat", "--session", "cli/pipe", input="what is on stdin?\n")
    assert r.exit_code == 0 and "Piped answer" in r.output
    assert session_lines(vault, "cli/pipe")[0]["content"] == "what is on stdin?\n"
    assert subjects(vault)[0] == "chat(cli/pipe): what is on stdin?"


def test_second_turn_replays_the_window(fake_anthropic, vault, run):
    fake_anthropic.add(reply("First answer"), reply("Second answer"))
    run("chat", "-m", "first question")
    run("chat", "-m", "second question")
    msgs = fake_anthropic.calls()[1].body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[0]["content"] == [{"type": "text", "text": "first question"}]
    assert msgs[1]["content"][0]["text"] == "First answer"
    assert msgs[2]["content"][-1]["text"] == "second question"
    assert trailers(vault)["Turn"] == "2"


def test_model_option_and_session_option(fake_anthropic, vault, run):
    fake_anthropic.add(reply("hi"))
    assert run("chat", "--session", "telegram/42", "--model", "claude-haiku-4-5",
               "-m", "hello").exit_code == 0
    assert fake_anthropic.last.body["model"] == "claude-haiku-4-5"
    assert (vault.root / "sessions/telegram/42").is_dir()
    assert subjects(vault)[0] == "chat(telegram/42): hello"


def test_bad_session_key_is_refused(fake_anthropic, vault, run):
    r = run("chat", "--session", "../etc", "-m", "hi")
    assert r.exit_code == 1 and "CHANNEL/CHAT" in r.output
    assert fake_anthropic.calls() == []


# ---- tools in a turn --------------------------------------------------------------------


def test_two_tools_at_once_and_memory_in_the_turns_commit(fake_anthropic, vault, run):
    fake_anthropic.add(
        reply(text("Noting both."),
              tool_use("remember", {"text": "Booked the ryokan for 12 April"}, id="t1"),
              tool_use("remember", {"text": "The user is vegetarian", "target": "user",
                                    "section": "Food"}, id="t2")),
        reply("Done: both kept."))
    before = vault.head()
    r = run("chat", "-m", "I booked the ryokan for 12 April. Also, I'm vegetarian.")
    assert r.exit_code == 0, r.output
    assert "Done: both kept." in r.output
    # One commit holds the transcript and both memory changes.
    assert vault.git("rev-list", "--count", f"{before}..HEAD").strip() == "1"
    files = changed_files(vault)
    assert "USER.md" in files and any(f.startswith("memory/") for f in files)
    assert any(f.startswith("sessions/cli/default/") for f in files)
    user_md = (vault.root / "USER.md").read_text()
    assert user_md.endswith("## Food\n\n- The user is vegetarian\n")
    daily = next((vault.root / "memory").glob("*.md")).read_text()
    assert "Booked the ryokan for 12 April" in daily
    # Both results went back in one message, in the order of the calls.
    results = tool_results(fake_anthropic.calls()[1])
    assert [b["tool_use_id"] for b in results] == ["t1", "t2"]
    assert not any(b.get("is_error") for b in results)
    assert "USER.md" in results[1]["content"]
    # The transcript replays exactly: assistant blocks and the results.
    lines = session_lines(vault)
    assert [m["role"] for m in lines] == ["user", "assistant", "user", "assistant"]
    assert [b["type"] for b in lines[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert lines[2]["content"][0]["type"] == "tool_result"


def test_tool_calls_of_one_reply_run_concurrently(fake_anthropic, vault, tmp_path):
    """Two tools of one reply run at the same time: each waits for the other to start.
    (How long they take is measured by scripts/bench_turn.py, not asserted here.)"""
    from agent.chat.tools.registry import REGISTRY, tool

    both_started = threading.Barrier(2, timeout=30)

    @tool
    def slow_probe(label: str) -> str:
        """Wait until the other call has started too.

        Args:
            label: Anything.
        """
        both_started.wait()      # run one after the other, this breaks after 30 s
        return f"{label} done"

    try:
        fake_anthropic.add(reply(tool_use("slow_probe", {"label": "a"}),
                                 tool_use("slow_probe", {"label": "b"})), reply("ok"))
        result = run_turn(vault, make_provider(), "cli/default", "go", NOW)
    finally:
        REGISTRY.pop("slow_probe", None)
    assert result.error is None
    assert [b["content"] for b in tool_results(fake_anthropic.calls()[1])] == ["a done", "b done"]


def test_a_tool_error_goes_back_to_the_model_and_the_turn_goes_on(fake_anthropic, vault, run):
    fake_anthropic.add(reply(tool_use("read_file", {"path": "no/such.md"}, id="t1"),
                             tool_use("edit_file", {"path": "MEMORY.md", "old": "not there",
                                                    "new": "x"}, id="t2")),
                       reply("That file does not exist."))
    r = run("chat", "-m", "read no/such.md")
    assert r.exit_code == 0 and "That file does not exist." in r.output
    results = tool_results(fake_anthropic.calls()[1])
    assert all(b["is_error"] for b in results)
    assert "no/such.md: no such file" in results[0]["content"]
    assert "not found" in results[1]["content"]
    assert "chat(cli/default)" in subjects(vault)[0]


def test_a_reply_breaking_the_tool_schema_is_an_error_result(fake_anthropic, vault, run):
    fake_anthropic.add(
        reply(tool_use("remember", {"txt": "wrong key"}, id="t1"),
              tool_use("remember", {"text": "x", "target": "diary"}, id="t2"),
              tool_use("memory_get", {"path": "MEMORY.md", "lines": "ten"}, id="t3"),
              tool_use("fly_to_moon", {}, id="t4")),
        reply("Sorry, let me try again."))
    r = run("chat", "-m", "remember something")
    assert r.exit_code == 0, r.output
    results = {b["tool_use_id"]: b for b in tool_results(fake_anthropic.calls()[1])}
    assert all(b["is_error"] for b in results.values())
    assert "no parameter txt" in results["t1"]["content"]
    assert 'target must be one of "daily", "memory", "user"' in results["t2"]["content"]
    assert "lines must be a whole number" in results["t3"]["content"]
    assert "There is no tool 'fly_to_moon'" in results["t4"]["content"]
    assert not list((vault.root / "memory").glob("*.md"))


def test_a_wrong_typed_argument_is_one_line_naming_the_field(fake_anthropic, vault, run):
    fake_anthropic.add(
        reply(tool_use("spawn_agent", {"prompt": "look", "readonly": "yes"}, id="t1"),
              tool_use("memory_get", {"path": "MEMORY.md", "start_line": 2.5}, id="t2"),
              tool_use("memory_search", {"query": ["kyoto"]}, id="t3")),
        reply("Sorry."))
    r = run("chat", "-m", "look it up")
    assert r.exit_code == 0, r.output
    results = {b["tool_use_id"]: b["content"] for b in tool_results(fake_anthropic.calls()[1])}
    assert results == {"t1": 'readonly must be true or false, got "yes"',
                       "t2": "start_line must be a whole number, got 2.5",
                       "t3": 'query must be a string, got ["kyoto"]'}


def test_the_tool_schema_sent_is_the_one_of_the_type_hints(fake_anthropic, vault):
    from agent.chat.tools.registry import REGISTRY, tool

    @tool
    def trip_probe(city: str, nights: int | None = None, tags: list[str] | None = None,
                   pace: Literal["slow", "fast"] = "slow") -> str:
        """Plan a trip.

        Args:
            city: Where to go.
            nights: How many nights.
            tags: Interests.
            pace: How packed the days are.
        """
        return city

    try:
        fake_anthropic.add(reply("ok"))
        run_turn(vault, make_provider(), "cli/default", "go", NOW)
    finally:
        REGISTRY.pop("trip_probe", None)
    sent = {t["name"]: t for t in fake_anthropic.calls()[0].body["tools"]}["trip_probe"]
    assert sent["description"] == "Plan a trip."
    # pydantic's schema of the signature: an optional parameter is anyOf its type or null
    assert sent["input_schema"] == {
        "type": "object", "additionalProperties": False, "required": ["city"],
        "properties": {
            "city": {"type": "string", "description": "Where to go."},
            "nights": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None,
                       "description": "How many nights."},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}},
                               {"type": "null"}], "default": None, "description": "Interests."},
            "pace": {"enum": ["slow", "fast"], "type": "string", "default": "slow",
                     "description": "How packed the days are."}}}


def test_path_escapes_are_refused(fake_anthropic, vault, run, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    (vault.root / "link").symlink_to(secret)
    attempts = [("read_file", {"path": "../secret.txt"}), ("read_file", {"path": str(secret)}),
                ("read_file", {"path": "link"}), ("read_file", {"path": ".git/config"}),
                ("write_file", {"path": ".agent/evil", "content": "x"}),
                ("write_file", {"path": "../evil.txt", "content": "x"}),
                ("list_dir", {"path": ".."}),
                ("edit_file", {"path": "sessions/cli/default/2026-11.jsonl", "old": "a", "new": "b"})]
    fake_anthropic.add(reply(*[tool_use(n, i, id=f"t{k}") for k, (n, i) in enumerate(attempts)]),
                       reply("Refused."))
    assert run("chat", "-m", "escape").exit_code == 0
    results = tool_results(fake_anthropic.calls()[1])
    assert len(results) == len(attempts) and all(b["is_error"] for b in results)
    text_ = "\n".join(b["content"] for b in results)
    assert "TOP-SECRET-CONTENT" not in text_
    assert "outside the vault" in results[0]["content"]
    assert "absolute paths are refused" in results[1]["content"]
    assert "outside the vault" in results[2]["content"]
    assert ".git/ is off limits" in results[3]["content"]
    assert ".agent/ is off limits" in results[4]["content"]
    assert "written only by the conversation" in results[7]["content"]
    assert not (tmp_path / "evil.txt").exists() and not (vault.state / "evil").exists()


def test_file_tools_write_read_and_edit_within_one_turn(fake_anthropic, vault, run):
    fake_anthropic.add(
        reply(tool_use("write_file", {"path": "notes/trip.md", "content": "# Trip\n\nday 1: Kyoto"})),
        reply(tool_use("edit_file", {"path": "notes/trip.md", "old": "day 1: Kyoto",
                                     "new": "day 1: Kyoto\nday 2: Nara"})),
        reply(tool_use("read_file", {"path": "notes/trip.md"}), tool_use("list_dir", {"path": "notes"})),
        reply("Written."))
    assert run("chat", "-m", "plan it in notes/trip.md").exit_code == 0
    assert (vault.root / "notes/trip.md").read_text() == "# Trip\n\nday 1: Kyoto\nday 2: Nara\n"
    read, listing = tool_results(fake_anthropic.calls()[3])
    assert read["content"].endswith("day 2: Nara\n")
    assert listing["content"].startswith("trip.md")
    assert "notes/trip.md" in changed_files(vault)


def test_iteration_cap_ends_a_runaway_loop(fake_anthropic, vault, run):
    set_toml(vault, "max_iterations = 12", "max_iterations = 3")
    fake_anthropic.default_reply = reply(tool_use("list_dir", {}))
    r = run("chat", "-m", "loop forever")
    assert r.exit_code == 1
    assert "limit of 3 model calls" in r.output
    assert len(fake_anthropic.calls()) == 3
    assert subjects(vault)[0] == "chat(cli/default): loop forever"


def test_hand_edit_is_committed_first_and_kept(fake_anthropic, vault, run):
    memory_md = vault.root / "MEMORY.md"
    memory_md.write_text(memory_md.read_text() + "- Hand-written fact\n")
    fake_anthropic.add(reply(tool_use("remember", {"text": "Agent fact", "target": "memory",
                                                   "section": "Facts"})), reply("ok"))
    assert run("chat", "-m", "remember agent fact").exit_code == 0
    assert subjects(vault)[:2] == ["chat(cli/default): remember agent fact",
                                   "edit: MEMORY.md by hand"]
    assert vault.git("log", "-1", "--format=%an", "HEAD~1").strip() == "Test User"
    assert memory_md.read_text().endswith("## Facts\n- Hand-written fact\n- Agent fact\n")
    diff = vault.git("show", "--format=", "HEAD", "--", "MEMORY.md")
    assert [l for l in diff.splitlines() if l.startswith(("+", "-")) and not l.startswith(("+++", "---"))] \
        == ["+- Agent fact"]


# ---- failures ---------------------------------------------------------------------------


def test_no_api_key_exits_2_with_one_line(vault, run):
    r = run("chat", "-m", "hello")
    assert r.exit_code == 2
    assert r.output.strip() == "Error: No API key: set ANTHROPIC_API_KEY"
    assert subjects(vault) == ["init: new vault"]


def test_api_failure_keeps_the_message_committed(fake_anthropic, vault, run):
    fake_anthropic.add(error(400, "invalid_request_error", "prompt is too long"))
    r = run("chat", "-m", "a question that fails")
    assert r.exit_code == 1
    assert "invalid_request_error" in r.output and "prompt is too long" in r.output
    assert subjects(vault)[0] == "chat(cli/default): a question that fails"
    (line,) = session_lines(vault)
    assert line["role"] == "user" and line["content"] == "a question that fails"
    assert "prompt is too long" in line["error"]
    # The next turn carries the unanswered message and the new one in one user message.
    fake_anthropic.add(reply("Now it works"))
    assert run("chat", "-m", "try again").exit_code == 0
    (msg,) = fake_anthropic.last.body["messages"]
    assert msg["role"] == "user"
    assert [b["text"] for b in msg["content"] if not b["text"].startswith("<context>")] == [
        "a question that fails", "try again"]


def test_fallback_model_on_overloaded(fake_anthropic, vault, run):
    set_toml(vault, 'fallbacks = ["claude-sonnet-4-6"]', 'fallbacks = ["claude-haiku-4-5", "claude-sonnet-4-6"]')
    fake_anthropic.default_reply = lambda req: (
        reply("From the fallback") if req["model"] == "claude-sonnet-4-6"
        else error(529, "overloaded_error") if req["model"] == "claude-sonnet-5-5"
        else error(404, "not_found_error", f"model: {req['model']}"))
    r = run("chat", "-m", "hello")
    assert r.exit_code == 0, r.output
    assert "From the fallback" in r.output
    models = [c.body["model"] for c in fake_anthropic.calls()]
    assert models[-1] == "claude-sonnet-4-6"
    assert models.index("claude-haiku-4-5") > models.index("claude-sonnet-5-5")
    assert trailers(vault)["Model"] == "claude-sonnet-4-6"


def test_all_models_overloaded_is_a_plain_error(fake_anthropic, vault, run):
    fake_anthropic.default_reply = error(529, "overloaded_error", "Overloaded")
    r = run("chat", "-m", "hello")
    assert r.exit_code == 1
    # (The fake server's own threads may log dropped keep-alive connections to stderr.)
    mine = r.output.strip().splitlines()[-2:]
    assert mine == ["Error: The Anthropic API failed (HTTP 529, overloaded_error): Overloaded",
                    f"Your message is saved ({vault.head()[:7]})."]
    assert subjects(vault)[0] == "chat(cli/default): hello"


# ---- interrupting --------------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_during_a_reply_keeps_the_partial_reply(fake_anthropic, vault):
    words = " ".join(f"word{i}" for i in range(200))
    fake_anthropic.add(reply(words, chunk_delay=0.05))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat",
                             "-m", "tell me a long story"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    first = proc.stdout.read(17)         # the reply has started streaming
    assert first == "word0 word1 word2"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    lines = session_lines(vault)
    assert [m["role"] for m in lines] == ["user", "assistant"]
    partial = lines[1]
    assert partial["interrupted"] is True
    assert partial["content"].startswith("word0 word1") and partial["content"] != words
    assert subjects(vault)[0] == "chat(cli/default): tell me a long story"
    assert trailers(vault)["Interrupted"] == "yes"
    # What the partial stream reported (its input tokens), not 0.
    assert not trailers(vault)["Tokens"].startswith("0 in"), trailers(vault)["Tokens"]
    assert vault.dirty_paths() == []
    # The next turn shows the model its partial reply, marked as interrupted.
    fake_anthropic.add(reply("Sorry, go on?"))
    from click.testing import CliRunner
    from agent.cli.app import cli
    assert CliRunner().invoke(cli, ["--vault", str(vault.root), "chat", "-m", "stop"]).exit_code == 0
    assistant = fake_anthropic.last.body["messages"][1]
    assert assistant["content"][-1]["text"] == "[interrupted by the user]"


def _waiting_for_lock(pid: int) -> bool:
    """Whether process `pid` waits for an flock (a blocked request in /proc/locks)."""
    with open("/proc/locks", encoding="ascii") as f:
        return any("->" in line and f" {pid} " in line for line in f)


@pytest.mark.slow
def test_ctrl_c_while_the_turn_is_saved_takes_effect_once_it_is(fake_anthropic, vault):
    # The save waits for the vault lock another process holds (here the test, as `agent
    # serve` would); Ctrl-C then must not be lost: the turn is saved, and the command
    # leaves with 130 as Ctrl-C makes it.
    import fcntl
    fake_anthropic.add(reply("Saved in full."))
    vault.state.mkdir(exist_ok=True)
    fd = os.open(vault.state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    fcntl.flock(fd, fcntl.LOCK_EX)      # (the prompt is built and the model asked without it)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root),
                                 "chat", "-m", "hello"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env,
                                stdin=subprocess.DEVNULL)
        assert proc.stdout.read(len("Saved in full.")) == "Saved in full."
        while not _waiting_for_lock(proc.pid):
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert subjects(vault)[0] == "chat(cli/default): hello"
    assert [m["content"] for m in session_lines(vault)] == ["hello", "Saved in full."]
    assert vault.dirty_paths() == []


# ---- the prompt ----------------------------------------------------------------------------


def test_system_blocks_are_byte_identical_between_turns_and_hit_the_cache(fake_anthropic, vault, run):
    fake_anthropic.add(reply("one"), reply("two"), reply("three"))
    run("chat", "-m", "first")
    run("chat", "-m", "second")
    a, b = (c.body for c in fake_anthropic.calls()[:2])
    assert json.dumps(a["system"]) == json.dumps(b["system"])
    assert json.dumps(a["tools"]) == json.dumps(b["tools"])
    assert any("cache_control" in blk for blk in a["system"])
    assert "AGENTS.md" in a["system"][0]["text"] and "MEMORY.md" in a["system"][1]["text"]
    t = trailers(vault)["Tokens"]
    read = int(t.split(" cache read")[0].rsplit(" ", 1)[1])
    assert read > 1000, t          # tools + system + the first turn came from the cache
    # A changed memory file changes the system prompt: the cache is written again.
    (vault.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n- new fact\n")
    run("chat", "-m", "third")
    c = fake_anthropic.calls()[2].body
    assert "new fact" in c["system"][1]["text"]
    assert c["system"][0] == b["system"][0]


def test_prompt_carries_memory_files_daily_notes_and_the_time(fake_anthropic, vault, run,
                                                              fixed_now):
    (vault.root / "USER.md").write_text("# User\n\n## About\n- Name: Ana\n")
    today = fixed_now.date()                      # the day the chat below runs on
    (vault.root / "memory").mkdir(exist_ok=True)
    (vault.root / f"memory/{today - timedelta(days=1):%Y-%m-%d}.md").write_text("# y\n\n- 09:00 yesterday thing\n")
    (vault.root / f"memory/{today:%Y-%m-%d}.md").write_text("# t\n\n- 10:00 today thing\n")
    (vault.root / f"memory/{today - timedelta(days=2):%Y-%m-%d}.md").write_text("# o\n\n- 10:00 older thing\n")
    fake_anthropic.add(reply("hi Ana"))
    run("chat", "-m", "hello")
    body = fake_anthropic.last.body
    system = "\n".join(b["text"] for b in body["system"])
    assert "Name: Ana" in system and "yesterday thing" in system and "today thing" in system
    assert "older thing" not in system
    order = ['<file path="AGENTS.md">', '<file path="USER.md">', '<file path="MEMORY.md">',
             "# Skills", "yesterday thing", "today thing"]
    assert [system.index(s) for s in order] == sorted(system.index(s) for s in order)
    context_block = body["messages"][-1]["content"][0]["text"]
    assert context_block.startswith("<context>") and f"Now: {today:%Y-%m-%d}" in context_block


def test_retrieved_memories_enter_the_prompt_but_not_what_the_window_holds(fake_anthropic, vault, run, tmp_path):
    transcript = tmp_path / "old.jsonl"
    transcript.write_text(json.dumps({"session": "import/old", "role": "user", "id": "old-1",
                                      "content": "My dentist is Dr Ramirez on Elm Street",
                                      "ts": "2025-03-01T10:00:00+00:00"}) + "\n")
    assert run("import", str(transcript)).exit_code == 0
    fake_anthropic.add(reply("Dr Ramirez."), reply("Yes, Ramirez."))
    run("chat", "-m", "Who is my dentist Ramirez?")
    ctx1 = fake_anthropic.calls()[0].body["messages"][-1]["content"][0]["text"]
    assert "Dr Ramirez on Elm Street" in ctx1 and "sessions/import/old" in ctx1
    # The window now holds "Who is my dentist Ramirez?": it is not retrieved again.
    run("chat", "-m", "Ramirez dentist again")
    ctx2 = fake_anthropic.calls()[1].body["messages"][-1]["content"][0]["text"]
    assert "Who is my dentist" not in ctx2
    assert "Dr Ramirez on Elm Street" in ctx2


def test_the_working_set_carries_memories_to_a_follow_up_and_a_new_search_replaces_it(
        fake_anthropic, vault, run, tmp_path):
    transcript = tmp_path / "old.jsonl"
    transcript.write_text("".join(json.dumps(
        {"session": "import/old", "role": "user", "id": f"old-{i}", "content": text,
         "ts": f"2025-03-0{i}T10:00:00+00:00"}) + "\n" for i, text in enumerate(
        ["We booked the ryokan in Kyoto for the cherry blossoms", "My dentist is Dr Ramirez on Elm Street"], 1)))
    assert run("import", str(transcript)).exit_code == 0
    fake_anthropic.add(*(reply(f"answer {i}") for i in range(4)))

    def memories(call):
        ctx = fake_anthropic.calls()[call].body["messages"][-1]["content"][0]["text"]
        return ctx.split("<retrieved_memories>")[1] if "<retrieved_memories>" in ctx else ""

    def quotes(call):
        return [json.loads(line)["quote"] for line in memories(call).splitlines()
                if line.startswith("{")]

    run("chat", "-m", "Where did we stay in Kyoto?")
    assert quotes(0) == ["We booked the ryokan in Kyoto for the cherry blossoms"]
    saved = json.loads((vault.root / ".agent/working/cli/default.json").read_text())
    assert ["old-1"] == saved["memories"][0]["ids"][:1]
    # A follow-up that names nothing to search for gets the same memories again...
    run("chat", "-m", "When was that?")
    assert quotes(1) == quotes(0)
    # ...small talk gets none (and costs no tokens)...
    run("chat", "-m", "thanks!")
    assert memories(2) == ""
    # ...and a search that finds something replaces them.
    run("chat", "-m", "Who is my dentist?")
    assert quotes(3) == ["My dentist is Dr Ramirez on Elm Street"]
    assert "ids" not in memories(3)                 # bookkeeping never reaches the model
    # /new starts afresh: no working set any more.
    from agent.ops.sessions import new_conversation

    fake_anthropic.add(json_reply({"topic": "Kyoto and the dentist", "importance": 0.3,
                                   "summary": "Asked about the ryokan and the dentist."}))
    said = new_conversation(vault, make_provider(), "cli/default", datetime.now(timezone.utc))
    assert said.said.startswith("Archived as entry")
    assert not (vault.root / ".agent/working/cli/default.json").exists()
    assert "working" not in vault.git("ls-files")     # derived state, never committed


def test_a_working_set_lapses_after_two_idle_hours_and_a_torn_one_is_ignored(vault):
    from agent.chat import working

    now = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    memory = {"source": "sessions/x.jsonl:1", "quote": "the ryokan in Kyoto", "ids": ["a"]}
    working.save(vault.root, "telegram/42", now, [memory])
    assert working.load(vault.root, "telegram/42", now + timedelta(minutes=119)) == [memory]
    assert working.load(vault.root, "telegram/42", now + timedelta(minutes=121)) == []
    (vault.root / ".agent/working/telegram/42.json").write_text('{"at": "2026-01-01T12:00:00+00:00", "memo')
    assert working.load(vault.root, "telegram/42", now) == []


def test_skills_listed_with_availability_always_inlined_and_loadable(fake_anthropic, vault, run):
    for name, meta, body in [
            ("greet", "always: true", "Always greet in Portuguese."),
            ("deploy", "requires:\n  bins: [no-such-binary-xyz]\n  env: [NO_SUCH_VAR_XYZ]", "Deploy steps."),
            ("broken", "name: [unclosed", "x")]:
        d = vault.root / "skills" / name
        d.mkdir(parents=True)
        (d / "SKILL.md").write_text(f"---\nname: {name}\ndescription: The {name} skill.\n{meta}\n---\n{body}\n"
                                    if name != "broken" else f"---\n{meta}\n---\n{body}\n")
    fake_anthropic.add(reply(tool_use("load_skill", {"name": "memory"}),
                             tool_use("load_skill", {"name": "nope"})), reply("ok"))
    assert run("chat", "-m", "hi").exit_code == 0
    system = "\n".join(b["text"] for b in fake_anthropic.calls()[0].body["system"])
    assert "- greet: The greet skill." in system
    assert "## Skill: greet" in system and "Always greet in Portuguese." in system
    assert "- deploy: The deploy skill. (unavailable: needs program no-such-binary-xyz, $NO_SUCH_VAR_XYZ)" in system
    assert "Deploy steps." not in system
    assert "- broken: unusable (skills/broken/SKILL.md" in system
    assert "- memory: How to keep memory" in system          # the built-in skill
    loaded, missing = tool_results(fake_anthropic.calls()[1])
    assert "# Managing memory" in loaded["content"] and not loaded.get("is_error")
    assert missing["is_error"] and "No skill named 'nope'" in missing["content"]


# ---- compaction -----------------------------------------------------------------------------


def _small_window(vault, tokens=300, fake=None):
    """A window of `tokens` beside what the system prompt and tools take (measured on the
    last request the fake server got)."""
    base = 0
    if fake is not None:
        body = fake.calls()[-1].body
        base = len(json.dumps({k: body.get(k) for k in ("system", "messages", "tools")},
                              ensure_ascii=False)) // 4
    set_toml(vault, "window_tokens = 24000", f"window_tokens = {base + tokens}")


def test_compaction_writes_an_archive_entry_and_a_marker(fake_anthropic, vault, run):
    para = "We talked about the garden and the tomatoes at length. " * 6
    for i in range(3):
        fake_anthropic.add(reply(f"answer {i}: {para}"))
        assert run("chat", "-m", f"question {i}").exit_code == 0
        if i == 0:
            _small_window(vault, 300, fake_anthropic)
    # The fourth message would take the window over its budget: its oldest part is
    # summarised first, then the request is sent.
    summary_reply = json_reply({"topic": "Garden and tomatoes", "summary": "They discussed the tomatoes.",
                                "importance": 0.4})
    fake_anthropic.add(summary_reply, reply("answer 3"))
    r = run("chat", "-m", "question 3 " + para)
    assert r.exit_code == 0 and "Archived the conversation's oldest part first" in r.output
    calls = fake_anthropic.calls()
    assert ["output_config" in c.body for c in calls] == [False] * 3 + [True, False]
    summary_req = calls[-2].body
    assert summary_req["output_config"]["format"]["type"] == "json_schema"
    assert set(summary_req["output_config"]["format"]["schema"]["required"]) == {"topic", "summary", "importance"}
    assert "question 0" in summary_req["messages"][0]["content"]
    assert "question 0" not in json.dumps(calls[-1].body["messages"])
    (entry_id, rel), = archive.entry_ids(vault.root)
    entry = archive.load(vault.root, rel)
    assert entry.topic == "Garden and tomatoes" and entry.summary == "They discussed the tomatoes."
    assert entry.meta["session"] == "cli/default" and entry.importance == 0.4
    assert entry.meta["tokens"] > 0 and entry.meta["created"]
    src = entry.meta["source"]
    lines = session_lines(vault)
    marker = next(m for m in lines if m.get("type") == "compact")
    ids = marker.pop("ids")
    start = marker.pop("start")
    assert marker == {"type": "compact", "archive": entry_id, "through": src["through"]}
    assert ids[0] == src["from"] and ids[-1] == src["through"]      # the messages it covers
    # Where the kept part starts: the next turn reads from there, not from the start.
    kept = next(m for m in lines if m.get("id") == start["id"])
    raw = (vault.root / start["file"]).read_bytes()[start["offset"]:]
    assert json.loads(raw.split(b"\n", 1)[0]) == kept and kept["role"] == "user"
    assert src["file"].startswith("sessions/cli/default/") and src["from"] == lines[0]["id"]
    assert subjects(vault)[:2] == ["chat(cli/default): question 3 We talked about the garden and the tomatoes at...",
                                   "archive(cli/default): Garden and tomatoes"]
    assert fake_anthropic.exhausted == 0
    # The window after the marker starts at a user message and is what the next turn sends.
    window_messages = window.read_window(vault.root, "cli/default").messages
    assert window_messages and window_messages[0]["role"] == "user"
    assert all(m["id"] != src["from"] for m in window_messages)
    fake_anthropic.add(reply("fresh"))
    run("chat", "-m", "next")
    sent = json.dumps(fake_anthropic.last.body["messages"])
    assert "question 0" not in sent and "question 3" in sent


def test_failed_summary_keeps_the_window_and_retries_later(fake_anthropic, vault, run):
    big = "lots of words here " * 40
    fake_anthropic.add(reply(big), reply("second"), json_reply({"oops": 1}))
    run("chat", "-m", "one")
    _small_window(vault, 100, fake_anthropic)
    r = run("chat", "-m", "two")
    assert r.exit_code == 0
    assert "Could not summarise" in r.output and "tried again" in r.output
    assert archive.entry_ids(vault.root) == []
    assert not any(m.get("type") == "compact" for m in session_lines(vault))
    fake_anthropic.add(json_reply({"topic": "Words", "summary": "Many words.", "importance": 3}),
                       reply("third"))
    assert run("chat", "-m", "three").exit_code == 0
    (entry_id, rel), = archive.entry_ids(vault.root)
    assert archive.load(vault.root, rel).importance == 0.6     # 3 on a 1-5 scale


def test_agent_archive_compacts_now(fake_anthropic, vault, run):
    fake_anthropic.add(reply("a"), reply("b"))
    run("chat", "-m", "alpha")
    run("chat", "--session", "cli/other", "-m", "beta")
    fake_anthropic.add(json_reply({"topic": "Alpha", "summary": "S1", "importance": 0.2}))
    r = run("archive")
    # Entry ids are the time and four random digits: unique across machines.
    first = re.search(r"cli/default: archive entry (\d{18}) \(Alpha\)", r.output)
    assert r.exit_code == 0 and first
    assert window.read_window(vault.root, "cli/default").messages == []
    fake_anthropic.add(json_reply({"topic": "Beta", "summary": "S2", "importance": 0.2}))
    r = run("archive", "--all")
    assert "cli/default: nothing to archive" in r.output
    second = re.search(r"cli/other: archive entry (\d{18}) \(Beta\)", r.output)
    assert second and int(second.group(1)) > int(first.group(1))
    assert subjects(vault)[0] == "archive(cli/other): Beta"
    fake_anthropic.add(error(400, "invalid_request_error", "nope"), reply("c"))
    run("chat", "-m", "gamma")  # fails, but the message is kept
    r = run("archive")
    assert r.exit_code == 1 and "Could not summarise" in r.output


def test_archive_and_chat_need_a_key_and_refuse_both_options(vault, run):
    assert run("archive").exit_code == 2
    r = run("archive", "--all", "--session", "cli/x")
    assert r.exit_code == 2 and "not both" in r.output


# ---- heartbeat-style turns (run_turn as the scheduler calls it) ------------------------------


def test_discard_reply_leaves_no_trace(fake_anthropic, vault):
    fake_anthropic.add(reply("HEARTBEAT_OK"))
    head = vault.head()
    res = run_turn(vault, make_provider(), "heartbeat/morning", "check", NOW, kind="heartbeat",
                   discard_reply="HEARTBEAT_OK")
    assert res.sha is None and res.reply == "HEARTBEAT_OK"
    assert vault.head() == head and not (vault.root / "sessions/heartbeat").exists()
    # A tool that changed a file makes it a real turn.
    fake_anthropic.add(reply(tool_use("remember", {"text": "Morning summary"})), reply("HEARTBEAT_OK"))
    res = run_turn(vault, make_provider(), "heartbeat/morning", "check", NOW, kind="heartbeat",
                   discard_reply="HEARTBEAT_OK")
    assert res.sha == vault.head() and res.turn == 1
    assert subjects(vault)[0] == "heartbeat(heartbeat/morning): check"
    assert "memory/2026-11-20.md" in changed_files(vault)
    assert (vault.root / "memory/2026-11-20.md").read_text() == "# 2026-11-20\n\n- 14:05 Morning summary\n"


def test_run_turn_result_and_on_text(fake_anthropic, vault):
    chunks = []
    fake_anthropic.add(reply("Hello there, friend"))
    res = run_turn(vault, make_provider(), "cron/7", "ping", NOW, kind="cron", on_text=chunks.append)
    assert "".join(chunks) == "Hello there, friend" and len(chunks) > 1
    assert res.reply == "Hello there, friend" and res.sha == vault.head()
    assert res.session == "cron/7" and res.turn == 1 and res.error is None
    assert res.usage["output_tokens"] > 0 and set(res.usage) == {
        "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}
    assert subjects(vault)[0] == "cron(cron/7): ping"
    assert session_lines(vault, "cron/7")[0]["ts"] == "2026-11-20T14:05:00+01:00"


# ---- the terminal conversation ------------------------------------------------------------------


@pytest.mark.slow
def test_repl_slash_commands_and_undo(fake_anthropic, vault):
    fake_anthropic.add(reply(tool_use("remember", {"text": "Likes green tea", "target": "user"})),
                       reply("Noted your tea."))
    term = Terminal(vault)
    term.until(b"> ")
    term.send("/help\r", b"/undo")
    term.send("I like green tea\r", b"Noted your tea.")
    term.until(b"> ")
    assert "Likes green tea" in (vault.root / "USER.md").read_text()
    term.send("/memory\r", b"Likes green tea")
    term.send("/undo\r", b"Undid ")
    term.until(b"> ")
    assert "Likes green tea" not in (vault.root / "USER.md").read_text()
    assert session_lines(vault) == []
    assert subjects(vault)[0].startswith('undo: revert "chat(cli/default): I like green tea"')
    term.send("/undo\r", b"Nothing to undo in cli/default")
    term.send("/new\r", b"Nothing to archive")
    term.send("/bogus\r", b"Unknown command /bogus")
    term.until(b"> ")
    term.ctrl_c_at_prompt()                 # Ctrl-C at the prompt leaves, 130 as a shell
    assert term.exit_status() == 130
    assert (vault.state / "chat_history").read_text().count("I like green tea") == 1


@pytest.mark.slow
def test_repl_ctrl_c_stops_a_reply_and_the_conversation_goes_on(fake_anthropic, vault):
    words = " ".join(f"w{i}" for i in range(300))
    fake_anthropic.add(reply(words, chunk_delay=0.05), reply("Short answer."))
    term = Terminal(vault)
    term.until(b"> ")
    term.send("tell me everything\r", b"w3 ")
    term.send("\x03", b"[interrupted")
    term.until(b"> ")
    lines = session_lines(vault)
    assert lines[-1]["interrupted"] is True and lines[-1]["content"].startswith("w0 w1 w2 w3")
    assert subjects(vault)[0] == "chat(cli/default): tell me everything"
    term.send("and briefly?\r", b"Short answer.")
    term.until(b"> ")
    term.send("\x04")                       # Ctrl-D leaves
    assert term.exit_status() == 0
    assert subjects(vault)[0] == "chat(cli/default): and briefly?"
    assert vault.dirty_paths() == []


@pytest.mark.slow
def test_repl_a_line_typed_during_a_reply_joins_the_running_turn(fake_anthropic, vault):
    cue = threading.Event()

    def looking(_request):                 # answered once the test has typed its line
        assert cue.wait(60)
        return reply("Looking.", tool_use("memory_search", {"query": "tea"}))
    fake_anthropic.add(looking, reply("Green tea; and yes, oolong too."))
    term = Terminal(vault)
    term.until(b"> ")
    term.send("what tea do I like?\r")
    fake_anthropic.wait_for_requests(1)
    term.send("and oolong?\r", b"[added to the running turn]")
    cue.set()
    term.until(b"oolong too.")
    term.until(b"> ")
    # The model's very next call saw it, after the tool result; one turn, one commit.
    last = fake_anthropic.calls()[1].body["messages"][-1]
    assert [b["type"] for b in last["content"]] == ["tool_result", "text"]
    assert last["content"][1]["text"] == "and oolong?"
    lines = session_lines(vault)
    assert [(m["role"], m.get("injected")) for m in lines] == [
        ("user", None), ("assistant", None), ("user", None), ("user", True), ("assistant", None)]
    assert subjects(vault)[0] == "chat(cli/default): what tea do I like?"
    assert trailers(vault)["Injected"] == "1"
    term.send("\x04")
    assert term.exit_status() == 0
    assert len(fake_anthropic.calls()) == 2 and vault.dirty_paths() == []


# ---- start-up -----------------------------------------------------------------------------------


def test_help_and_model_free_commands_do_not_import_anthropic(vault):
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from agent.cli.app import cli\n"
        "r = CliRunner().invoke(cli, ['chat', '--help'])\n"
        "assert r.exit_code == 0 and '--session' in r.output and '-m, --message' in r.output, r.output\n"
        "r = CliRunner().invoke(cli, ['archive', '--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        f"r = CliRunner().invoke(cli, ['--vault', {str(vault.root)!r}, 'note', 'hi'])\n"
        "assert r.exit_code == 0, r.output\n"
        "from agent.chat.tools import registry\n"
        "registry.load_all()\n"
        "bad = [m for m in ('anthropic', 'httpx2', 'frontmatter', 'yaml') if m in sys.modules]\n"
        "assert not bad, bad\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
