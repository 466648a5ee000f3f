"""MCP servers as tools of the agent: a small MCP server written in the tests
(tests/mcp_fixture.py, on the SDK), started by the real `agent chat` from agent.toml, its
tools offered and called through the fake Anthropic API."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


from agent.chat.mcp_client.client import close_all
from agent.stores import sessions
from conftest import subjects
from helpers import configure_mcp
from fakeanthropic import reply, tool_use

FIXTURE = Path(__file__).with_name("mcp_fixture.py")


@pytest.fixture(autouse=True)
def stop_servers():
    yield
    close_all()


def stdio_server(name="fixture", *args, extra=""):
    argv = json.dumps([str(FIXTURE), *args])
    return (f"[mcp.servers.{name}]\ncommand = {json.dumps(sys.executable)}\n"
            f"args = {argv}\n{extra}")


def tool_results(request) -> list[dict]:
    return [b for b in request.body["messages"][-1]["content"] if b.get("type") == "tool_result"]


def test_a_servers_tools_are_offered_and_called(fake_anthropic, vault, run):
    configure_mcp(vault, stdio_server())
    fake_anthropic.add(reply(tool_use("fixture__add", {"a": 2, "b": 3}),
                             tool_use("fixture__shout", {"text": "hi"})), reply("2 + 3 is 5."))
    r = run("chat", "-m", "what is 2 + 3?")
    assert r.exit_code == 0, r.output
    assert "2 + 3 is 5." in r.output
    first, second = fake_anthropic.calls()
    names = [t["name"] for t in first.body["tools"]]
    assert {"fixture__add", "fixture__shout", "fixture__crash", "fixture__secret"} <= set(names)
    assert "remember" in names
    add = next(t for t in first.body["tools"] if t["name"] == "fixture__add")
    assert add["description"].startswith("[fixture] Add two whole numbers")
    assert add["input_schema"]["required"] == ["a", "b"]
    assert [(b["content"], b.get("is_error")) for b in tool_results(second)] == [
        ("5", None), ("HI!", None)]
    # In the transcript like any tool call, and one commit for the turn.
    lines = sessions.Session(vault.root, "cli/default").lines()
    uses = [b for m in lines if isinstance(m["content"], list) for b in m["content"]
            if b["type"] == "tool_use"]
    assert [(u["name"], u["input"]) for u in uses] == [("fixture__add", {"a": 2, "b": 3}),
                                                       ("fixture__shout", {"text": "hi"})]
    assert subjects(vault)[0] == "chat(cli/default): what is 2 + 3?"
    assert "MCP server" not in r.output


def test_a_server_that_dies_mid_call_is_reported_once_and_the_turn_goes_on(
        fake_anthropic, vault, run):
    configure_mcp(vault, stdio_server())
    fake_anthropic.add(reply(tool_use("fixture__crash", {})), reply("That tool broke."))
    r = run("chat", "-m", "try the crash tool")
    assert r.exit_code == 0, r.output
    assert "That tool broke." in r.output
    result = tool_results(fake_anthropic.calls()[1])[0]
    assert result["is_error"] is True
    assert "The MCP server fixture stopped during crash" in result["content"]
    assert r.output.count("MCP server fixture") == 1
    assert "died" in r.output and "its tools are left out" in r.output
    assert subjects(vault)[0] == "chat(cli/default): try the crash tool"


@pytest.mark.parametrize("server,says", [
    (stdio_server("broken", extra="startup_timeout = 60\n").replace(
        json.dumps(sys.executable), json.dumps("/nonexistent/mcp-server")), "no such command"),
    (stdio_server("broken", "--hang", extra="startup_timeout = 1\n"), "did not answer within 1s"),
])
def test_a_server_that_never_starts_is_reported_and_left_out(fake_anthropic, vault, run,
                                                             server, says):
    configure_mcp(vault, server + "\n" + stdio_server())
    fake_anthropic.add(reply("Fine without it."))
    r = run("chat", "-m", "hello")
    assert r.exit_code == 0, r.output
    assert "Fine without it." in r.output
    problem = [line for line in r.output.splitlines() if "MCP server broken" in line]
    assert len(problem) == 1 and "did not start" in problem[0] and says in problem[0]
    names = {t["name"] for t in fake_anthropic.calls()[0].body["tools"]}
    assert not any(n.startswith("broken__") for n in names) and "fixture__add" in names
    assert subjects(vault)[0] == "chat(cli/default): hello"


def test_only_the_named_environment_variables_reach_a_server(fake_anthropic, vault, run,
                                                             monkeypatch):
    monkeypatch.setenv("FIXTURE_TOKEN", "s3cret-value")
    monkeypatch.setenv("OTHER_SECRET", "not-for-you")
    configure_mcp(vault, stdio_server(extra='env = ["FIXTURE_TOKEN"]\n'))
    fake_anthropic.add(reply(tool_use("fixture__secret", {"name": "FIXTURE_TOKEN"}),
                             tool_use("fixture__secret", {"name": "OTHER_SECRET"})), reply("ok"))
    assert run("chat", "-m", "check the env").exit_code == 0
    assert [b["content"] for b in tool_results(fake_anthropic.calls()[1])] == [
        "s3cret-value", "(unset)"]
    assert "s3cret-value" not in (vault.root / "agent.toml").read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_streamable_http_server(fake_anthropic, vault, run):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(FIXTURE), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        configure_mcp(vault, f'[mcp.servers.web]\nurl = "http://127.0.0.1:{port}/mcp"\n')
        fake_anthropic.add(reply(tool_use("web__add", {"a": 40, "b": 2})), reply("42"))
        r = run("chat", "-m", "add over http")
        assert r.exit_code == 0, r.output
        assert tool_results(fake_anthropic.calls()[1])[0]["content"] == "42"
    finally:
        close_all()
        proc.terminate()
        proc.wait(timeout=10)


def test_mcp_list_shows_each_server_whether_it_starts_and_its_tools(vault, run):
    r = run("mcp", "list")
    assert r.exit_code == 0 and "No MCP servers in agent.toml" in r.output
    configure_mcp(vault, stdio_server() + "\n" + stdio_server("off", extra="enabled = false\n")
              + "\n" + stdio_server("gone").replace(json.dumps(sys.executable),
                                                    json.dumps("/nonexistent/mcp-server")))
    r = run("mcp", "list")
    assert r.exit_code == 1
    out = r.output
    assert "fixture  (" in out and "approved; starts; 4 tools:" in out
    assert "fixture__add  Add two whole numbers." in out
    assert "off  (" in out and "disabled (enabled = false)" in out
    assert "gone  (/nonexistent/mcp-server" in out and "does not start: no such command" in out


def test_a_wrong_server_table_is_one_line_naming_agent_toml(fake_anthropic, vault, run):
    configure_mcp(vault, '[mcp.servers.gh]\ncommand = "x"\nenv = { TOKEN = "abc" }\n', approve=False)
    r = run("chat", "-m", "hello")
    assert r.exit_code == 1
    assert "agent.toml: [mcp.servers.gh]: env lists the names of environment variables" in r.output
    assert "Traceback" not in r.output
    assert fake_anthropic.calls() == []
