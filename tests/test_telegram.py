"""Telegram, run by `agent serve`: allowed and unknown users, slash commands, long
replies, Markdown Telegram rejects, typing, offsets across restarts, the token kept out
of everything, and Telegram down at start.

In-process tests run the channel with the real router against the fake Bot API
(faketelegram.py) and the fake Anthropic API; the end-to-end ones run `agent serve`."""

from __future__ import annotations

import json

import pytest

from fakeanthropic import json_reply, reply

from agent.serve.channels.replies import LIMIT, split_message, utf16_len
from conftest import subjects
from helpers import ANA, EVE, Running, ServeProc, configure_telegram, session_messages


def all_vault_bytes(vault) -> bytes:
    """Every file under the vault (the work tree, .agent/ and .git/ objects unpacked by
    `git log -p --all`)."""
    out = [vault.git("log", "-p", "--all", "--format=%H %an %s%n%b").encode()]
    for p in vault.root.rglob("*"):
        if p.is_file() and ".git" not in p.relative_to(vault.root).parts:
            out.append(p.read_bytes())
    return b"\n".join(out)


# ---- conversations ----------------------------------------------------------------------


def test_an_allowed_user_gets_a_turn_committed_and_the_reply(vault, tg, fake_telegram,
                                                              fake_anthropic):
    fake_anthropic.add(reply("Kyoto in *April*: book the ryokan now.", delay=0.3))
    fake_telegram.message(ANA, "plan the Kyoto trip")
    sent = fake_telegram.wait_sent(ANA)
    assert sent[0]["text"] == "Kyoto in *April*: book the ryokan now."
    assert sent[0]["parse_mode"] == "Markdown"
    assert subjects(vault)[:2] == [f"chat(telegram/{ANA}): plan the Kyoto trip",
                                   f"receive(telegram/{ANA}): plan the Kyoto trip"]
    lines = session_messages(vault, f"telegram/{ANA}", receipts=True)
    assert [(l.get("type"), l.get("role"), l["content"]) for l in lines] == [
        ("received", None, "plan the Kyoto trip"), (None, "user", "plan the Kyoto trip"),
        (None, "assistant", "Kyoto in *April*: book the ryokan now.")]
    assert lines[1]["received"] == lines[0]["id"]
    # typing while the model worked
    actions = fake_telegram.calls("sendChatAction")
    assert actions and actions[0].params == {"chat_id": ANA, "action": "typing"}
    assert actions[0].at < fake_telegram.calls("sendMessage")[0].at
    # the model saw the message, never the token
    body = json.dumps([c.body for c in fake_anthropic.calls()])
    assert "plan the Kyoto trip" in body and fake_telegram.token not in body
    assert fake_telegram.token.encode() not in all_vault_bytes(vault)


def test_a_stranger_is_told_the_bot_is_private_and_nothing_is_stored(vault, tg, fake_telegram,
                                                                      fake_anthropic):
    head = vault.git("rev-parse", "HEAD")
    fake_telegram.message(EVE, "my secret plan for the bank", username="eve")
    sent = fake_telegram.wait_sent(EVE)
    assert len(sent) == 1 and "private" in sent[0]["text"] and str(EVE) in sent[0]["text"]
    assert fake_anthropic.calls() == []
    assert vault.git("rev-parse", "HEAD") == head
    assert not (vault.root / "sessions" / f"telegram/{EVE}").exists()
    assert b"secret plan" not in all_vault_bytes(vault)       # no session, commit, index
    refused = [json.loads(l) for l in
               (vault.state / "telegram-refused.log").read_text().splitlines()]
    assert len(refused) == 1
    assert {refused[0][k] for k in ("user_id", "chat_id", "username")} == {EVE, EVE, "eve"}
    assert refused[0]["time"]


def test_in_a_group_only_allowed_users_are_answered(vault, tg, fake_telegram, fake_anthropic):
    group = -100123
    fake_anthropic.add(reply("Hello group."))
    fake_telegram.message(EVE, "hi bot", chat_id=group, chat_type="group")
    fake_telegram.message(ANA, "hi from ana", chat_id=group, chat_type="group")
    sent = fake_telegram.wait_sent(group)
    assert [s["text"] for s in sent] == ["Hello group."]
    assert subjects(vault)[0] == f"chat(telegram/{group}): hi from ana"
    assert b"hi bot" not in all_vault_bytes(vault)


