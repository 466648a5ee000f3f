"""The model seam (agent/llm): the Anthropic provider against the fake API (real SDK, real
HTTP on 127.0.0.1), the scripted provider, and unit tests of the turn and compaction that
use the scripted one, where an HTTP round trip adds nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from agent.chat.compact import CompactError, compact_session
from agent.chat.turn import run_turn
from agent.llm import (BatchRequest, Interrupted, Message, NotFound, ProviderError, Reply, Request, Text,
                       ToolCall, ToolResult, make_provider)
from agent.llm.anthropic import NoApiKey
from agent.llm.records import TOOL_CALLS
from agent.llm.scripted import ScriptedProvider, failure, json_reply, reply, tool_call
from agent.stores import archive, sessions
from conftest import subjects
from fakeanthropic import error
from fakeanthropic import reply as fake_reply
from fakeanthropic import tool_use as fake_tool_use

NOW = datetime(2026, 11, 20, 14, 5, tzinfo=timezone(timedelta(hours=1)))
HI = [Message("user", "hi")]


# ---- the Anthropic provider -----------------------------------------------------------


def test_stream_gives_text_as_it_comes_and_a_plain_message(fake_anthropic):
    fake_anthropic.add(fake_reply("Hello there, friend", fake_tool_use("list_dir", {}, id="t1")))
    chunks = []
    msg = make_provider().stream(["claude-a"], Request(HI, 50), on_text=chunks.append)
    assert "".join(chunks) == "Hello there, friend"
    assert msg.content == [Text("Hello there, friend"), ToolCall("t1", "list_dir", {})]
    assert msg.model == "claude-a" and msg.stop_reason == TOOL_CALLS
    assert msg.usage.output_tokens > 0 and msg.tool_calls[0].name == "list_dir"
    assert fake_anthropic.last.body["stream"] is True


def test_fallback_chain_moves_on_for_overload_and_stops_for_other_errors(fake_anthropic):
    fake_anthropic.add(error(529, "overloaded_error", "Overloaded"), fake_reply("from b"))
    msg = make_provider(max_retries=0).create(["claude-a", "claude-b"], Request(HI, 5))
    assert msg.text == "from b" and msg.model == "claude-b"
    assert [c.body["model"] for c in fake_anthropic.calls()] == ["claude-a", "claude-b"]

    fake_anthropic.add(error(400, "invalid_request_error", "prompt is too long"))
    with pytest.raises(ProviderError) as e:
        make_provider(max_retries=0).create(["claude-a", "claude-b"], Request(HI, 5))
    assert str(e.value) == ("The Anthropic API failed (HTTP 400, invalid_request_error): "
                            "prompt is too long")
    assert e.value.problem() == "400 invalid_request_error: prompt is too long"
    assert [c.body["model"] for c in fake_anthropic.calls()][2:] == ["claude-a"]


def test_structured_output_and_count_tokens(fake_anthropic):
    from fakeanthropic import json_reply as fake_json
    fake_anthropic.add(fake_json({"topic": "x"}))
    schema = {"type": "object", "properties": {"topic": {"type": "string"}}}
    p = make_provider()
    msg = p.create("claude-a", Request(HI, 50, schema=schema))
    assert msg.text == '{"topic": "x"}'
    assert fake_anthropic.last.body["output_config"]["format"]["schema"] == schema
    assert p.count_tokens("claude-a", Request(HI, 50)) > 0
    assert fake_anthropic.calls("/v1/messages/count_tokens")[0].body["model"] == "claude-a"


def test_batches_as_plain_records(fake_anthropic):
    from fakeanthropic import json_reply as fake_json
    fake_anthropic.add(fake_json({"n": 1}))
    fake_anthropic.batch_result("b-", error(529, "overloaded_error", "Overloaded"))
    p = make_provider().batching("claude-a")
    req = Request(HI, 10)
    batch = p.batch_create([BatchRequest("a-1", "claude-a", req), BatchRequest("b-1", "claude-a", req)])
    assert batch.status in ("in_progress", "ended") and batch.id.startswith("msgbatch")
    assert fake_anthropic.last.body["requests"][0]["params"] == {
        "model": "claude-a", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    while not (batch := p.batch_retrieve(batch.id)).ended:
        pass
    assert batch.counts["succeeded"] == 1 and batch.counts["errored"] == 1
    results = p.batch_results(batch.id)
    assert results["a-1"].type == "succeeded" and results["a-1"].message.text == '{"n": 1}'
    assert results["b-1"].type == "errored" and results["b-1"].error == "overloaded_error: Overloaded"
    with pytest.raises(NotFound):
        p.batch_retrieve("msgbatch_nope")


def test_ctrl_c_mid_stream_is_an_interruption_carrying_what_had_arrived(fake_anthropic):
    fake_anthropic.add(fake_reply("Hello there, friend"))
    heard = []

    def stop(chunk):
        heard.append(chunk)
        raise KeyboardInterrupt
    with pytest.raises(Interrupted) as e:
        make_provider().stream("claude-a", Request(HI, 50), on_text=stop)
    assert isinstance(e.value, KeyboardInterrupt)        # caught wherever Ctrl-C is
    assert e.value.text == heard[0] != ""
    assert e.value.usage.input_tokens > 0                # counted as the stream began


def test_an_openai_stream_stopped_by_ctrl_c_is_the_same_interruption(fake_openai):
    from agent.llm.openai import OpenAIProvider
    from agent.llm.spec import ProviderSpec
    from fakeopenai import reply as o_reply

    fake_openai.add(o_reply("Hello there, friend"))
    p = OpenAIProvider(ProviderSpec("local", "openai", fake_openai.url))

    def stop(chunk):
        raise KeyboardInterrupt
    with pytest.raises(Interrupted) as e:
        p.stream("qwen3:8b", Request(HI, 50), on_text=stop)
    assert e.value.text and "Hello there, friend".startswith(e.value.text)


def with_local(vault, url: str):
    from agent.config import load_settings
    (vault.root / "agent.toml").write_text(
        (vault.root / "agent.toml").read_text()
        + f'\n[providers.local]\napi = "openai"\nbase_url = "{url}"\nkey_env = ""\n')
    return make_provider(load_settings(vault.root))


def test_batching_is_a_capability_of_the_providers_that_have_a_batch_api(vault, fake_openai,
                                                                         fake_anthropic):
    from agent.llm import Batching
    from agent.llm.anthropic import AnthropicProvider
    from agent.llm.openai import OpenAIProvider

    router = with_local(vault, fake_openai.url)
    assert isinstance(router.batching("claude-a"), Batching)
    assert router.batching("local/qwen3:8b") is None
    assert issubclass(AnthropicProvider, Batching) and not issubclass(OpenAIProvider, Batching)
    assert not hasattr(OpenAIProvider, "batch_create")          # no stubs to carry
    assert ScriptedProvider().batching("m") is not None


def test_the_router_lists_the_models_of_every_configured_provider(vault, fake_openai,
                                                                  fake_anthropic):
    router = with_local(vault, fake_openai.url)
    listed = router.list_models()
    assert {"local/qwen3:8b", "local/llama3.2"} <= set(listed)
    assert any(m.startswith("anthropic/claude") for m in listed)
    assert not any(m.startswith("openai/") for m in listed)     # no OPENAI_API_KEY: not set up


def test_no_key_now_or_at_the_first_call(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(NoApiKey):
        make_provider()
    lazy = make_provider(lazy=True)           # made without a key ...
    with pytest.raises(NoApiKey):             # ... which is asked for when a model is called
        lazy.create("claude-a", Request(HI, 5))


# ---- the scripted provider ------------------------------------------------------------


def test_scripted_provider_answers_in_order_and_records_requests():
    p = ScriptedProvider("one", reply("two", usage={"input_tokens": 3, "output_tokens": 1}),
                         failure(529, "overloaded_error"), json_reply({"ok": True}))
    heard = []
    assert p.stream("m1", Request(HI, 5), on_text=heard.append).text == "one" and heard == ["one"]
    assert p.create(["m1"], Request(HI, 5)).usage.input_tokens == 3
    msg = p.create(["m1", "m2"], Request(HI, 5))         # m1 overloaded: m2 answers
    assert msg.model == "m2" and msg.text == '{"ok": true}'
    assert [(r.kind, r.model) for r in p.requests] == [
        ("stream", "m1"), ("create", "m1"), ("create", "m1"), ("create", "m2")]
    with pytest.raises(AssertionError, match="no reply left"):
        p.create("m1", Request(HI, 5))


# ---- the turn and compaction, on the scripted provider --------------------------------


def test_turn_tool_loop_sends_results_back_and_commits_once(vault):
    p = ScriptedProvider(
        reply("Let me look.", tool_call("remember", {"text": "Likes green tea"}, id="t1")),
        reply("Noted: green tea."))
    chunks = []
    result = run_turn(vault, p, "cli/default", "I like green tea", NOW, on_text=chunks.append)

    assert result.reply == "Noted: green tea." and result.error is None
    assert "".join(chunks) == "Let me look.\n\nNoted: green tea."
    assert len(p.requests) == 2
    sent = p.requests[1].request.messages
    assert sent[-2].blocks[-1] == ToolCall("t1", "remember", {"text": "Likes green tea"})
    (res,) = sent[-1].blocks
    assert isinstance(res, ToolResult) and res.call_id == "t1" and not res.is_error
    assert subjects(vault)[0] == "chat(cli/default): I like green tea"
    assert result.sha == vault.head()
    assert "Likes green tea" in (vault.root / "memory/2026-11-20.md").read_text()
    roles = [m["role"] for m in sessions.Session(vault.root, "cli/default").lines()]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert result.usage["input_tokens"] == 20 and result.usage["output_tokens"] == 10


def test_turn_falls_back_and_keeps_the_model_for_the_rest_of_the_turn(vault):
    p = ScriptedProvider(failure(529, "overloaded_error"), reply(tool_call("list_dir", {})),
                         reply("done"))
    result = run_turn(vault, p, "cli/default", "look", NOW, model="claude-a")
    assert [r.model for r in p.requests][:2] == ["claude-a", vault_fallback(vault)]
    assert p.requests[2].model == vault_fallback(vault) and result.model == vault_fallback(vault)


def vault_fallback(vault) -> str:
    from agent.config import load_settings
    return load_settings(vault.root).fallback_models[0]


def test_turn_records_a_provider_error_with_the_message(vault):
    p = ScriptedProvider(failure(400, "invalid_request_error", "prompt is too long"))
    result = run_turn(vault, p, "cli/default", "hello", NOW)
    assert result.error == ("The Anthropic API failed (HTTP 400, invalid_request_error): "
                            "prompt is too long")
    (line,) = sessions.Session(vault.root, "cli/default").lines()
    assert line["content"] == "hello" and line["error"] == result.error


def test_compaction_summary_becomes_an_archive_entry(vault):
    p = ScriptedProvider(reply("Sure."), json_reply(
        {"topic": "Green tea", "summary": "The user likes green tea.", "importance": 0.7}))
    run_turn(vault, p, "cli/default", "I like green tea", NOW)
    entry = compact_session(vault, p, "cli/default", NOW, force=True)

    # The id is the entry's time and four random digits (unique across machines).
    assert str(entry).startswith(NOW.strftime("%Y%m%d%H%M%S")) and len(str(entry)) == 18
    assert subjects(vault)[0] == "archive(cli/default): Green tea"
    req = p.requests[-1]
    assert req.kind == "create" and req.request.schema["required"] == ["topic", "summary",
                                                                       "importance"]
    assert "I like green tea" in req.request.messages[0].content
    text = archive.entry_path(entry, NOW)
    assert "The user likes green tea." in (vault.root / text).read_text()


def test_compaction_failure_changes_nothing(vault):
    p = ScriptedProvider(reply("Sure."), json_reply({"summary": "no topic"}))
    run_turn(vault, p, "cli/default", "hi", NOW)
    head = vault.head()
    with pytest.raises(CompactError, match="lacks a topic"):
        compact_session(vault, p, "cli/default", NOW, force=True)
    assert vault.head() == head


def test_message_text_joins_text_blocks_only():
    m = Reply([Text("a"), ToolCall("1", "x", {}), Text("b")])
    assert m.text == "ab" and len(m.tool_calls) == 1


# ---- the dream, on the scripted provider ----------------------------------------------


def test_dream_batches_on_the_scripted_provider(vault):
    from agent.dream import run_dream
    from dreamkit import T0, finding, op, write_entries

    write_entries(vault, ["Booked flights to Kyoto for 2026-12-03", "b"])
    p = ScriptedProvider(json_reply({"findings": [finding("Flying to Kyoto on 2026-12-03")]}),
                         json_reply({"ops": [op("add", section="Facts",
                                                new="- Flying to Kyoto on 2026-12-03")]}))
    out = run_dream(vault, p, T0, poll_interval=0)

    assert out.kind == "committed", out.message
    assert [(r.kind, r.custom_id) for r in p.requests] == [("batch", "analyst-1-2"),
                                                           ("batch", "editor-1-2")]
    assert out.batches == list(p.batches) and len(out.batches) == 2
    assert "- Flying to Kyoto on 2026-12-03" in (vault.root / "MEMORY.md").read_text()
    assert subjects(vault)[0] == "dream: +1 fact, 0 updated, 0 removed (archive 1..2)"


def test_dream_sync_call_refused_keeps_nothing_sent(vault):
    from agent.dream import run_dream
    from dreamkit import T0, write_entries

    write_entries(vault, ["a", "b"])
    head = vault.head()
    p = ScriptedProvider(failure(400, "invalid_request_error", "prompt is too long"))
    out = run_dream(vault, p, T0, sync=True)
    assert out.kind == "failed" and "400 invalid_request_error: prompt is too long" in out.message
    assert vault.head() == head and p.requests[0].kind == "create"


def test_an_unreachable_base_url_names_anthropic_base_url(vault, run, monkeypatch):
    """A wrong ANTHROPIC_BASE_URL said only "Could not reach the Anthropic API"."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "notaurl")
    p = run("chat", "-m", "hi")
    assert p.exit_code != 0
    assert "'notaurl' (set by ANTHROPIC_BASE_URL" in p.stderr, p.stderr
