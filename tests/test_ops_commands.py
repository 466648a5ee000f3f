"""The slash commands: one table (agent/ops/commands.py) that the terminal and Telegram
serve, giving the same answers; what a front-end does not offer, and why."""

from __future__ import annotations

import re

import pytest

from agent.ops import commands
from conftest import agent_proc, subjects
from fakeanthropic import reply
from helpers import ANA, Terminal, session_lines

LINES = ["/help", "/memory", "/stop", "/review", "/undo", "/nonsense"]


def _listed(help_text: str) -> set[str]:
    return set(re.findall(r"^(/[a-z?]+)\s", help_text, re.M))


def test_the_repl_and_telegram_serve_the_same_slash_commands(vault, tg, fake_telegram,
                                                             fake_anthropic):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Ana likes tea\n")
    vault.git("commit", "-qam", "memory")
    head = vault.git("rev-parse", "HEAD")

    p = agent_proc("chat", vault=vault.root, input="".join(f"{l}\n" for l in LINES))
    assert p.returncode == 0, p.stderr
    for line in LINES:
        fake_telegram.message(ANA, line)
    fake_telegram.wait_sent(ANA, len(LINES))
    # (each answer is sent when it is ready: one per line, in any order)
    told = sorted((s["text"] for s in fake_telegram.sent(ANA)),
                  key=lambda t: [t.startswith(w) for w in ("/new", "--- ", "Nothing is",
                                                           "Nothing waits", "Nothing to",
                                                           "Unknown")].index(True))

    # /help lists the table's commands on each: the same ones, but /quit in the terminal
    repl_help, tg_help = _listed(p.stdout), _listed(told[0])
    assert repl_help == {"/new", "/undo", "/memory", "/stop", "/review", "/help", "/quit"}
    assert tg_help == repl_help - {"/quit"}
    # ...and every other command answers the same in both (the session's name aside)
    user = (vault.root / "USER.md").read_text().rstrip("\n")
    assert told[1] == f"--- MEMORY.md\n# Memory\n\n- Ana likes tea\n\n--- USER.md\n{user}"
    assert f"--- MEMORY.md\n# Memory\n\n- Ana likes tea\n--- USER.md\n{user}\n" in p.stdout
    for said in told[2:]:
        assert said.replace(f"telegram/{ANA}", "cli/default") in p.stdout
    assert told[2:] == ["Nothing is running.", "Nothing waits for review.",
                        f"Nothing to undo in telegram/{ANA}: it has no turn the agent could "
                        f"undo.", "Unknown command /nonsense; /help lists them."]
    assert vault.git("rev-parse", "HEAD") == head and fake_anthropic.calls() == []


def test_undo_from_either_front_end_is_one_commit_of_the_same_words(vault, tg, fake_telegram,
                                                                    fake_anthropic):
    fake_anthropic.add(reply("Noted."), reply("Noted too."))
    p = agent_proc("chat", vault=vault.root, input="/help\nthe blue door\n/undo\n")
    assert p.returncode == 0, p.stderr
    fake_telegram.message(ANA, "the red door")
    fake_telegram.wait_sent(ANA, 1)
    turn = vault.git("rev-parse", "HEAD")
    fake_telegram.message(ANA, "/undo")
    said = fake_telegram.wait_sent(ANA, 2)[1]["text"]
    undo = vault.git("rev-parse", "HEAD")
    assert said == (f"Undid {turn[:7]} (chat(telegram/{ANA}): the red door) in {undo[:7]}.")
    assert re.search(r"^Undid [0-9a-f]{7} \(chat\(cli/default\): the blue door\) in "
                     r"[0-9a-f]{7}\.$", p.stdout, re.M)
    assert [s for s in subjects(vault) if s.startswith("undo")] == [
        f'undo: revert "chat(telegram/{ANA}): the red door"',
        'undo: revert "chat(cli/default): the blue door"']
    assert session_lines(vault) == []


@pytest.mark.slow
def test_stop_typed_while_the_repl_writes_a_reply_stops_it(fake_anthropic, vault):
    words = " ".join(f"w{i}" for i in range(300))
    fake_anthropic.add(reply(words, chunk_delay=0.05))
    term = Terminal(vault)
    term.until(b"> ")
    term.send("/stop\r", b"Nothing is running.")          # at the prompt nothing runs
    term.send("tell me everything\r", b"w3 ")
    term.send("/stop\r", b"[Stopped; what was said is kept.]")
    term.until(b"> ")
    lines = session_lines(vault)
    assert lines[-1]["interrupted"] is True and lines[-1]["content"].startswith("w0 w1 w2 w3")
    assert len(fake_anthropic.calls()) == 1                # /stop was no message


def test_what_each_front_end_does_not_offer_is_said_with_why():
    assert set(commands.unavailable("repl")) == {"/start"}
    assert set(commands.unavailable("telegram")) == {"/quit"}
    assert set(commands.unavailable("web")) == {"/quit", "/start"}
    assert all(commands.unavailable(f).values() for f in commands.FRONTS)
    assert commands.find("/Undo@agent_test_bot now", "telegram").name == "/undo"
    assert commands.find("/q", "repl").name == "/quit" and commands.find("/q", "web") is None
    assert commands.words("repl") >= {"/quit", "/exit", "/q", "/?", "/help", "/stop"}
