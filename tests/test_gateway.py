"""The local HTTP gateway (agent/serve/gateway.py) and `agent chat --remote`: tokens,
paths and bodies refused with the right status, answers as JSON or server-sent events,
serve's Unix socket, a message joining a running turn (the router itself:
test_conversations.py).

Judged by what a user relies on: the requests the fake Anthropic server received, the
transcript lines, `git log`, HTTP answers and CLI output. Timing is by conditions (an
event the fake's scripted reply waits for), never by sleeping."""

from __future__ import annotations

import json
import shutil
import threading

import pytest
from fakeanthropic import reply, tool_use

from conftest import subjects, wait_for
from helpers import MSG, after, http, router, transcript


# ---- the router: injection ---------------------------------------------------------------


# ---- the gateway, in process ---------------------------------------------------------------

import os
import stat

from agent.serve.gateway import MAX_BODY, Gateway
from agent.serve.remote import Remote, RemoteError


def sse(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.split("\n\n"):
        lines = [x for x in block.splitlines() if not x.startswith(":")]
        kind = next((x[6:].strip() for x in lines if x.startswith("event:")), None)
        data = "\n".join(x[5:].strip() for x in lines if x.startswith("data:"))
        if kind:
            out.append((kind, json.loads(data)))
    return out


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


@pytest.mark.parametrize("head, status", [
    ("POST /v1/sessions/gateway/x/messages HTTP/1.1\r\n", 401),              # no token
    ("POST /v1/nowhere HTTP/1.1\r\nAuthorization: Bearer {token}\r\n", 404),
    ("PUT /v1/sessions/gateway/x/messages HTTP/1.1\r\nAuthorization: Bearer {token}\r\n", 405),
    ("POST /v1/sessions/gateway/x/stop HTTP/1.1\r\nAuthorization: Bearer {token}\r\n", 200),
])
def test_a_request_answered_before_its_body_was_needed_still_gets_the_answer(vault, gateway,
                                                                              head, status):
    # A client that writes its headers and then its body (http.client does) must read
    # the answer, not a broken pipe: the gateway reads the body it was sent before it
    # answers and hangs up. The body goes only once the gateway has had time to answer
    # early (on a Unix socket, writing to a peer that hung up is a broken pipe at once).
    import select
    import socket as socketlib

    body = b'{"text": "x"}'
    with socketlib.socket(socketlib.AF_UNIX) as s:
        s.connect(str(vault.state / "gateway.sock"))
        s.sendall((head.format(token=gateway.token) + "Host: localhost\r\nConnection: close\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode())
        select.select([s], [], [], 1.0)
        s.sendall(body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.split(b" ", 2)[1] == str(status).encode(), answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])


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
from helpers import ServeProc, enable_gateway


class Client:
    """The gateway of a running serve, as gateway.json and the token file tell it."""

    def __init__(self, vault):
        info = json.loads((vault.state / "gateway.json").read_text())
        self.url, self.port = info["url"], info["port"]
        self.token = (vault.state / "gateway-token").read_text().strip()


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_without_a_port_serve_answers_chat_on_its_own_socket_only(
        vault, run, fake_anthropic, procs):
    fake_anthropic.add(reply("Via the socket."), reply("Remote REPL-less."))
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("agent serve on")
    sock = vault.state / "gateway.sock"
    wait_for((vault.state / "gateway.json").exists, "gateway.json")
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


@pytest.mark.slow
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
    assert serve.wait() == 0
    t.join(30)
    status, answer = answers["first"]
    assert status == 200 and answer["reply"] == words and answer["interrupted"] is False
    assert answer["commit"] == vault.head()
    assert subjects(vault)[0] == "chat(gateway/term): count"
    assert "waiting for the chat turns of gateway/term" in serve.output
    assert vault.dirty_paths() == [] and len(fake_anthropic.calls()) == 1


@pytest.mark.slow
def test_remote_repl_streams_and_a_line_typed_meanwhile_joins_the_turn(vault, fake_anthropic,
                                                                       procs):
    from helpers import Terminal

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
