"""`agent mcp` driven by the SDK's own client: over stdio, as Claude Code drives the real
process (the listing, the commits named after the client, the modern protocol, a line
that is not JSON-RPC), and otherwise on the SDK's in-memory transport to the server the
command builds; real git; assertions on what the client gets, the files and `git log`."""

from __future__ import annotations

import sys
import pytest
from mcp import MCPError

from conftest import TODAY_NOTE, subjects
from helpers import drive, text_of


def test_tools_and_resources_are_listed(vault):
    async def steps(c):
        tools = await c.list_tools()
        resources = await c.list_resources()
        return ({t.name: t for t in tools.tools}, [r.uri for r in resources.resources],
                c.server_info)
    tools, uris, info = drive(vault, steps, process=True)
    assert set(tools) == {"search", "remember", "note", "recent", "history", "why",
                          "review_list", "show_as_of", "restore"}     # review_decide: --review
    assert tools["remember"].input_schema["required"] == ["text"]
    assert tools["remember"].annotations.read_only_hint is False
    assert tools["search"].annotations.read_only_hint is True
    assert uris == ["agent://MEMORY.md", "agent://USER.md", "agent://today"]
    assert info.name == "agent"


def test_remember_and_note_are_one_commit_each_named_after_the_client(vault, fixed_now):
    async def steps(c):
        a = await c.call_tool("remember", {"text": "Prefers  window seats on trains",
                                            "target": "user", "section": "Travel"})
        b = await c.call_tool("remember", {"text": "The Kyoto trip is on 2027-04-03",
                                            "target": "memory"})
        n = await c.call_tool("note", {"text": "called the dentist"})
        d = await c.call_tool("remember", {"text": "bought a new kettle"})
        return [text_of(r) for r in (a, b, n, d)], [r.is_error for r in (a, b, n, d)]
    texts, errors = drive(vault, steps, process=True)
    assert errors == [False] * 4
    assert texts[0].startswith("Added to USER.md under Travel: - Prefers window seats on trains")
    today = TODAY_NOTE                               # the server took AGENT_NOW
    assert subjects(vault)[:4] == [
        f"mcp(claude-code): remember in {today}: bought a new kettle",
        f"mcp(claude-code): note in {today}: called the dentist",
        "mcp(claude-code): remember in MEMORY.md: The Kyoto trip is on 2027-04-03",
        "mcp(claude-code): remember in USER.md: Prefers window seats on trains"]
    user = (vault.root / "USER.md").read_text()
    assert "## Travel\n\n- Prefers window seats on trains\n" in user
    assert "- The Kyoto trip is on 2027-04-03" in (vault.root / "MEMORY.md").read_text()
    note = (vault.root / today).read_text()
    assert "called the dentist" in note and "bought a new kettle" in note
    trailers = vault.git("log", "-1", "--format=%(trailers:only,unfold)", "HEAD~3")
    assert "Client: Claude Code" in trailers and "Tool: remember" in trailers
    assert vault.git("log", "-1", "--format=%an").strip() == "agent"
    assert vault.dirty_paths() == []


def test_a_key_a_client_sends_in_a_note_or_fact_never_reaches_the_vault(vault):
    key = "sk-ant-api03-" + "Zq7_" * 20 + "AA"

    async def steps(c):
        a = await c.call_tool("note", {"text": f"my key is {key}"})
        b = await c.call_tool("remember", {"text": f"API key: {key}", "target": "memory"})
        return [text_of(r) for r in (a, b)]
    texts = drive(vault, steps)
    assert all(key not in t for t in texts)
    assert key not in vault.git("log", "-p", "--all")
    assert not [p for p in vault.root.rglob("*") if p.is_file() and ".git" not in p.parts
                and key in p.read_text(errors="replace")]


