"""Sub-agents end to end: `spawn_agent` / `agent_output` through the real CLI, the real
SDK against the fake API, real git. Each agent's requests are told apart by the task in
its first message (the fake answers from a script per agent); concurrency is shown by a
barrier the runs must meet at, never by timing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading


from agent.stores import sessions
from conftest import ROOT, subjects
from fakeanthropic import error, reply, tool_use


class Script:
    """Replies per agent: the key found last in a request's first message picks the queue."""

    def __init__(self, **queues):
        self.queues = {k: list(v) for k, v in queues.items()}
        self.seen: dict[str, list[dict]] = {k: [] for k in queues}
        self.lock = threading.Lock()

    def __call__(self, body):
        if "summarise a conversation" in json.dumps(body.get("system", "")):
            key = "SUMMARY"
        else:
            first = json.dumps(body["messages"][0])
            found = [k for k in self.queues if k in first and k != "SUMMARY"]
            assert found, first[:300]
            key = max(found, key=first.rfind)
        with self.lock:
            self.seen.setdefault(key, []).append(body)
            item = self.queues[key].pop(0) if self.queues[key] else error(
                500, "api_error", f"script for {key} ran out", should_retry=False)
        return item(body) if callable(item) and not hasattr(item, "content") else item


def trailers(vault, rev="HEAD") -> dict:
    out = vault.git("log", "-1", "--format=%(trailers:only,unfold)", rev)
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def run_ids(vault) -> list[str]:
    base = vault.root / "sessions" / "agent"
    return sorted(p.name for p in base.iterdir()) if base.is_dir() else []


def run_lines(vault, rid):
    return sessions.Session(vault.root, f"agent/{rid}").lines()


def result_of(body) -> dict:
    return [b for b in body["messages"][-1]["content"] if b.get("type") == "tool_result"][0]


def set_key(vault, table, key, value):
    toml = vault.root / "agent.toml"
    text = toml.read_text()
    start = text.index(f"[{table}]\n")
    end = text.find("\n[", start + 1)
    section = text[start:end].replace(f"\n{key} = ", f"\n{key} = {value}\n#was ", 1)
    assert f"{key} = {value}" in section
    toml.write_text(text[:start] + section + text[end:])


# ---- one sub-agent ------------------------------------------------------------------------


def test_a_sub_agent_runs_on_its_own_session_and_commit(fake_anthropic, vault, run):
    script = Script(PARENT=[reply(tool_use("spawn_agent", {"prompt": "CHILD count the notes"})),
                            reply("There are three.")],
                    CHILD=[reply("I counted 3 notes.")])
    fake_anthropic.default_reply = script
    r = run("chat", "-m", "PARENT how many notes?")
    assert r.exit_code == 0, r.output
    [rid] = run_ids(vault)
    assert subjects(vault)[:2] == ["chat(cli/default): PARENT how many notes?",
                                   f"agent({rid}): CHILD count the notes"]
    assert trailers(vault)["Runs"] == rid
    t = trailers(vault, "HEAD~1")
    assert t["Run"] == rid and t["Session"] == f"agent/{rid}"
    assert t["Parent"] == "cli/default turn 1" and t["Depth"] == "1"
    lines = run_lines(vault, rid)
    assert lines[0]["content"] == "CHILD count the notes"
    assert lines[0]["run"]["context"] == "none" and lines[0]["run"]["readonly"] is False
    assert lines[-1]["content"] == "I counted 3 notes."
    # The child knew only its prompt; the parent heard its reply.
    child = script.seen["CHILD"][0]
    assert "PARENT" not in json.dumps(child["messages"])
    answer = result_of(script.seen["PARENT"][1])
    assert f"Run {rid} finished" in answer["content"] and "I counted 3 notes." in answer["content"]
    assert vault.dirty_paths() == []

    listing = run("agents")
    assert listing.exit_code == 0
    assert rid in listing.output and "done" in listing.output
    assert "cli/default turn 1" in listing.output
    shown = run("agents", "show", rid)
    assert shown.exit_code == 0
    assert "status:  done" in shown.output and "I counted 3 notes." in shown.output
    missing = run("agents", "show", "nope")
    assert missing.exit_code == 1 and "No sub-agent run nope" in missing.output