def test_photos_get_one_line_and_edits_are_ignored(vault, tg, fake_telegram, fake_anthropic):
    head = vault.git("rev-parse", "HEAD")
    fake_telegram.message(ANA, None, photo=True)
    fake_telegram.message(ANA, "edited text", edited=True)
    fake_telegram.message(ANA, "/help")
    sent = fake_telegram.wait_sent(ANA, 2)
    assert "only text" in sent[0]["text"]
    assert "/new" in sent[1]["text"]                   # the help: the edit got nothing
    assert vault.git("rev-parse", "HEAD") == head and fake_anthropic.calls() == []


def test_replies_to_one_chat_keep_its_order_while_other_chats_go_on(vault, tg, fake_telegram,
                                                                   fake_anthropic):
    """A message whose turn takes long, then a photo and /help: the photo's line and the
    help wait for the turn's reply, in the order they were sent; another chat's /help is
    answered meanwhile."""
    import threading

    from helpers import after

    group = -100123
    cue = threading.Event()
    # Generous limits (a loaded machine is slow), never what is tested.
    fake_anthropic.add(after(cue, reply("Kyoto in April: book the ryokan now."), timeout=120))
    fake_telegram.message(ANA, "plan the Kyoto trip")
    fake_anthropic.wait_for_requests(1, "/v1/messages", timeout=120)
    fake_telegram.message(ANA, None, photo=True)
    fake_telegram.message(ANA, "/help")
    fake_telegram.message(ANA, "/help", chat_id=group, chat_type="group")
    assert "/new" in fake_telegram.wait_sent(group, timeout=120)[0]["text"]   # the turn waits
    cue.set()
    sent = [s["text"] for s in fake_telegram.wait_sent(ANA, 3, timeout=120)]
    assert sent[0] == "Kyoto in April: book the ryokan now."
    assert "only text" in sent[1] and "/new" in sent[2]


def test_a_long_reply_is_split_at_the_limit_on_line_boundaries(vault, tg, fake_telegram,
                                                              fake_anthropic):
    # ~9,000 chars of words that do not repeat (one word over and over is a runaway
    # reply, which the turn cuts: agent/chat/bounds.py)
    paragraphs = [f"Paragraph {i}: " + " ".join(f"w{i}x{j}" for j in range(110))
                  for i in range(12)]
    fake_anthropic.add(reply("\n\n".join(p.strip() for p in paragraphs)))
    fake_telegram.message(ANA, "write a lot")
    fake_telegram.wait_for(lambda: fake_anthropic.calls(), what="the model call")
    sent = fake_telegram.wait_sent(ANA, 3)
    assert len(sent) == 3 and all(utf16_len(s["text"]) <= LIMIT for s in sent)
    assert all(s["text"].startswith("Paragraph") for s in sent)     # cut between paragraphs
    assert " ".join(" ".join(s["text"].split()) for s in sent) == \
        " ".join(" ".join(p.split()) for p in paragraphs)


def test_split_message_counts_utf16_and_cuts_where_it_can():
    assert split_message("short") == ["short"]
    emoji = "😀" * 3000                    # 6000 UTF-16 units, no spaces
    pieces = split_message(emoji)
    assert "".join(pieces) == emoji and all(utf16_len(p) <= LIMIT for p in pieces)
    lines = "\n".join(f"line {i}" for i in range(1200))
    pieces = split_message(lines)
    assert all(p.startswith("line ") for p in pieces) and len(pieces) == 3


def test_markdown_telegram_rejects_is_sent_again_as_plain_text(vault, tg, fake_telegram,
                                                               fake_anthropic):
    bad = "Use snake_case names like my_var_name"
    fake_telegram.bad_markdown.add(bad)
    fake_anthropic.add(reply(bad))
    fake_telegram.message(ANA, "naming?")
    sent = fake_telegram.wait_sent(ANA)
    assert sent == [{"chat_id": ANA, "text": bad}]          # no parse_mode the second time
    tries = fake_telegram.calls("sendMessage")
    assert [r.status for r in tries] == [400, 200] and tries[0].params["parse_mode"] == "Markdown"


# ---- slash commands ---------------------------------------------------------------------------