def test_a_hand_edit_is_committed_first_as_the_users(vault):
    path = vault.root / "MEMORY.md"
    path.write_text(path.read_text() + "- Written by hand\n")

    async def steps(c):
        return await c.call_tool("remember", {"text": "From the client", "target": "memory"})
    drive(vault, steps)
    assert subjects(vault)[:2] == ["mcp(claude-code): remember in MEMORY.md: From the client",
                                   "edit: MEMORY.md by hand"]
    assert vault.git("log", "-1", "--format=%an", "HEAD~1").strip() == "Test User"


def test_search_recent_history_and_resources_read_the_vault(vault, run):
    run("note", "booked the ryokan in Kyoto")

    async def steps(c):
        await c.call_tool("remember", {"text": "Alice's birthday is on 2027-03-14",
                                       "target": "user"})
        s = await c.call_tool("search", {"query": "ryokan", "limit": 5})
        r = await c.call_tool("recent", {"days": 2})
        h = await c.call_tool("history", {"path": "USER.md", "limit": 2})
        m = await c.read_resource("agent://USER.md")
        t = await c.read_resource("agent://today")
        w = await c.call_tool("why", {"text": "Alice birthday"})
        nothing = await c.call_tool("why", {"text": "submarine periscope"})
        return (text_of(s), text_of(r), text_of(h), m.contents[0].text, t.contents[0].text,
                text_of(w), nothing)
    search, recent, history, user, today, why, nothing = drive(vault, steps)
    assert why.startswith("USER.md:") and "- Alice's birthday is on 2027-03-14" in why
    assert "remember from the MCP client Claude Code (tool remember)." in why
    assert nothing.is_error and "No line of MEMORY.md or USER.md matches" in text_of(nothing)
    assert "ryokan" in search and "memory/" in search
    assert "booked the ryokan in Kyoto" in recent
    assert "- Alice's birthday is on 2027-03-14  (USER.md," in recent
    assert "mcp(claude-code): remember in USER.md" in history
    assert "+- Alice's birthday is on 2027-03-14" in history
    assert user == (vault.root / "USER.md").read_text()
    assert "booked the ryokan" in today


def test_read_only_offers_reading_tools_and_refuses_writes(vault):
    before = vault.head()

    async def steps(c):
        names = {t.name for t in (await c.list_tools()).tools}
        with pytest.raises(MCPError) as e:
            await c.call_tool("remember", {"text": "nope"})
        return names, e.value
    names, err = drive(vault, steps, "--read-only")
    assert names == {"search", "recent", "history", "why", "review_list", "show_as_of"}
    assert "--read-only" in err.message
    assert vault.head() == before


BAD_INPUT = [
    ("remember", {}, "remember needs text"),
    ("remember", {"text": 42}, "text must be a string"),
    ("remember", {"text": "x", "target": "diary"}, 'target must be one of "daily", "memory", "user"'),
    ("remember", {"text": "x" * 100_000}, "100000 characters long"),
    ("remember", {"text": "   "}, "text is empty"),
    ("remember", {"text": "x", "section": 3}, "section must be a string"),
    ("note", {"text": "x", "when": "now"}, "note has no argument when"),
    ("search", {"query": "kyoto", "limit": "ten"}, "limit must be a whole number"),
    ("search", {}, "search needs query"),
    ("recent", {"days": 1000}, "days must be between 1 and 90"),
    ("history", {"path": "../../etc/passwd"}, "outside the vault"),
    ("history", {"path": "/etc/passwd"}, "outside the vault"),
    ("history", {"path": ".git/config"}, "not a file of the vault"),
    ("history", {"path": "nothing-here.md"}, "no file nothing-here.md"),
    ("forget", {"text": "x"}, "There is no tool 'forget'"),
]


def test_bad_input_is_an_mcp_error_and_changes_nothing(vault):
    before = vault.head()

    async def steps(c):
        errors = []
        for tool, args, _ in BAD_INPUT:
            with pytest.raises(MCPError) as e:
                await c.call_tool(tool, args)
            errors.append(e.value)
        return errors
    for (tool, args, says), err in zip(BAD_INPUT, drive(vault, steps)):
        assert says in err.message, (tool, args)
        assert err.code == -32602
    assert vault.head() == before and vault.dirty_paths() == []