def test_the_runs_list_is_a_table_without_the_models_terminal_escapes(fake_anthropic, vault,
                                                                        run):
    # A run's prompt is written by the model: listed raw, an escape in it would retitle or
    # clear the person's terminal.
    prompt = "CHILD \x1b]0;owned\x07\x1b[2J tidy the notes " + "and more " * 20
    fake_anthropic.default_reply = Script(
        PARENT=[reply(tool_use("spawn_agent", {"prompt": prompt})), reply("Done.")],
        CHILD=[reply("Tidied.")])
    assert run("chat", "-m", "PARENT tidy up").exit_code == 0
    [rid] = run_ids(vault)
    listing = run("agents")
    assert listing.exit_code == 0, listing.output
    head, row = listing.output.splitlines()
    assert head.split() == ["RUN", "STATUS", "DEPTH", "FROM", "PROMPT"]
    assert row.startswith(rid) and "\x1b" not in row and "\x07" not in row
    assert row.endswith("...") and "CHILD tidy the notes and more" in row
    assert row.index("done") == head.index("STATUS")


def test_a_runs_marker_is_on_disk_before_it_is_in_place(fake_anthropic, vault, run,
                                                         monkeypatch):
    # `.agent/runs/<id>.json` says a run is alive (or, its process gone, interrupted): it
    # is written as every state file is, flushed to disk before it replaces the old one,
    # so a crash never leaves an empty marker in its place.
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    script = Script(PARENT=[reply(tool_use("spawn_agent", {"prompt": "CHILD count the notes"})),
                            reply("There are three.")],
                    CHILD=[reply("I counted 3 notes.")])
    fake_anthropic.default_reply = script
    assert run("chat", "-m", "PARENT how many notes?").exit_code == 0
    [rid] = run_ids(vault)
    runs = str(vault.state / "runs") + os.sep
    assert any(p.startswith(runs) and rid in p for p in synced), synced
    assert not [p.name for p in (vault.state / "runs").iterdir()]      # ended: removed


def test_read_only_concurrent_runs_and_the_depth_limit(fake_anthropic, vault, run):
    set_key(vault, "agents", "max_depth", "1")
    meet = threading.Barrier(2, timeout=10)

    def at_barrier(answer):
        def go(body):
            meet.wait()             # both runs must be asking the model at once
            return answer
        return go

    script = Script(
        PARENT=[reply(tool_use("spawn_agent", {"prompt": "ALPHA read MEMORY.md", "readonly": True}),
                      tool_use("spawn_agent", {"prompt": "BETA go deeper"})),
                reply("both done")],
        ALPHA=[at_barrier(reply("alpha read it"))],
        BETA=[at_barrier(reply(tool_use("spawn_agent", {"prompt": "GAMMA too deep"}))),
              reply("could not go deeper")])
    fake_anthropic.default_reply = script
    r = run("chat", "-m", "PARENT two helpers")
    assert r.exit_code == 0, r.output
    alpha_tools = {t["name"] for t in script.seen["ALPHA"][0]["tools"]}
    assert {"write_file", "edit_file", "remember", "cron_add"}.isdisjoint(alpha_tools)
    assert {"read_file", "list_dir", "spawn_agent"} <= alpha_tools
    beta_result = result_of(script.seen["BETA"][1])
    assert beta_result["is_error"] and "nest at most 1 levels" in beta_result["content"]
    assert "GAMMA" not in script.seen or not script.seen["GAMMA"]
    assert len(run_ids(vault)) == 2
    assert len(trailers(vault)["Runs"].split(", ")) == 2


def test_context_full_and_summary(fake_anthropic, vault, run):
    script = Script(
        PARENT=[reply(tool_use("spawn_agent", {"prompt": "FULLKID list the cities",
                                               "context": "full"}),
                      tool_use("spawn_agent", {"prompt": "SUMKID pick one",
                                               "context": "summary"})),
                reply("ok")],
        FULLKID=[reply("Kyoto and Osaka")],
        SUMMARY=[reply("The user plans a trip to Kyoto and Osaka in April.")],
        SUMKID=[reply("Kyoto")])
    fake_anthropic.default_reply = script
    r = run("chat", "-m", "PARENT we go to Kyoto and Osaka in April")
    assert r.exit_code == 0, r.output
    full = json.dumps(script.seen["FULLKID"][0]["messages"])
    assert "PARENT we go to Kyoto and Osaka in April" in full and "You are a sub-agent" in full
    summarised = json.dumps(script.seen["SUMMARY"][0]["messages"])
    assert "Kyoto and Osaka" in summarised
    kid = json.dumps(script.seen["SUMKID"][0]["messages"])
    assert "The user plans a trip to Kyoto and Osaka in April." in kid
    assert "PARENT we go" not in kid


