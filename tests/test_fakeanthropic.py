"""The fake Anthropic server, driven by the real SDK through make_client, behaves like
the API in every way the agent relies on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agent.llm.anthropic import NoApiKey, make_client, usage_dict
from fakeanthropic import error, json_reply, reply, text, tool_use

MODEL = "claude-test"
HI = [{"role": "user", "content": "hi"}]


def test_plain_message_and_recorded_request(fake_anthropic):
    fake_anthropic.add(reply(text("Hello!")))
    client = make_client()
    msg = client.messages.create(model=MODEL, max_tokens=100, messages=HI)
    assert msg.content[0].text == "Hello!"
    assert msg.stop_reason == "end_turn"
    assert msg.model == MODEL
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0
    (rec,) = fake_anthropic.calls()
    assert rec.method == "POST" and rec.path == "/v1/messages"
    assert rec.headers["authorization"] == "Bearer test-key"
    assert rec.body["messages"] == HI and rec.body["max_tokens"] == 100
    assert rec.wait().completed and rec.status == 200


def test_streaming_text_arrives_in_pieces(fake_anthropic):
    fake_anthropic.add(reply("The quick brown fox jumps"))
    client = make_client()
    with client.messages.stream(model=MODEL, max_tokens=100, messages=HI) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1
    assert "".join(pieces) == "The quick brown fox jumps"
    assert final.content[0].text == "The quick brown fox jumps"
    assert final.usage.output_tokens > 1
    assert fake_anthropic.last.body["stream"] is True


def test_streamed_tool_use_with_input_json_delta(fake_anthropic):
    args = {"text": "The user's cat is called Miso", "target": "memory"}
    fake_anthropic.add(reply(text("Noting that."), tool_use("remember", args, id="toolu_1")))
    client = make_client()
    with client.messages.stream(model=MODEL, max_tokens=100, messages=HI) as stream:
        kinds = [(e.type, getattr(getattr(e, "delta", None), "type", None)) for e in stream]
        final = stream.get_final_message()
    assert ("content_block_delta", "input_json_delta") in kinds
    assert final.stop_reason == "tool_use"
    block = final.content[1]
    assert (block.type, block.id, block.name, block.input) == ("tool_use", "toolu_1", "remember", args)


def test_two_tool_uses_in_one_reply_via_create_stream(fake_anthropic):
    fake_anthropic.add(reply(tool_use("memory_search", {"query": "cat"}),
                             tool_use("read_file", {"path": "MEMORY.md"})))
    client = make_client()
    events = list(client.messages.create(model=MODEL, max_tokens=100, messages=HI, stream=True))
    assert [e.type for e in events][0] == "message_start"
    assert [e.type for e in events][-2:] == ["message_delta", "message_stop"]
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [b.name for b in starts] == ["memory_search", "read_file"]
    assert starts[0].id != starts[1].id
    partial = {}
    for e in events:
        if e.type == "content_block_delta":
            partial[e.index] = partial.get(e.index, "") + e.delta.partial_json
    assert json.loads(partial[0]) == {"query": "cat"} and json.loads(partial[1]) == {"path": "MEMORY.md"}
    assert events[-2].delta.stop_reason == "tool_use"


def test_json_reply_with_output_config(fake_anthropic):
    schema = {"type": "object", "properties": {"findings": {"type": "array"}},
              "required": ["findings"], "additionalProperties": False}
    fake_anthropic.add(json_reply({"findings": []}))
    client = make_client()
    msg = client.messages.create(model=MODEL, max_tokens=100, messages=HI,
                                 output_config={"format": {"type": "json_schema", "schema": schema}})
    assert json.loads(msg.content[0].text) == {"findings": []}
    assert fake_anthropic.last.body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}


def test_callable_reply_sees_the_request(fake_anthropic):
    fake_anthropic.add(lambda req: reply(f"you said {req['messages'][-1]['content']}"))
    msg = make_client().messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert msg.content[0].text == "you said hi"


def test_count_tokens_consumes_no_reply(fake_anthropic):
    client = make_client()
    small = client.messages.count_tokens(model=MODEL, messages=HI)
    big = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "x" * 4000}])
    assert 0 < small.input_tokens < 50 < 1000 <= big.input_tokens
    assert fake_anthropic.calls("/v1/messages/count_tokens")[0].body["messages"] == HI
    assert fake_anthropic.pending == 0 and fake_anthropic.exhausted == 0


def _cached_request(question: str) -> dict:
    system = [{"type": "text", "text": "You are a helpful agent. " * 200,
               "cache_control": {"type": "ephemeral"}}]
    return dict(model=MODEL, max_tokens=100, system=system,
                messages=[{"role": "user", "content": question}])


def test_second_identical_prefix_is_read_from_cache(fake_anthropic):
    fake_anthropic.add(reply("one"), reply("two"), reply("three"))
    client = make_client()
    first = usage_dict(client.messages.create(**_cached_request("first question")).usage)
    second = usage_dict(client.messages.create(**_cached_request("another question")).usage)
    assert first["cache_creation_input_tokens"] > 1000 and first["cache_read_input_tokens"] == 0
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] == 0
    assert 0 < second["input_tokens"] < 50
    # A changed system prompt is a different prefix: written again, nothing read.
    changed = _cached_request("first question")
    changed["system"][0]["text"] += "Today is Monday."
    third = usage_dict(client.messages.create(**changed).usage)
    assert third["cache_read_input_tokens"] == 0 and third["cache_creation_input_tokens"] > 1000


def test_moving_breakpoint_reads_the_earlier_prefix(fake_anthropic):
    """A chat that marks its newest message each turn reads the previous turn's prefix."""
    fake_anthropic.add(reply("a"), reply("b"))
    client = make_client()
    turn1 = [{"role": "user", "content": [{"type": "text", "text": "long question " * 100,
                                           "cache_control": {"type": "ephemeral"}}]}]
    u1 = client.messages.create(model=MODEL, max_tokens=10, messages=turn1).usage
    turn2 = [{"role": "user", "content": [{"type": "text", "text": "long question " * 100}]},
             {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
             {"role": "user", "content": [{"type": "text", "text": "and then?",
                                           "cache_control": {"type": "ephemeral"}}]}]
    u2 = client.messages.create(model=MODEL, max_tokens=10, messages=turn2).usage
    assert u2.cache_read_input_tokens == u1.cache_creation_input_tokens > 300
    assert 0 < u2.cache_creation_input_tokens < 50


def test_overloaded_surfaces_without_retries(fake_anthropic):
    import anthropic
    fake_anthropic.add(error(529, "overloaded_error", "Overloaded"))
    with pytest.raises(anthropic.OverloadedError) as exc:
        make_client(max_retries=0).messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert isinstance(exc.value, anthropic.APIStatusError)
    assert exc.value.status_code == 529
    assert exc.value.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert len(fake_anthropic.calls()) == 1


def test_sdk_retries_through_scripted_errors(fake_anthropic):
    fake_anthropic.add(error(529, "overloaded_error"), error(500, "api_error"), reply("finally"))
    msg = make_client(max_retries=2).messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert msg.content[0].text == "finally"
    assert [r.headers["x-stainless-retry-count"] for r in fake_anthropic.calls()] == ["0", "1", "2"]


def test_bad_request_is_not_retried(fake_anthropic):
    import anthropic
    fake_anthropic.add(error(400, "invalid_request_error", "messages: too long"))
    with pytest.raises(anthropic.BadRequestError, match="too long"):
        make_client().messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert len(fake_anthropic.calls()) == 1


def test_exhausted_script_fails_loudly_at_once(fake_anthropic):
    import anthropic
    fake_anthropic.add(reply("only one"))
    client = make_client(max_retries=2)
    client.messages.create(model=MODEL, max_tokens=10, messages=HI)
    with pytest.raises(anthropic.InternalServerError, match="script ran out"):
        client.messages.create(model=MODEL, max_tokens=10, messages=HI)
    assert fake_anthropic.exhausted == 1
    assert len(fake_anthropic.calls()) == 2  # not retried


def _batch_request(custom_id: str, question: str) -> dict:
    return {"custom_id": custom_id,
            "params": {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": question}]}}


def test_batch_create_poll_and_results(fake_anthropic):
    fake_anthropic.add(json_reply({"findings": []}), lambda params: reply(params["messages"][0]["content"]))
    fake_anthropic.batch_result("analyst-3", error(500, "api_error", "boom"))
    fake_anthropic.batch_result("analyst-4", "expired")
    client = make_client()
    batch = client.messages.batches.create(requests=[
        _batch_request("analyst-1-2", "q1"), _batch_request("analyst-3-3", "q2"),
        _batch_request("analyst-4-9", "q3"), _batch_request("editor-1-9", "echo me")])
    assert batch.id.startswith("msgbatch_")
    assert batch.processing_status == "in_progress" and batch.results_url is None
    assert batch.request_counts.processing == 4 and batch.ended_at is None
    assert client.messages.batches.retrieve(batch.id).processing_status == "in_progress"
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended" and ended.ended_at is not None
    assert ended.results_url.startswith(fake_anthropic.url)
    counts = ended.request_counts
    assert (counts.processing, counts.succeeded, counts.errored, counts.expired) == (0, 2, 1, 1)
    results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert json.loads(results["analyst-1-2"].message.content[0].text) == {"findings": []}
    assert results["analyst-1-2"].message.usage.service_tier == "batch"
    assert results["analyst-3-3"].type == "errored"
    assert results["analyst-3-3"].error.error.type == "api_error"
    assert results["analyst-4-9"].type == "expired"
    assert results["editor-1-9"].message.content[0].text == "echo me"
    assert fake_anthropic.batch_creates == 1
    assert [r["custom_id"] for r in fake_anthropic.batches[batch.id].requests][0] == "analyst-1-2"
    assert fake_anthropic.pending == 0


def test_batch_polls_is_configurable(fake_anthropic):
    fake_anthropic.batch_polls = 3
    fake_anthropic.add(reply("x"))
    client = make_client()
    batch = client.messages.batches.create(requests=[_batch_request("a-1", "q")])
    statuses = [client.messages.batches.retrieve(batch.id).processing_status for _ in range(4)]
    assert statuses == ["in_progress"] * 3 + ["ended"]


def test_batch_cancel(fake_anthropic):
    client = make_client()
    batch = client.messages.batches.create(requests=[_batch_request("a-1", "q"), _batch_request("a-2", "q")])
    assert client.messages.batches.cancel(batch.id).processing_status == "canceling"
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended" and ended.cancel_initiated_at is not None
    assert ended.request_counts.canceled == 2
    assert {r.result.type for r in client.messages.batches.results(batch.id)} == {"canceled"}
    assert fake_anthropic.exhausted == 0  # canceled requests take no reply


def test_batches_unsupported_answer_404(fake_anthropic):
    import anthropic
    fake_anthropic.batches_supported = False
    with pytest.raises(anthropic.NotFoundError):
        make_client().messages.batches.create(requests=[_batch_request("a-1", "q")])
    assert fake_anthropic.batch_creates == 0


def test_make_client_without_key(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(NoApiKey) as exc:
        make_client()
    assert str(exc.value) == "No API key: set ANTHROPIC_API_KEY"
    assert exc.value.exit_code == 2


def test_make_client_honours_base_url(fake_anthropic):
    assert str(make_client().base_url).rstrip("/") == fake_anthropic.url


def test_usage_dict_fills_missing_with_zero():
    assert usage_dict(None) == {"input_tokens": 0, "output_tokens": 0,
                                "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    assert usage_dict({"input_tokens": 5, "cache_read_input_tokens": None})["input_tokens"] == 5


def test_importing_the_module_does_not_import_the_sdk():
    code = "import sys, agent.llm.anthropic; print('anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_slow_stream_can_be_abandoned_mid_reply(fake_anthropic):
    words = " ".join(f"word{i}" for i in range(40))
    fake_anthropic.add(reply(words, chunk_delay=0.05))
    client = make_client()
    with client.messages.stream(model=MODEL, max_tokens=100, messages=HI) as stream:
        first = next(iter(stream.text_stream))
    assert first == "word0 "
    rec = fake_anthropic.last.wait(timeout=10)
    assert rec.completed is False  # the server saw the hang-up


def test_delay_before_answering_trips_the_client_timeout(fake_anthropic):
    import anthropic
    fake_anthropic.add(reply("late", delay=0.6))
    with pytest.raises(anthropic.APITimeoutError):
        make_client(max_retries=0, timeout=0.2).messages.create(model=MODEL, max_tokens=10, messages=HI)


def test_error_event_mid_stream(fake_anthropic):
    import anthropic
    fake_anthropic.add(reply("partial answer", then_error=error(529, "overloaded_error", "Overloaded")))
    got = []
    with pytest.raises(anthropic.APIStatusError, match="overloaded_error"):
        with make_client().messages.stream(model=MODEL, max_tokens=100, messages=HI) as stream:
            for piece in stream.text_stream:
                got.append(piece)
    assert "".join(got) == "partial answer"


def test_default_reply_and_waiting_for_requests(fake_anthropic):
    fake_anthropic.default_reply = "always this"
    client = make_client()
    for _ in range(3):
        assert client.messages.create(model=MODEL, max_tokens=10, messages=HI).content[0].text == "always this"
    assert len(fake_anthropic.wait_for_requests(3, path="/v1/messages", timeout=1)) == 3
    with pytest.raises(TimeoutError):
        fake_anthropic.wait_for_requests(4, timeout=0.1)


@pytest.mark.slow
def test_usable_from_a_script_without_pytest_fixtures(tmp_path):
    from pathlib import Path
    tests_dir = Path(__file__).resolve().parent
    script = tmp_path / "bench.py"
    script.write_text(
        "import sys, anthropic\n"
        f"sys.path.insert(0, {str(tests_dir)!r})\n"
        "from fakeanthropic import FakeAnthropic, reply\n"
        "with FakeAnthropic() as s:\n"
        "    s.add(reply('from a script'))\n"
        "    c = anthropic.Anthropic(api_key='k', base_url=s.url)\n"
        "    print(c.messages.create(model='m', max_tokens=5, messages=[{'role': 'user', 'content': 'x'}]).content[0].text)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "from a script"