def test_an_unknown_resource_is_an_mcp_error(vault):
    async def steps(c):
        with pytest.raises(MCPError) as e:
            await c.read_resource("agent://../secrets")
        return e.value
    assert "No resource agent://../secrets" in drive(vault, steps).message


def test_the_modern_protocol_works_too(vault):
    async def steps(c):
        r = await c.call_tool("note", {"text": "from a 2026 client"})
        return text_of(r)
    assert "from a 2026 client" in drive(vault, steps, mode="auto", name="Other Client",
                                         process=True)
    assert subjects(vault)[0].startswith("mcp(other-client): note in memory/")


def test_help(run):
    r = run("mcp", "--help")
    assert r.exit_code == 0 and "--read-only" in r.output and "list" in r.output


# ---- what comes in is not trusted (issue 22) -------------------------------------------


@pytest.mark.parametrize("target", ["key", "/proc/self/environ"])
def test_a_vault_file_linked_outside_is_refused_not_returned(vault, tmp_path, target,
                                                            monkeypatch, fixed_now):
    key = tmp_path / "id_rsa"                       # stands in for ~/.ssh/id_rsa
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret-key-bytes\n")
    monkeypatch.setenv("SOME_API_KEY", "sk-secret-in-the-environment")
    (vault.root / "USER.md").unlink()
    (vault.root / "USER.md").symlink_to(key if target == "key" else target)
    today = vault.root / TODAY_NOTE
    today.parent.mkdir(exist_ok=True)
    today.symlink_to(key if target == "key" else target)

    async def steps(c):
        out = {}
        for uri in ("agent://USER.md", "agent://today"):
            with pytest.raises(MCPError) as e:
                await c.read_resource(uri)
            out[uri] = e.value
        out["recent"] = await c.call_tool("recent", {"days": 1})
        out["why"] = await c.call_tool("why", {"text": "secret key bytes"})
        out["memory"] = (await c.read_resource("agent://MEMORY.md")).contents[0].text
        return out
    out = drive(vault, steps, "--read-only")
    for uri in ("agent://USER.md", "agent://today"):
        assert "leads outside the vault" in out[uri].message
        assert out[uri].code == -32602
    for tool in ("recent", "why"):
        assert out[tool].is_error and "leads outside the vault" in text_of(out[tool])
    everything = " ".join([*(e.message for e in (out["agent://USER.md"], out["agent://today"])),
                           text_of(out["recent"]), text_of(out["why"]), out["memory"]])
    assert "secret-key-bytes" not in everything and "sk-secret" not in everything
    assert out["memory"] == (vault.root / "MEMORY.md").read_text()


def test_a_line_that_is_not_json_rpc_gets_a_parse_error(vault):
    import json
    import subprocess
    import threading
    lines = ["this is not json", '{"jsonrpc": "2.0", "no": "method"}',
             '{"jsonrpc": "2.0", "id": 7, "method": "ping"}']
    p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "mcp"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    watchdog = threading.Timer(120, p.kill)        # a server that never answers fails, not hangs
    watchdog.start()
    try:
        replies = []
        for line in lines:              # one at a time: each answered before the next goes
            p.stdin.write(line + "\n")
            p.stdin.flush()
            replies.append(json.loads(p.stdout.readline()))
        p.stdin.close()
        err = p.stderr.read()
        assert p.wait() == 0, err
    finally:
        watchdog.cancel()
    assert replies == [
        {"jsonrpc": "2.0", "id": None,
         "error": {"code": -32700, "message": "Parse error: the line is not JSON"}},
        {"jsonrpc": "2.0", "id": None,
         "error": {"code": -32600, "message": "Invalid request: not a JSON-RPC 2.0 message"}},
        {"jsonrpc": "2.0", "id": 7, "result": {}}]
    assert "Traceback" not in err