def test_slash_commands_help_memory_undo_new(vault, tg, fake_telegram, fake_anthropic):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Ana likes tea\n")
    vault.git("commit", "-qam", "memory")
    fake_telegram.message(ANA, "/memory")
    assert "Ana likes tea" in fake_telegram.wait_sent(ANA, 1)[0]["text"]
    fake_telegram.message(ANA, "/nonsense")
    assert "Unknown command /nonsense" in fake_telegram.wait_sent(ANA, 2)[1]["text"]

    fake_anthropic.add(reply("Noted."))
    fake_telegram.message(ANA, "remember the blue door")
    fake_telegram.wait_sent(ANA, 3)
    turn = vault.git("rev-parse", "HEAD")
    fake_telegram.message(ANA, "/undo@agent_test_bot")
    said = fake_telegram.wait_sent(ANA, 4)[3]["text"]
    assert said.startswith(f"Undid {turn[:7]}")
    assert subjects(vault)[0].startswith("undo")
    assert session_messages(vault, f"telegram/{ANA}") == []

    fake_anthropic.add(reply("Hi again."))
    fake_telegram.message(ANA, "the garden needs water")
    fake_telegram.wait_sent(ANA, 5)
    fake_anthropic.add(json_reply({"topic": "Garden", "summary": "The garden needs water.",
                                   "importance": 0.3}))
    fake_telegram.message(ANA, "/new")
    said = fake_telegram.wait_sent(ANA, 6)[5]["text"]
    assert said.startswith("Archived as entry") and "Garden" in said
    assert subjects(vault)[0].startswith(f"archive(telegram/{ANA})")


def test_stop_cancels_the_chats_running_turn(vault, tg, fake_telegram, fake_anthropic):
    fake_anthropic.add(reply("one two three four five six seven eight nine ten " * 20,
                             chunk_delay=0.05))
    fake_telegram.message(ANA, "count slowly")
    fake_anthropic.wait_for_requests(1)[0].wait_for_text()
    fake_telegram.message(ANA, "/stop")
    sent = fake_telegram.wait_sent(ANA, 2)
    texts = [s["text"] for s in sent]
    assert "Stopped; what was said is kept." in texts
    # The reply as far as it had come (on a loaded machine the stop can land before
    # the first streamed words reached the turn), marked as stopped.
    reply_text = next(t for t in texts if t != "Stopped; what was said is kept.")
    assert reply_text.endswith("[stopped]")
    assert reply_text == "[stopped]" or reply_text.startswith("one")
    lines = session_messages(vault, f"telegram/{ANA}")
    assert lines[-1].get("interrupted") is True
    fake_telegram.message(ANA, "/stop")
    assert fake_telegram.wait_sent(ANA, 3)[2]["text"] == "Nothing is running."


# ---- restarts and outages ---------------------------------------------------------------------


def test_a_restart_does_not_answer_old_messages_again(vault, fake_telegram, fake_anthropic):
    configure_telegram(vault, fake_telegram.url)
    fake_anthropic.default_reply = reply("Answer.")
    first = Running(vault, fake_telegram)
    fake_telegram.message(ANA, "first message")
    fake_telegram.wait_sent(ANA, 1)
    first.stop()
    assert json.loads((vault.state / "telegram.json").read_text()) == {"offset": 2}
    fake_telegram.unconfirm()           # Telegram never heard the last offset
    second = Running(vault, fake_telegram)
    try:
        fake_telegram.message(ANA, "second message")
        fake_telegram.wait_sent(ANA, 2)
    finally:
        second.stop()
    assert len(fake_telegram.sent(ANA)) == 2
    assert [l["content"] for l in session_messages(vault, f"telegram/{ANA}")
            if l["role"] == "user"] == ["first message", "second message"]


def test_telegram_down_at_start_is_retried_until_it_answers(vault, fake_telegram, fake_anthropic,
                                                             caplog):
    configure_telegram(vault, fake_telegram.url)
    fake_telegram.down = True
    fake_anthropic.add(reply("Back."))
    running = Running(vault, fake_telegram)
    try:
        fake_telegram.wait_for(lambda: len(fake_telegram.calls("getMe")) >= 1, what="getMe")
        fake_telegram.message(ANA, "are you there")
        fake_telegram.down = False
        sent = fake_telegram.wait_sent(ANA, timeout=30)
        assert sent[0]["text"] == "Back."
    finally:
        running.stop()
    assert len(fake_telegram.calls("getMe")) >= 2


# ---- agent serve, end to end ------------------------------------------------------------------


@pytest.mark.slow
def test_serve_answers_on_telegram_and_sigterm_lets_the_reply_go_out(
        vault, fake_telegram, fake_anthropic, procs):
    configure_telegram(vault, fake_telegram.url)
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("telegram: connected as @agent_test_bot; 1 allowed user")
    fake_anthropic.add(reply("A slow and careful answer.", chunk_delay=0.2))
    fake_telegram.message(ANA, "think it over")
    fake_anthropic.wait_for_requests(1)[0].wait_for_text()
    assert serve.stop() == 0                       # SIGTERM while the turn runs
    assert [s["text"] for s in fake_telegram.sent(ANA)] == ["A slow and careful answer."]
    assert subjects(vault)[0] == f"chat(telegram/{ANA}): think it over"
    assert vault.dirty_paths() == []
    # the token is nowhere: vault files, history, serve.log, model requests
    token = fake_telegram.token
    assert token.encode() not in all_vault_bytes(vault)
    assert token not in serve.output
    assert token not in json.dumps([c.body for c in fake_anthropic.calls()])
    assert token not in json.dumps([dict(c.headers) for c in fake_anthropic.calls()])


