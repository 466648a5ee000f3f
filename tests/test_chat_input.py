"""What a person's input does to a chat: piped lines and slash commands, text piped with
a message, Ctrl-C at the prompt or on a turn running in agent serve, Ctrl-D."""

from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import agent_proc, subjects
from fakeanthropic import reply


@pytest.mark.slow
def test_piped_repl_input_runs_slash_commands_as_typed(fake_anthropic, vault, tmp_path):
    fake_anthropic.add(reply("Hello back"))
    p = agent_proc("chat", "--session", "cli/script", vault=vault.root,
                   input="/help\nhello\n/undo\n")
    assert p.returncode == 0, p.stderr
    assert "/memory" in p.stdout and "/undo" in p.stdout      # /help's list, not a message
    assert "Hello back" in p.stdout
    assert len(fake_anthropic.calls()) == 1
    sent = fake_anthropic.calls()[0].body["messages"][-1]["content"]
    assert "/help" not in json.dumps(sent) and "hello" in json.dumps(sent)
    assert "agent chat - session" not in p.stdout              # no banner, no prompts
    assert subjects(vault)[0].startswith("undo")                # /undo ran too


@pytest.mark.slow
def test_piped_text_not_starting_with_a_command_is_still_one_message(fake_anthropic, vault):
    fake_anthropic.add(reply("One answer"))
    p = agent_proc("chat", "--session", "cli/one", vault=vault.root,
                   input="first line\n/help is a word here\n")
    assert p.returncode == 0, p.stderr
    assert len(fake_anthropic.calls()) == 1
    assert "/help is a word here" in json.dumps(fake_anthropic.calls()[0].body["messages"])


def test_piped_text_and_a_message_are_both_sent_stdin_first(fake_anthropic, vault, run):
    from fakeanthropic import reply

    fake_anthropic.add(reply("A short summary."))
    r = run("chat", "--local", "-m", "summarise this", input="The meeting moved to Friday.\n")
    assert r.exit_code == 0, r.output
    sent = fake_anthropic.calls()[0].body["messages"][-1]["content"]
    text = sent if isinstance(sent, str) else "".join(b.get("text", "") for b in sent)
    assert text.endswith("The meeting moved to Friday.\n\nsummarise this")


def test_ctrl_c_at_the_repl_prompt_exits_130_and_ctrl_d_exits_0(fake_anthropic, vault):
    import pty
    import subprocess

    import signal

    def repl(press) -> int:
        leader, follower = pty.openpty()
        p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat",
                              "--local"], stdin=follower, stdout=follower, stderr=follower)
        os.close(follower)
        seen = b""
        while b"> " not in seen:          # the prompt: the REPL waits for a line
            seen += os.read(leader, 4096)
        try:
            # A key pressed again if the program has not left: input() loses a SIGINT that
            # lands between drawing the prompt and waiting for a key (see test_chat's
            # Terminal.ctrl_c_at_prompt); a person never presses that fast, a test does.
            for _ in range(30):
                press(p, leader)
                try:
                    return p.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    continue
            raise AssertionError("agent chat did not leave")
        finally:
            p.kill()
            os.close(leader)
    # Ctrl-C: the terminal sends the foreground process SIGINT; Ctrl-D: end of input.
    assert repl(lambda p, tty: p.send_signal(signal.SIGINT)) == 130
    assert repl(lambda p, tty: os.write(tty, b"\x04")) == 0


@pytest.mark.slow
def test_ctrl_c_on_chat_m_through_serve_stops_the_turn_keeps_it_interrupted_exit_130(
        vault, fake_anthropic, procs):
    import signal
    import subprocess
    import threading

    from fakeanthropic import reply
    from helpers import after, transcript
    from helpers import ServeProc, enable_gateway

    enable_gateway(vault)
    cue = threading.Event()
    fake_anthropic.add(after(cue, reply("Far too late."), timeout=60))
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("agent serve on")
    p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat", "-m",
                          "think about it slowly"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        fake_anthropic.wait_for_requests(1, path="/v1/messages", timeout=60)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        cue.set()                      # the fake's held reply goes, to a turn already stopped
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "Aborted!" not in err and "Traceback" not in err
    assert "[interrupted: your message and the partial reply are saved]" in err
    lines = transcript(vault, "cli/default")
    assert lines[0]["role"] == "user" and lines[0]["content"] == "think about it slowly"
    assert lines[-1].get("interrupted") is True
    assert "Far too late." not in json.dumps(lines)
    assert subjects(vault)[0].startswith("chat(cli/default): think about it slowly")
    serve.wait_for("chat cli/default turn 1: interrupted")


def test_a_paste_of_several_lines_at_the_prompt_is_one_message(fake_anthropic, vault):
    """A terminal asked to (ESC[?2004h) pastes in brackets (ESC[200~ ... ESC[201~) with CR
    line ends. The REPL never asked, so the first pasted line was sent as a message and
    the rest as another, joined by CR."""
    import pty
    import subprocess

    fake_anthropic.add(reply("Noted all three."))
    leader, follower = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat",
                          "--local"], stdin=follower, stdout=follower, stderr=follower,
                         env={**os.environ, "TERM": "xterm"})
    os.close(follower)
    try:
        seen = b""
        while b"> " not in seen:
            seen += os.read(leader, 4096)
        # The REPL asks the terminal to bracket what is pasted, as a terminal then does.
        assert b"\x1b[?2004h" in seen
        os.write(leader, b"\x1b[200~first line\rsecond line\rthird line\x1b[201~")
        os.write(leader, b"\r")
        while b"> " not in seen.partition(b"Noted all three.")[2]:   # the reply, then the prompt
            seen += os.read(leader, 4096)
        for _ in range(30):                     # Ctrl-D, again if it landed before input()
            os.write(leader, b"\x04")
            try:
                assert p.wait(timeout=2) == 0
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        p.kill()
        os.close(leader)
    assert len(fake_anthropic.calls()) == 1
    sent = json.dumps(fake_anthropic.calls()[0].body["messages"][-1]["content"])
    assert "first line\\nsecond line\\nthird line" in sent, sent
