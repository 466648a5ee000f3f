"""The router every serve channel shares (agent/serve/conversations.py): one turn at a
time per session, a message sent while a turn runs injected into it or run next,
cancel, drain, hold. Judged by the requests the fake Anthropic server received, the
transcript lines and `git log`; timing is by conditions (events), never by sleeps."""

from __future__ import annotations

import json
import threading

import pytest
from fakeanthropic import error, reply, tool_use

from agent.config import load_settings
from agent.llm import make_provider
from agent.serve.conversations import Conversations, ServeStopping
from agent.clock import now as vault_now
from conftest import subjects
from helpers import after, router, transcript


def request_text(rec) -> str:
    return json.dumps(rec.body["messages"], ensure_ascii=False)


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
