"""Reach: the router every serve channel shares (agent/serve/conversations.py), messages
injected into a running turn, and the local HTTP gateway (agent/serve/gateway.py) with
`agent chat --remote`.

Judged by what a user relies on: the requests the fake Anthropic server received, the
transcript lines, `git log`, HTTP answers and CLI output. Timing is by conditions (an
event the fake's scripted reply waits for), never by sleeping."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time

import pytest
from fakeanthropic import error, reply, tool_use

from agent.config import load_settings
from agent.llm import make_provider
from agent.serve.conversations import Conversations, ServeStopping
from agent.vault.repo import now as vault_now
from conftest import subjects


def router(vault, **settings) -> Conversations:
    base = load_settings(vault.root)
    s = dataclasses.replace(base, **settings) if settings else base
    return Conversations(vault, make_provider(), clock=vault_now, settings_fn=lambda: s)


def after(event: threading.Event, item, timeout=10.0):
    """A scripted reply the fake gives only once `event` is set (the test's cue)."""
    def answer(_request):
        assert event.wait(timeout), "the test never gave the cue"
        return item
    return answer


def transcript(vault, session) -> list[dict]:
    """The session's messages (not the lines saying a message was received)."""
    files = sorted((vault.root / "sessions" / session).glob("*.jsonl"))
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    return [x for x in lines if x.get("type") != "received"]


def request_text(rec) -> str:
    return json.dumps(rec.body["messages"], ensure_ascii=False)


# ---- the router: injection ---------------------------------------------------------------


def test_a_message_sent_during_a_tool_call_is_injected_and_answered_in_the_same_turn(
        vault, fake_anthropic):
    cue = threading.Event()
    fake_anthropic.add(after(cue, reply("Let me look.", tool_use("memory_search", {"query": "kyoto"}))),
                       reply("The trip is planned, and yes: the hotel is booked too."))
    conv = router(vault)
    first = conv.submit("gateway/phone", "plan the Kyoto trip")
    fake_anthropic.wait_for_requests(1)
    assert conv.running() == ["gateway/phone"]
    second = conv.submit("gateway/phone", "and book the hotel")
    assert second.injected and not first.injected
    cue.set()
    result = first.wait(20)
    assert second.wait(20) is result
    assert result.reply == "The trip is planned, and yes: the hotel is booked too."
    # Each ticket's answer: what the model wrote after its message reached it (the
    # first's, the text before the tool call too).
    assert second.reply == result.reply and first.reply == "Let me look.\n\n" + result.reply
    # The very next model call saw it: after the tool result, in the same user message.
    calls = fake_anthropic.calls()
    assert len(calls) == 2
    last_user = calls[1].body["messages"][-1]
    assert last_user["role"] == "user"
    kinds = [b["type"] for b in last_user["content"]]
    assert kinds == ["tool_result", "text"]
    assert last_user["content"][1]["text"] == "and book the hotel"
    # Saved where the model saw it, as the person's message, in one commit.
    lines = transcript(vault, "gateway/phone")
    assert [(m["role"], m.get("injected")) for m in lines] == [
        ("user", None), ("assistant", None), ("user", None), ("user", True), ("assistant", None)]
    assert lines[3]["content"] == "and book the hotel" and lines[3]["turn"] == 1
    assert subjects(vault)[0] == "chat(gateway/phone): plan the Kyoto trip"
    assert len([s for s in subjects(vault) if s.startswith("chat(")]) == 1
    body = vault.git("log", "-1", "--format=%B")
    assert "Injected: 1" in body
    assert conv.drain(10) and vault.dirty_paths() == []
    # Search finds it as the person's words in that session.
    from agent.search import index
    hits = index.search(vault, "book hotel", limit=5)
    assert any(h.session == "gateway/phone" and h.speaker == "user"
               and h.text == "and book the hotel" for h in hits)
    # Compaction never cuts a turn at a message injected into it.
    from agent.chat.compact import plan_cut
    later = [{**m, "turn": 2, "id": f"2.{i}"} for i, m in enumerate(lines)]
    assert plan_cut(lines + later, budget=1) == len(lines)


def test_a_message_sent_while_the_reply_is_written_is_answered_after_it(vault, fake_anthropic):
    cue = threading.Event()
    fake_anthropic.add(after(cue, reply("Kyoto: three days.")),
                       reply("Osaka too, one day."))
    conv = router(vault)
    first = conv.submit("gateway/phone", "plan the Kyoto trip")
    fake_anthropic.wait_for_requests(1)
    second = conv.submit("gateway/phone", "and Osaka?")
    cue.set()
    result = first.wait(20)
    assert second.wait(20) is result
    assert first.reply == "Kyoto: three days.\n\nOsaka too, one day."
    assert second.reply == "Osaka too, one day."
    sent = fake_anthropic.calls()[1].body["messages"]
    assert sent[-2]["role"] == "assistant" and "Kyoto: three days." in json.dumps(sent[-2])
    assert sent[-1]["role"] == "user" and sent[-1]["content"][-1]["text"] == "and Osaka?"
    lines = transcript(vault, "gateway/phone")
    assert [m["role"] for m in lines] == ["user", "assistant", "user", "assistant"]
    assert lines[2]["injected"] is True
    # The next turn's prompt rebuilds the window from these lines, roles alternating.
    fake_anthropic.add(reply("Noted."))
    conv.submit("gateway/phone", "thanks").wait(20)
    window = fake_anthropic.calls()[2].body["messages"]
    assert [m["role"] for m in window] == ["user", "assistant", "user", "assistant", "user"]
    assert "and Osaka?" in json.dumps(window[2])
    assert conv.drain(10)


def test_a_message_after_the_last_model_call_is_the_next_turn(vault, fake_anthropic):
    cue = threading.Event()
    fake_anthropic.add(after(cue, reply("One.")), reply("Two."))
    conv = router(vault, max_iterations=1)       # the first call is the last one
    first = conv.submit("gateway/phone", "first question")
    fake_anthropic.wait_for_requests(1)
    second = conv.submit("gateway/phone", "second question")
    cue.set()
    r1, r2 = first.wait(20), second.wait(20)
    assert r1 is not r2 and r1.reply == "One." and r2.reply == "Two."
    assert (r1.turn, r2.turn) == (1, 2) and not second.injected
    assert "second question" not in request_text(fake_anthropic.calls()[0])
    assert fake_anthropic.calls()[1].body["messages"][-1]["content"][-1]["text"] == \
        "second question"
    assert subjects(vault)[:2] == ["chat(gateway/phone): second question",
                                   "chat(gateway/phone): first question"]
    assert not any(m.get("injected") for m in transcript(vault, "gateway/phone"))
    assert conv.drain(10)


def test_two_sessions_run_their_turns_at_once(vault, fake_anthropic):
    both = threading.Barrier(2, timeout=10)

    def together(request):
        both.wait()           # each answer waits until the other request has arrived
        said = request["messages"][-1]["content"][-1]["text"]
        return reply(f"answer to {said}")
    fake_anthropic.add(together, together)
    conv = router(vault)
    a = conv.submit("gateway/a", "alpha")
    b = conv.submit("telegram/42", "beta")
    ra, rb = a.wait(20), b.wait(20)
    assert (ra.reply, rb.reply) == ("answer to alpha", "answer to beta")
    assert sorted(subjects(vault)[:2]) == ["chat(gateway/a): alpha", "chat(telegram/42): beta"]
    assert conv.drain(10) and vault.dirty_paths() == [] and conv.running() == []


def test_events_of_a_turn_arrive_in_order(vault, fake_anthropic):
    fake_anthropic.add(reply("Looking.", tool_use("memory_search", {"query": "x"})),
                       reply("Found nothing."))
    events = []
    conv = router(vault)
    conv.submit("gateway/e", "find x", on_event=lambda k, d: events.append((k, d))).wait(20)
    kinds = [k for k, _ in events]
    assert kinds[0] == "text" and kinds[-1] == "reply"
    assert kinds.index("tool_start") < kinds.index("tool_done") < len(kinds) - 1
    assert dict(events[kinds.index("tool_done")][1]) == {"name": "memory_search",
                                                         "is_error": False}
    final = events[-1][1]
    # The whole reply of the turn, the text written before the tool call too.
    assert final["reply"] == "Looking.\n\nFound nothing." and final["session"] == "gateway/e"
    assert final["turn"] == 1 and final["commit"] == vault.head() and final["injected"] is False
    assert "".join(d["text"] for k, d in events if k == "text") == "Looking.\n\nFound nothing."


def test_a_failing_turn_is_reported_and_the_session_goes_on(vault, fake_anthropic):
    fake_anthropic.add(error(400, "invalid_request_error", "prompt is too long"),
                       reply("Fine now."))
    errors = []
    conv = Conversations(vault, make_provider(), clock=vault_now,
                         settings_fn=lambda: load_settings(vault.root),
                         on_error=lambda s, e: errors.append((s, e)))
    bad = conv.submit("gateway/x", "first")
    result = bad.wait(20)
    assert result.error and "prompt is too long" in bad.error
    assert errors and errors[0][0] == "gateway/x"
    assert conv.submit("gateway/x", "second").wait(20).reply == "Fine now."
    assert conv.drain(10)


def test_cancel_stops_the_running_turn_and_saves_it(vault, fake_anthropic):
    fake_anthropic.add(reply("word " * 200, chunk_delay=0.05, chunk_size=5))
    conv = router(vault)
    t = conv.submit("gateway/c", "talk a lot")
    fake_anthropic.wait_for_requests(1)[0].wait_for_text()
    assert conv.cancel("gateway/c") and not conv.cancel("gateway/other")
    result = t.wait(20)
    assert result.interrupted
    assert "Interrupted: yes" in vault.git("log", "-1", "--format=%B")
    assert conv.drain(10)


def test_drain_waits_for_the_turn_in_flight_then_refuses_new_messages(vault, fake_anthropic):
    cue = threading.Event()
    fake_anthropic.add(after(cue, reply("Done.")))
    conv = router(vault)
    t = conv.submit("gateway/d", "work")
    fake_anthropic.wait_for_requests(1)
    assert conv.drain(0.05) is False             # still running
    with pytest.raises(ServeStopping):
        conv.submit("gateway/d", "more")
    cue.set()
    assert conv.drain(20) is True
    assert t.wait(0).reply == "Done."
    assert subjects(vault)[0] == "chat(gateway/d): work"


def test_bad_session_keys_and_empty_text_are_refused(vault, fake_anthropic):
    from agent.errors import UserError

    conv = router(vault)
    for key in ("../etc", "nochat", "a/b/c", ""):
        with pytest.raises(UserError):
            conv.submit(key, "hi")
    with pytest.raises(UserError):
        conv.submit("gateway/x", "   ")
    assert conv.running() == []


def test_hold_keeps_a_scheduled_turn_and_a_chat_turn_of_one_session_apart(vault, fake_anthropic):
    fake_anthropic.add(reply("chat answer"))
    conv = router(vault)
    with conv.hold("telegram/7"):
        assert conv.running() == ["telegram/7"]
        t = conv.submit("telegram/7", "hello")
        assert not t.injected and t.wait(0.1) is None    # waits for the held turn
        assert fake_anthropic.calls() == []
    assert t.wait(20).reply == "chat answer"
    assert conv.drain(10)


# ---- the gateway, in process ---------------------------------------------------------------

import os
import stat
import urllib.error
import urllib.request

from agent.serve.gateway import MAX_BODY, Gateway
from agent.serve.remote import Remote, RemoteError


@pytest.fixture
def gateway(vault, fake_anthropic):
    conv = router(vault)
    gw = Gateway(vault, conv, port=0).start()
    yield gw
    gw.close(5)
    conv.drain(10)


def http(gw, method, path, body=None, *, token="right", accept=None, raw=None, headers=None):
    """(status, parsed JSON or text) of one request to the gateway."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(gw.url + path, data=data, method=method)
    if token == "right":
        req.add_header("Authorization", f"Bearer {gw.token}")
    elif token is not None:
        req.add_header("Authorization", token)
    if accept:
        req.add_header("Accept", accept)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def sse(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.split("\n\n"):
        lines = [x for x in block.splitlines() if not x.startswith(":")]
        kind = next((x[6:].strip() for x in lines if x.startswith("event:")), None)
        data = "\n".join(x[5:].strip() for x in lines if x.startswith("data:"))
        if kind:
            out.append((kind, json.loads(data)))
    return out


MSG = "/v1/sessions/gateway/phone/messages"


def test_gateway_runs_a_turn_and_answers_json(vault, gateway, fake_anthropic):
    fake_anthropic.add(reply("Hello from the agent."))
    status, answer = http(gateway, "POST", MSG, {"text": "hello"})
    assert status == 200
    assert answer == {"reply": "Hello from the agent.", "commit": vault.head(),
                      "session": "gateway/phone", "turn": 1, "injected": False, "error": None,
                      "interrupted": False}
    assert subjects(vault)[0] == "chat(gateway/phone): hello"
    line = transcript(vault, "gateway/phone")[0]
    assert line["content"] == "hello" and line["source"] == "gateway"
    status, health = http(gateway, "GET", "/v1/health")
    assert status == 200 and health["ok"] is True and health["running"] == []
    assert health["version"] and health["accepting"] is True


def test_gateway_files_tell_clients_where_it_is_and_the_token_stays_private(vault, gateway):
    token_file = vault.state / "gateway-token"
    assert token_file.read_text().strip() == gateway.token and len(gateway.token) >= 32
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    info = json.loads((vault.state / "gateway.json").read_text())
    assert info["url"] == gateway.url and info["port"] == gateway.port > 0
    assert info["pid"] == os.getpid()
    assert vault.dirty_paths() == []              # .agent/ is ignored: nothing to commit
    assert Remote.find(vault).health()["ok"] is True
    gateway.close(5)
    assert not token_file.exists() and not (vault.state / "gateway.json").exists()


@pytest.mark.parametrize("token", [None, "Bearer wrong", "Basic dXNlcjpwYXNz", "Bearer "])
def test_gateway_without_the_right_token_is_401_and_stores_nothing(vault, gateway,
                                                                    fake_anthropic, token):
    head = vault.head()
    status, answer = http(gateway, "POST", MSG, {"text": "let me in"}, token=token)
    assert status == 401 and "token" in answer["error"]
    status, _ = http(gateway, "GET", "/v1/health", token=token)
    assert status == 401
    assert vault.head() == head and not (vault.root / "sessions" / "gateway").exists()
    assert fake_anthropic.calls() == [] and vault.dirty_paths() == []


def test_gateway_unknown_paths_are_404(gateway, fake_anthropic):
    for method, path in (("GET", "/"), ("POST", "/v1/sessions/gateway/phone"),
                         ("POST", "/v1/sessions/a/b/c/messages"), ("GET", "/v1/nothing")):
        status, answer = http(gateway, method, path, {"text": "x"} if method == "POST" else None)
        assert status == 404 and "no such endpoint" in answer["error"], path
    assert fake_anthropic.calls() == []


@pytest.mark.parametrize("raw,problem", [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"message": "hi"}', 'missing "text"'),
    (b'{"text": 42}', '"text" must be a string, not int'),
    (b'{"text": "  "}', '"text" is empty'),
    (b"\xff\xfe", "not UTF-8"),
])
def test_gateway_bad_bodies_are_400_naming_the_problem(vault, gateway, fake_anthropic, raw,
                                                       problem):
    head = vault.head()
    status, answer = http(gateway, "POST", MSG, raw=raw)
    assert status == 400 and problem in answer["error"]
    assert fake_anthropic.calls() == [] and vault.head() == head


def test_gateway_bad_session_key_is_400_and_a_huge_body_413(vault, gateway, fake_anthropic):
    status, answer = http(gateway, "POST", "/v1/sessions/..%2F/x/messages", {"text": "hi"})
    assert status == 400 and "CHANNEL/CHAT" in answer["error"]
    status, answer = http(gateway, "POST", "/v1/sessions/%2E%2E/x/messages", {"text": "hi"})
    assert status == 400
    # A body over the limit is refused from its Content-Length, before it is read.
    import socket
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall((f"POST {MSG} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Authorization: Bearer {gateway.token}\r\n"
                      f"Content-Type: application/json\r\n"
                      f"Content-Length: {MAX_BODY + 1}\r\n\r\n").encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413 ") and b"at most" in answer
    assert fake_anthropic.calls() == [] and not (vault.root / "sessions" / "gateway").exists()


def test_gateway_streams_the_turn_as_server_sent_events_in_order(vault, gateway, fake_anthropic):
    fake_anthropic.add(reply("Checking.", tool_use("memory_search", {"query": "kyoto"})),
                       reply("Nothing about Kyoto yet."))
    status, text = http(gateway, "POST", MSG, {"text": "kyoto?"}, accept="text/event-stream")
    assert status == 200
    events = sse(text)
    kinds = [k for k, _ in events]
    runs = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert runs == ["text", "tool_start", "tool_done", "text", "reply"]
    assert events[kinds.index("tool_start")][1] == {"name": "memory_search",
                                                     "input": {"query": "kyoto"}}
    assert events[-1][1]["reply"] == "Checking.\n\nNothing about Kyoto yet."   # all the text
    assert events[-1][1]["commit"] == vault.head()
    streamed = "".join(d["text"] for k, d in events if k == "text")
    assert streamed == "Checking.\n\nNothing about Kyoto yet."


def wait_for_log(caplog, text, timeout=15.0):
    done = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if any(text in r.getMessage() for r in caplog.records):
            return
        done.wait(0.02)
    raise AssertionError(f"no log line {text!r}")


def test_a_second_gateway_message_joins_the_running_turn(vault, gateway, fake_anthropic, caplog):
    caplog.set_level("INFO", logger="agent.serve")
    cue = threading.Event()
    fake_anthropic.add(after(cue, reply(tool_use("memory_search", {"query": "hotel"}))),
                       reply("Booked the flight and the hotel."))
    answers = {}
    t = threading.Thread(target=lambda: answers.update(
        first=http(gateway, "POST", MSG, {"text": "book the flight"})))
    t.start()
    fake_anthropic.wait_for_requests(1)
    second = threading.Thread(target=lambda: answers.update(
        second=http(gateway, "POST", MSG, {"text": "and the hotel"})))
    second.start()
    # The cue comes once the gateway has handed the message to the running turn.
    wait_for_log(caplog, "chat gateway/phone: a message joined the running turn")
    cue.set()
    t.join(30)
    second.join(30)
    (s1, a1), (s2, a2) = answers["first"], answers["second"]
    assert s1 == s2 == 200
    assert a2["injected"] is True and a1["injected"] is False
    assert a1["commit"] == a2["commit"] == vault.head() and a1["turn"] == a2["turn"] == 1
    assert a2["reply"] == "Booked the flight and the hotel."
    assert "and the hotel" in json.dumps(fake_anthropic.calls()[1].body["messages"][-1])


def test_remote_without_a_running_gateway_says_how_to_start_one(vault):
    with pytest.raises(RemoteError) as e:
        Remote.find(vault)
    assert "No agent serve is running" in str(e.value) and "agent serve" in str(e.value)


# ---- agent serve as a process, and agent chat --remote -----------------------------------------

import signal

from conftest import agent_proc
from test_serve import ServeProc, procs  # noqa: F401  (fixture)


def enable_gateway(vault):
    path = vault.root / "agent.toml"
    path.write_text(path.read_text() + "\n[gateway]\nport = 0\n")
    vault.git("commit", "-q", "-am", "gateway on")


class Client:
    """The gateway of a running serve, as gateway.json and the token file tell it."""

    def __init__(self, vault):
        info = json.loads((vault.state / "gateway.json").read_text())
        self.url, self.port = info["url"], info["port"]
        self.token = (vault.state / "gateway-token").read_text().strip()


def test_chat_remote_sends_through_a_running_serve(vault, run, fake_anthropic, procs):
    enable_gateway(vault)
    fake_anthropic.add(reply("Hi from ", "serve."), reply("Second answer."))
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("agent serve on")
    assert "gateway on http://127.0.0.1:" in serve.output
    p = agent_proc("chat", "--remote", "-m", "hello there", vault=vault.root, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "Hi from serve."
    assert subjects(vault)[0] == "chat(cli/default): hello there"
    p = agent_proc("chat", "--remote", "--session", "cli/other", "--new", "-m", "again",
                   vault=vault.root, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "Second answer.", p.stderr
    assert subjects(vault)[0] == "chat(cli/other): again"
    assert serve.stop() == 0
    assert not (vault.state / "gateway.json").exists()
    assert "chat cli/default turn 1: ok" in serve.output
    # serve gone: --remote says what to do, without a traceback.
    p = agent_proc("chat", "--remote", "-m", "anyone?", vault=vault.root, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "No agent serve is running" in p.stderr and "agent serve" in p.stderr
    assert vault.dirty_paths() == []


def test_chat_m_goes_through_the_running_serve_of_its_own_vault_only(
        vault, run, fake_anthropic, procs, tmp_path):
    enable_gateway(vault)
    fake_anthropic.add(reply("Through serve."), reply("Here."), reply("Copy here."))
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("agent serve on")
    p = agent_proc("chat", "-m", "hello there", vault=vault.root, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "Through serve."
    assert "[through the running agent serve; --local runs the turn here]" in p.stderr
    serve.wait_for("chat cli/default turn 1: ok")
    # --local runs the turn in this process.
    p = agent_proc("chat", "--local", "-m", "and here", vault=vault.root, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "Here.", p.stderr
    assert "through agent serve" not in p.stderr and "turn 2" not in serve.output
    # A copy of the vault carries the gateway's files, but that serve is not its own.
    copy = tmp_path / "copy"
    shutil.copytree(vault.root, copy, symlinks=True,
                    ignore=shutil.ignore_patterns("gateway.sock"))    # a socket is not copied
    p = agent_proc("chat", "-m", "in the copy", vault=copy, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "Copy here.", p.stderr
    assert "through agent serve" not in p.stderr
    assert "in the copy" in "".join(
        f.read_text() for f in (copy / "sessions/cli/default").glob("*.jsonl"))
    assert "in the copy" not in "".join(
        f.read_text() for f in (vault.root / "sessions/cli/default").glob("*.jsonl"))
    # serve gone, its files left behind (a kill): chat -m runs here, quietly.
    serve.kill()
    assert (vault.state / "gateway.json").exists()
    fake_anthropic.add(reply("After the kill."))
    p = agent_proc("chat", "-m", "anyone?", vault=vault.root, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "After the kill.", p.stderr
    assert "through agent serve" not in p.stderr


def test_without_a_port_serve_answers_chat_on_its_own_socket_only(
        vault, run, fake_anthropic, procs):
    fake_anthropic.add(reply("Via the socket."), reply("Remote REPL-less."))
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("agent serve on")
    sock = vault.state / "gateway.sock"
    deadline = time.monotonic() + 30
    while not (vault.state / "gateway.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    info = json.loads((vault.state / "gateway.json").read_text())
    assert info["url"] is None and info["port"] is None and info["socket"] == str(sock)
    assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert "gateway on" not in serve.output                 # no TCP port was opened
    p = agent_proc("chat", "-m", "hello", vault=vault.root, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "Via the socket.", p.stderr
    assert "[through the running agent serve" in p.stderr
    p = agent_proc("chat", "--remote", "-m", "again", vault=vault.root, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "Remote REPL-less.", p.stderr
    serve.wait_for("chat cli/default turn 2: ok")
    # The token is still needed on the socket.
    import http.client
    import socket as socketlib

    conn = http.client.HTTPConnection("localhost")
    conn.sock = socketlib.socket(socketlib.AF_UNIX)
    conn.sock.connect(str(sock))
    conn.request("POST", "/v1/sessions/cli/default/messages", body=b'{"text": "x"}')
    assert conn.getresponse().status == 401
    assert serve.stop() == 0
    assert not sock.exists() and not (vault.state / "gateway.json").exists()


def test_sigterm_with_a_turn_in_flight_still_answers_the_client_and_commits(
        vault, run, fake_anthropic, procs):
    enable_gateway(vault)
    words = "one two three four five six seven."
    fake_anthropic.add(reply(words, chunk_delay=0.3, chunk_size=4))
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("agent serve on")
    gw = Client(vault)
    answers = {}
    t = threading.Thread(target=lambda: answers.update(
        first=http(gw, "POST", "/v1/sessions/gateway/term/messages", {"text": "count"})))
    t.start()
    fake_anthropic.wait_for_requests(1)[0].wait_for_text()
    serve.p.send_signal(signal.SIGTERM)
    assert serve.stop() == 0
    t.join(30)
    status, answer = answers["first"]
    assert status == 200 and answer["reply"] == words and answer["interrupted"] is False
    assert answer["commit"] == vault.head()
    assert subjects(vault)[0] == "chat(gateway/term): count"
    assert "waiting for the chat turns of gateway/term" in serve.output
    assert vault.dirty_paths() == [] and len(fake_anthropic.calls()) == 1


def test_remote_repl_streams_and_a_line_typed_meanwhile_joins_the_turn(vault, fake_anthropic,
                                                                       procs):
    from test_chat import Terminal

    enable_gateway(vault)
    cue = threading.Event()
    fake_anthropic.add(after(cue, reply("Looking.", tool_use("memory_search", {"query": "x"}))),
                       reply("Both done remotely."))
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("agent serve on")
    term = Terminal(vault, "--remote")
    term.until(b"> ")
    term.send("first thing\r")
    fake_anthropic.wait_for_requests(1)
    term.send("second thing\r", b"[added to the running turn]")
    serve.wait_for("chat cli/default: a message joined the running turn: second thing")
    cue.set()
    term.until(b"Both done remotely.")
    term.until(b"> ")
    term.send("\x04")
    assert term.exit_status() == 0
    assert "second thing" in json.dumps(fake_anthropic.calls()[1].body["messages"][-1])
    assert "Injected: 1" in vault.git("log", "-1", "--format=%B")
    assert serve.stop() == 0


def test_a_gateway_port_already_taken_is_one_clear_error(vault, fake_anthropic):
    from agent.serve.gateway import GatewayError

    conv = router(vault)
    first = Gateway(vault, conv, port=0).start()
    try:
        with pytest.raises(GatewayError) as e:
            Gateway(vault, conv, port=first.port).start()
        assert f"127.0.0.1:{first.port}" in str(e.value) and "[gateway] port" in str(e.value)
    finally:
        first.close(5)
