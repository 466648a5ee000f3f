"""Delivery of scheduled output: a cron job's or heartbeat's reply sent to the chat its
`deliver` names, written into that chat's transcript, retried when Telegram fails, never
lost silently (`agent cron list`), and HEARTBEAT_OK never sent.

In-process tests drive `Server.step(now)` with the channel connected to the fake Bot
API; one runs `agent serve`."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from fakeanthropic import reply

from agent.ops import jobs
from agent.serve.delivery import NO_CHANNEL
from conftest import subjects
from helpers import (ANA, T0, Running, ServeProc, configure_telegram, heartbeat_file, jobs_json,
                     server_at, session_messages)

CHAT = f"telegram/{ANA}"


@pytest.fixture
def channel(vault, fake_telegram, fake_anthropic):
    configure_telegram(vault, fake_telegram.url)
    running = Running(vault, fake_telegram)
    assert running.channel.connected.wait(20)
    yield running.channel
    running.stop()


def serving(vault, t, channel=None):
    s, clock = server_at(vault, t, compact=False)
    if channel is not None:
        s.outbox.senders["telegram"] = channel
    return s, clock


def test_a_cron_jobs_reply_is_delivered_and_the_chat_has_it_as_context(
        vault, channel, fake_telegram, fake_anthropic):
    job, _ = jobs.add(vault, "stretch", "remind me to stretch", T0, every="1h", deliver=CHAT)
    assert jobs_json(vault)[0]["deliver"] == CHAT
    s, clock = serving(vault, T0, channel)
    fake_anthropic.add(reply("Time to *stretch*, Ana."))
    clock.t = T0 + timedelta(hours=1)
    s.step(clock.t)
    assert [m["text"] for m in fake_telegram.sent(ANA)] == ["Time to *stretch*, Ana."]
    log = subjects(vault)
    assert log[0] == f"deliver({CHAT}): Time to *stretch*, Ana."
    assert log[1].startswith(f"cron(cron/{job.id}): remind me to stretch")
    lines = session_messages(vault, CHAT)
    assert [(l["role"], l["content"], l["source"]) for l in lines] == [
        ("assistant", "Time to *stretch*, Ana.", f"cron/{job.id}")]
    assert "delivery" not in jobs_json(vault)[0]["state"]
    assert vault.dirty_paths() == []
    # Ana answers in Telegram: the model sees what was sent before her answer.
    fake_anthropic.add(reply("Great."))
    fake_telegram.message(ANA, "done, stretched")
    fake_telegram.wait_sent(ANA, 2)
    sent = fake_anthropic.calls()[-1].body["messages"]
    assert "Time to *stretch*, Ana." in json.dumps(sent[:-1])
    assert sent[0]["role"] == "user"


def test_heartbeat_ok_is_never_delivered_and_a_real_reply_is(vault, channel, fake_telegram,
                                                            fake_anthropic):
    heartbeat_file(vault, "inbox", f"every: 1h\ndeliver: {CHAT}\n")
    s, clock = serving(vault, T0, channel)
    fake_anthropic.add(reply("HEARTBEAT_OK"))
    s.step(T0)
    assert fake_telegram.sent(ANA) == []
    fake_anthropic.add(reply("Two new notes need an answer."))
    clock.t = T0 + timedelta(hours=1, seconds=1)
    s.step(clock.t)
    assert [m["text"] for m in fake_telegram.sent(ANA)] == ["Two new notes need an answer."]
    assert subjects(vault)[0] == f"deliver({CHAT}): Two new notes need an answer."
    assert session_messages(vault, CHAT)[0]["source"] == "heartbeat/inbox"
    state = json.loads((vault.state / "heartbeat-state.json").read_text())
    assert state["inbox"].get("delivery") is None


def test_a_failing_delivery_is_recorded_retried_and_shown_until_it_goes_out(
        vault, channel, fake_telegram, fake_anthropic, run):
    job, _ = jobs.add(vault, "water", "remind me to drink", T0, every="1d", deliver=CHAT)
    fake_telegram.blocked.add(ANA)                 # 403: the person blocked the bot
    s, clock = serving(vault, T0, channel)
    fake_anthropic.add(reply("Drink a glass of water."))
    clock.t = T0 + timedelta(days=1)
    s.step(clock.t)
    d = jobs_json(vault)[0]["state"]["delivery"]
    assert d["status"] == "retrying" and d["attempts"] == 1 and d["target"] == CHAT
    assert "403" in d["error"] and "blocked" in d["error"]
    assert d["text"] == "Drink a glass of water."
    assert subjects(vault)[0].startswith(f'cron: "water": delivery to {CHAT} failed, retried later')
    listed = run("cron", "list").output
    assert f"{job.id}  water: delivery to {CHAT} failing (1 attempt: 403 Forbidden" in listed
    s.step(clock.t + timedelta(seconds=30))        # before the next try: nothing
    assert len(fake_telegram.calls("sendMessage")) == 1
    fake_telegram.blocked.clear()
    clock.t += timedelta(seconds=61)
    s.step(clock.t)
    assert [m["text"] for m in fake_telegram.sent(ANA)] == ["Drink a glass of water."]
    assert "delivery" not in jobs_json(vault)[0]["state"]
    assert "delivery" not in run("cron", "list").output
    assert len(fake_anthropic.calls()) == 1        # the job did not run again


def test_a_delivery_that_keeps_failing_is_given_up_and_says_so(vault, channel, fake_telegram,
                                                               fake_anthropic, run):
    jobs.add(vault, "water", "remind me to drink", T0, every="1d", deliver=CHAT)
    fake_telegram.blocked.add(ANA)
    s, clock = serving(vault, T0, channel)
    fake_anthropic.add(reply("Drink."))
    clock.t = T0 + timedelta(days=1)
    s.step(clock.t)
    for wait in (60, 300, 1800, 7200):
        clock.t += timedelta(seconds=wait + 1)
        s.step(clock.t)
    d = jobs_json(vault)[0]["state"]["delivery"]
    assert d["status"] == "failed" and d["attempts"] == 5 and d["next_try"] is None
    assert len(fake_telegram.calls("sendMessage")) == 5
    assert "delivery to telegram/42 FAILED after 5 attempts" in run("cron", "list").output
    clock.t += timedelta(hours=5)
    s.step(clock.t)
    assert len(fake_telegram.calls("sendMessage")) == 5


def test_without_telegram_the_delivery_waits_and_a_restart_with_it_sends_it(
        vault, fake_telegram, fake_anthropic, run):
    job, _ = jobs.add(vault, "plan", "plan my day", T0, every="1d", deliver=CHAT)
    s, clock = serving(vault, T0)                 # serve without a Telegram channel
    fake_anthropic.add(reply("Your plan: rest."))
    clock.t = T0 + timedelta(days=1)
    s.step(clock.t)
    d = jobs_json(vault)[0]["state"]["delivery"]
    assert d["status"] == "retrying" and d["error"] == NO_CHANNEL
    assert "TELEGRAM_BOT_TOKEN" in run("cron", "list").output
    # serve restarts, now with Telegram
    configure_telegram(vault, fake_telegram.url)
    running = Running(vault, fake_telegram)
    try:
        assert running.channel.connected.wait(20)
        s2, clock2 = serving(vault, clock.t + timedelta(minutes=2), running.channel)
        s2.step(clock2.t)
        assert [m["text"] for m in fake_telegram.sent(ANA)] == ["Your plan: rest."]
    finally:
        running.stop()
    assert "delivery" not in jobs_json(vault)[0]["state"]
    assert subjects(vault)[0] == f"deliver({CHAT}): Your plan: rest."


def test_deliver_targets_are_checked_everywhere(vault, run, fake_anthropic):
    from click.testing import CliRunner
    from agent.cli.app import cli

    result = CliRunner().invoke(cli, ["--vault", str(vault.root), "cron", "add", "x", "-m", "hi",
                                      "--every", "1h", "--deliver", "whatsapp/12"])
    assert result.exit_code != 0 and "telegram/<chat id>" in result.output
    assert "Traceback" not in result.output
    assert not (vault.root / "cron.json").exists() or "whatsapp" not in \
        (vault.root / "cron.json").read_text()
    ok = run("cron", "add", "y", "-m", "hi", "--every", "1h", "--deliver", "telegram/-1001234")
    assert "delivered to telegram/-1001234" in ok.output
    heartbeat_file(vault, "bad", "every: 1h\ndeliver: telegram/me\n")
    listed = CliRunner().invoke(cli, ["--vault", str(vault.root), "heartbeat", "list"])
    assert "heartbeat/bad.md: deliver 'telegram/me' is not a place to deliver to" in listed.output
    added = run("heartbeat", "add", "inbox", "--every", "2h", "-m", "look", "--deliver", CHAT)
    assert added.exit_code == 0
    assert f"deliver: {CHAT}" in (vault.root / "heartbeat" / "inbox.md").read_text()


def test_the_cron_add_tool_takes_deliver(vault, fake_anthropic):
    from fakeanthropic import tool_use
    from agent.chat.turn import run_turn
    from agent.llm import make_provider

    fake_anthropic.add(reply(tool_use("cron_add", {"name": "tea", "message": "tea time",
                                                   "every": "1d", "deliver": CHAT})),
                       reply("Scheduled."))
    run_turn(vault, make_provider(), CHAT, "remind me daily about tea here", T0)
    assert jobs_json(vault)[0]["deliver"] == CHAT


@pytest.mark.slow
def test_serve_delivers_a_cron_jobs_reply_to_telegram(vault, run, fake_telegram, fake_anthropic,
                                                     procs):
    configure_telegram(vault, fake_telegram.url)
    run("cron", "add", "ping", "-m", "say pong", "--every", "2s", "--deliver", CHAT)
    fake_anthropic.default_reply = reply("pong")
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for(f"delivered to {CHAT}")
    assert serve.stop() == 0
    assert fake_telegram.sent(ANA)[0]["text"] == "pong"
    assert any(s == f"deliver({CHAT}): pong" for s in subjects(vault))
    assert vault.dirty_paths() == []


def test_a_one_off_reminder_is_removed_only_once_its_reply_is_delivered(
        vault, channel, fake_telegram, fake_anthropic):
    at = (T0 + timedelta(hours=6)).isoformat()
    job, _ = jobs.add(vault, "call", "remind me to call Anna", T0, at=at, deliver=CHAT)
    fake_telegram.down = True
    s, clock = serving(vault, T0, channel)
    fake_anthropic.add(reply("Call Anna now."))
    clock.t = T0 + timedelta(hours=6)
    s.step(clock.t)
    kept = jobs_json(vault)
    assert [j["id"] for j in kept] == [job.id]                 # kept: not delivered yet
    assert kept[0]["state"]["delivery"]["status"] == "retrying"
    fake_telegram.down = False
    clock.t += timedelta(minutes=2)
    s.step(clock.t)
    assert [m["text"] for m in fake_telegram.sent(ANA)] == ["Call Anna now."]
    assert jobs_json(vault) == []                              # delivered: now it goes


def test_a_heartbeat_delivery_that_fails_is_shown_by_heartbeat_list(vault, fake_anthropic, run):
    heartbeat_file(vault, "inbox", f"every: 1h\ndeliver: {CHAT}\n")
    s, clock = serving(vault, T0)                  # no Telegram channel
    fake_anthropic.add(reply("The inbox has two notes."))
    s.step(T0)
    state = json.loads((vault.state / "heartbeat-state.json").read_text())
    assert state["inbox"]["delivery"]["status"] == "retrying"
    listed = run("heartbeat", "list").output
    assert f"inbox: delivery to {CHAT} failing (1 attempt: {NO_CHANNEL}" in listed