@pytest.mark.slow
def test_serve_with_telegram_unreachable_says_so_once_and_runs_cron(vault, run, fake_anthropic,
                                                                   fake_telegram, procs):
    configure_telegram(vault, "http://127.0.0.1:9")           # nothing listens there
    run("cron", "add", "ping", "-m", "say pong", "--every", "1s")
    fake_anthropic.default_reply = reply("pong")
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for('cron "ping"')
    serve.wait_for("): ok")
    serve.wait_for("telegram: cannot reach http://127.0.0.1:9")
    assert serve.stop() == 0
    assert sum("telegram: cannot reach" in line for line in serve.lines) == 1
    assert fake_telegram.token not in serve.output


def test_serve_enabled_without_a_token_says_how_to_set_it(vault, fake_anthropic, procs):
    configure_telegram(vault, "http://127.0.0.1:9")
    serve = ServeProc(vault, env={"TELEGRAM_BOT_TOKEN": ""})
    procs.append(serve)
    serve.wait_for("agent serve on")
    serve.wait_for("$TELEGRAM_BOT_TOKEN is not set")
    assert serve.stop() == 0


def test_a_token_in_agent_toml_is_refused_without_echoing_it(vault, run):
    (vault.root / "agent.toml").write_text('[channels.telegram]\ntoken = "123:SECRETSECRET"\n')
    from click.testing import CliRunner
    from agent.cli.app import cli
    result = CliRunner().invoke(cli, ["--vault", str(vault.root), "config", "check"])
    assert result.exit_code != 0
    assert "TELEGRAM_BOT_TOKEN" in result.output and "SECRETSECRET" not in result.output


def test_a_stranger_is_told_once_and_an_id_added_while_serving_counts_at_once(
        vault, tg, fake_telegram, fake_anthropic):
    for text in ("one", "two", "three"):
        fake_telegram.message(EVE, text)
    fake_telegram.wait_sent(EVE, 1)
    fake_telegram.wait_for(lambda: len((vault.state / "telegram-refused.log").read_text()
                                       .splitlines()) == 3 if (vault.state / "telegram-refused.log")
                           .exists() else False, what="three refusals logged")
    assert len(fake_telegram.sent(EVE)) == 1            # a flood gets one line
    tg.settings.telegram_allow_from = [ANA, EVE]         # agent.toml edited, serve reloaded
    fake_anthropic.add(reply("Welcome, Eve."))
    fake_telegram.message(EVE, "may I now?")
    assert fake_telegram.wait_sent(EVE, 2)[1]["text"] == "Welcome, Eve."


def test_a_wrong_token_is_said_once_and_retried(vault, fake_telegram, fake_anthropic, caplog):
    configure_telegram(vault, fake_telegram.url)
    running = Running(vault, fake_telegram, token="999:a-token-BotFather-revoked")
    try:
        fake_telegram.wait_for(lambda: len(fake_telegram.calls("getMe")) >= 2, timeout=30,
                               what="a second getMe")
    finally:
        running.stop()
    refused = [r.getMessage() for r in caplog.records if "token was refused" in r.getMessage()]
    assert len(refused) == 1 and "TELEGRAM_BOT_TOKEN" in refused[0]
    assert "revoked" not in refused[0]
    assert all(r.status == 401 for r in fake_telegram.calls("getMe"))


def test_doctor_checks_the_telegram_channel_when_it_is_enabled(vault, fake_telegram,
                                                                fake_anthropic, monkeypatch):
    from click.testing import CliRunner
    from agent.cli.app import cli

    def doctor():
        out = CliRunner().invoke(cli, ["--vault", str(vault.root), "doctor", "--json"]).output
        checks, _ = json.JSONDecoder().raw_decode(out[out.index("["):])
        return {c["name"]: c for c in checks}

    assert "telegram" not in doctor()                       # not enabled: not checked
    configure_telegram(vault, fake_telegram.url)
    assert doctor()["telegram"] == {"name": "telegram", "status": "ok",
                                    "detail": "@agent_test_bot, 1 allowed user", "fix": ""}
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "1:wrong")
    bad = doctor()["telegram"]
    assert bad["status"] == "fail" and "refused" in bad["detail"] and "1:wrong" not in str(bad)
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN")
    assert "is not set" in doctor()["telegram"]["detail"]