# ---- timeouts and the background ----------------------------------------------------------


def test_a_slow_sub_agent_moves_to_the_background_and_commits_on_its_own(fake_anthropic, vault):
    release = threading.Event()

    def slow(body):
        release.wait(30)
        return reply("slow result: 42")

    script = Script(PARENT=[reply(tool_use("spawn_agent", {"prompt": "SLOW compute", "timeout": 0.3})),
                            reply("It is still working.")],
                    SLOW=[slow])
    fake_anthropic.default_reply = script
    from agent.chat import subagents
    from agent.chat.turn import run_turn
    from agent.llm import make_provider
    from agent.clock import now

    client = make_provider()
    first = run_turn(vault, client, "cli/default", "PARENT start it", now())
    [rid] = [r.id for r in subagents.running_here()]
    answer = result_of(script.seen["PARENT"][1])["content"]
    assert f"{rid} is still running after 0.3 s" in answer and "not stopped" in answer
    assert first.sha and subjects(vault)[0] == "chat(cli/default): PARENT start it"
    assert trailers(vault)["Runs"] == rid
    release.set()
    subagents.RUNS[rid].done.wait(20)
    assert subjects(vault)[0] == f"agent({rid}): SLOW compute"
    # A later turn asks for the result.
    script.queues["PARENT"] = [reply(tool_use("agent_output", {"run_id": rid})), reply("Here it is.")]
    run_turn(vault, client, "cli/default", "PARENT is it done?", now())
    got = result_of(script.seen["PARENT"][-1])["content"]
    assert f"Run {rid} finished" in got and "slow result: 42" in got


def test_background_returns_at_once_and_chat_waits_before_leaving(fake_anthropic, vault, run):
    script = Script(PARENT=[reply(tool_use("spawn_agent", {"prompt": "BG tidy up",
                                                           "background": True})),
                            reply("Started it.")],
                    BG=[reply("tidied")])
    fake_anthropic.default_reply = script
    r = run("chat", "-m", "PARENT start a helper")
    assert r.exit_code == 0, r.output
    [rid] = run_ids(vault)
    answer = result_of(script.seen["PARENT"][1])["content"]
    assert answer.startswith(f"Started sub-agent run {rid} in the background")
    assert f"agent({rid}): BG tidy up" in subjects(vault)
    assert run_lines(vault, rid)[-1]["content"] == "tidied"


# ---- cancellation -------------------------------------------------------------------------


def test_ctrl_c_stops_a_three_level_tree_and_each_saves_what_it_did(fake_anthropic, vault):
    stuck = threading.Event()
    never = threading.Event()

    answered = threading.Event()

    def hang(body):
        stuck.set()
        never.wait(600)                 # answered only after the program has exited
        answered.set()
        return reply("too late")

    fake_anthropic.default_reply = Script(
        PARENT=[reply(tool_use("spawn_agent", {"prompt": "LEVELONE delegate"}))],
        LEVELONE=[reply(tool_use("spawn_agent", {"prompt": "LEVELTWO delegate"}))],
        LEVELTWO=[reply(tool_use("spawn_agent", {"prompt": "LEVELTHREE work"}))],
        LEVELTHREE=[reply(tool_use("list_dir", {})), hang])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat",
                             "-m", "PARENT go deep"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert stuck.wait(60), "the third level never called the model"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        # It stopped while the deepest run's model call was still unanswered: Ctrl-C
        # cut every level at once, nothing waited for the model.
        assert not answered.is_set()
    finally:
        never.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    ids = run_ids(vault)
    assert len(ids) == 3
    for rid in ids:
        lines = run_lines(vault, rid)
        assert any(m.get("interrupted") for m in lines), (rid, lines)
    deepest = [rid for rid in ids if run_lines(vault, rid)[0]["run"]["depth"] == 3][0]
    # What the deepest run did before the stop (its list_dir) is in its transcript.
    assert any(isinstance(m["content"], list) and any(b.get("name") == "list_dir"
               for b in m["content"]) for m in run_lines(vault, deepest))
    subs = subjects(vault)
    assert subs[0] == "chat(cli/default): PARENT go deep"
    assert sum(s.startswith("agent(") for s in subs) == 3
    assert trailers(vault)["Interrupted"] == "yes"
    assert vault.dirty_paths() == []
    listing = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "agents"],
                             env=env, capture_output=True, text=True)
    assert listing.stdout.count("interrupted") == 3
