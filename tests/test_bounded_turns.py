"""A turn is bounded: a streamed reply that keeps repeating the same text is cut, a turn
past `[chat] turn_timeout` is cut, and a reply stopped at `[model] max_tokens` says so;
each is saved with what was written, marked `cut` in the session and the commit, and the
person is told in one line. Sampling options a local server takes (a repeat or frequency
penalty) are set per provider. Against the stand-in server (tests/fakeopenai.py); the
real server's own case is in test_real_model.py."""

from __future__ import annotations

from agent.stores import sessions
from conftest import wait_for
from fakeopenai import reply
from helpers import use

DATE = "On 2023-05-01"


def trailers(vault, rev="HEAD") -> dict:
    out = vault.git("log", "-1", "--format=%(trailers:only,unfold)", rev)
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def answer(vault) -> dict:
    return [x for x in sessions.Session(vault.root, "cli/default").lines()
            if x["role"] == "assistant"][-1]


def test_a_reply_that_keeps_repeating_is_cut_and_saved_marked(fake_openai, vault, run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply(DATE, endless=True))          # a model that never stops
    r = run("chat", "-m", "When did I buy the boat?")
    assert r.exit_code == 0, r.output
    assert "Cut: the reply kept repeating the same 14-character text" in r.output
    said = answer(vault)
    assert said["cut"] == "repeating"
    assert said["content"].startswith(DATE) and len(said["content"]) < 3000
    assert trailers(vault)["Cut"] == "repeating"
    # The stream was closed, so a local server stops writing.
    wait_for(lambda: fake_openai.abandoned == 1, "the stream to be closed")


def test_a_turn_past_its_time_limit_is_cut(fake_openai, vault, run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    assert run("config", "set", "chat.turn_timeout", "2").exit_code == 0
    # Slow and never done, and never the same text twice in a row: only the clock stops it.
    words = " ".join(f"word{n}" for n in range(400))
    fake_openai.add(reply(words, chunk_delay=0.02, endless=True))
    r = run("chat", "-m", "Tell me a long story.")
    assert r.exit_code == 0, r.output
    assert "Cut: the turn ran past its time limit of 2 seconds" in r.output
    assert "[chat] turn_timeout" in r.output
    assert answer(vault)["cut"] == "time" and trailers(vault)["Cut"] == "time"
    if fake_openai.calls():
        wait_for(lambda: fake_openai.abandoned == 1, "the stream to be closed")


def test_a_turn_is_cut_at_its_time_limit_while_the_server_sends_nothing(fake_openai, vault,
                                                                        run):
    # llama-server holds a tool call back until it has parsed it; a small model that
    # never closes the call keeps the stream silent to max_tokens. The time limit was
    # looked at only when text arrived, so the turn waited on the silence (minutes on a
    # CPU; CI saw it). The connection is now shut at the limit, silent or not.
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    assert run("config", "set", "chat.turn_timeout", "2").exit_code == 0
    fake_openai.add(reply("Let me look that up.", silent=True))
    r = run("chat", "-m", "What is my boat called?")
    assert r.exit_code == 0, r.output
    assert "Cut: the turn ran past its time limit of 2 seconds" in r.output
    # The words that came before the silence are kept (on a machine slow enough that
    # they came after the limit, the person's line carries the mark).
    last = sessions.Session(vault.root, "cli/default").lines()[-1]
    assert last["cut"] == "time" and trailers(vault)["Cut"] == "time"
    assert last["content"] == ("Let me look that up." if last["role"] == "assistant"
                               else "What is my boat called?"), last
    # The server saw the client go (it would stop writing), well before its own 30 s.
    wait_for(lambda: fake_openai.abandoned == 1, "the server to see the client go")


def test_an_anthropic_stream_that_stalls_is_cut_at_the_time_limit(fake_anthropic, vault, run):
    # The same bound through the Anthropic SDK: its events stall for a minute each, and
    # the turn ends at its 2 seconds, before the first word (which came only after a
    # minute, when the limit was looked at on each word alone).
    from fakeanthropic import reply as anthropic_reply

    assert run("config", "set", "chat.turn_timeout", "2").exit_code == 0
    fake_anthropic.add(anthropic_reply("The boat is called Wren.", chunk_delay=60))
    r = run("chat", "-m", "What is my boat called?")
    assert r.exit_code == 0, r.output
    assert "Cut: the turn ran past its time limit of 2 seconds" in r.output
    lines = sessions.Session(vault.root, "cli/default").lines()
    assert lines[-1]["role"] == "user" and lines[-1]["cut"] == "time", lines
    assert "Wren" not in r.output and trailers(vault)["Cut"] == "time"


def test_a_reply_stopped_at_max_tokens_says_so(fake_openai, vault, run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply("The boat is called", finish_reason="length"))
    r = run("chat", "-m", "What is my boat called?")
    assert r.exit_code == 0, r.output
    assert "Cut: the reply reached its limit of 4,096 tokens ([model] max_tokens" in r.output
    assert answer(vault)["cut"] == "max_tokens" and trailers(vault)["Cut"] == "max_tokens"
    # A reply that ended by itself carries no mark.
    fake_openai.add(reply("Wren."))
    r = run("chat", "-m", "And again?")
    assert "Cut:" not in r.output and "cut" not in answer(vault)
    assert "Cut" not in trailers(vault)


def test_a_providers_sampling_options_go_with_every_request(fake_openai, vault, run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    for key, value in (("repeat_penalty", "1.15"), ("frequency_penalty", "0.3"),
                       ("top_k", "40")):
        r = run("config", "set", f"providers.local.{key}", value)
        assert r.exit_code == 0, r.output
    fake_openai.add(reply("Fine."))
    assert run("chat", "-m", "hello").exit_code == 0
    (body,) = [c.body for c in fake_openai.calls()]
    assert body["frequency_penalty"] == 0.3
    assert body["repeat_penalty"] == 1.15 and body["top_k"] == 40   # llama.cpp's own, in the body
    r = run("config", "set", "providers.local.frequency_penalty", "9")
    assert r.exit_code == 1 and "must be a number from -2 to 2" in r.output
    # Anthropic's API has no repeat penalty: said before anything is sent.
    path = vault.root / "agent.toml"
    path.write_text(path.read_text() + '\n[providers.claude]\napi = "anthropic"\n'
                    'repeat_penalty = 1.1\n')
    r = run("config", "check")
    assert r.exit_code == 1
    assert "providers.claude.repeat_penalty: Anthropic's API takes only temperature" in r.output
