"""The agent against a model server nobody here wrote: llama.cpp's llama-server serving
SmolLM2-135M-Instruct (tests/realmodel.py; scripts/llama_server.py builds both). A model
this small answers badly, so these tests assert the wiring, not the wisdom: the reply
streamed in deltas and saved with the server's usage figures, a conversation archived
and dreamt over through `response_format` json_schema (which llama.cpp turns into a
grammar, held to the schemas' bounds), a fallback when the server dies mid-reply, and
doctor and `agent models` reading the server's own listing, and an ask to remember
kept in the vault by a forced `remember` call (llama-server's "required" alone lets the
model write prose first, so the call's arguments are asked for through the schema
grammar: agent/llm/openai.py forced_tool)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agent.chat.compact import SUMMARY_CHARS
from agent.config import load_settings
from agent.llm import make_provider
from agent.llm.records import END, MAX_TOKENS, Message, Request
from agent.stores import sessions
from agent.vault.change import read_tokens
from conftest import subjects
from fakeopenai import reply
from realmodel import ALIAS, KillMidReply, LlamaServer, paths, use_llama

pytestmark = pytest.mark.real_model


def trailers(vault, rev="HEAD") -> dict:
    out = vault.git("log", "-1", "--format=%(trailers:only,unfold)", rev)
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def lines_of(vault, key="cli/default") -> list[dict]:
    return sessions.Session(vault.root, key).lines()


def test_a_reply_streams_in_deltas_and_ends_with_the_servers_usage(llama, vault):
    use_llama(vault, llama)
    provider = make_provider(load_settings(vault.root))
    chunks: list[str] = []
    msg = provider.stream(f"local/{ALIAS}", Request(
        [Message("user", "Count from one to twenty.")], max_tokens=24), on_text=chunks.append)
    assert len(chunks) > 1 and "".join(chunks) == msg.text
    assert msg.model == f"local/{ALIAS}"
    assert msg.usage.input_tokens > 0 and 0 < msg.usage.output_tokens <= 24
    assert msg.stop_reason in (END, MAX_TOKENS)


def test_an_ask_to_remember_reaches_the_vault_as_a_commit(fixed_now, llama, vault, run):
    # Greedy sampling and a fixed clock, so the prompt and the model's few words are the
    # same on every run (the prompt names the minute: at some minutes this model loops in
    # the call's text to max_tokens, at others not); what it keeps is its own affair (a
    # 135M model may garble it), that it is kept is the agent's.
    use_llama(vault, llama, extra="max_tokens = 200\n", provider="temperature = 0.0\n")
    r = run("chat", "-m", "Remember that my boat is called Wren.")
    assert r.exit_code == 0, r.output
    assert subjects(vault)[0] == "chat(cli/default): Remember that my boat is called Wren."
    lines = lines_of(vault)
    calls = [b for x in lines if x["role"] == "assistant" and isinstance(x["content"], list)
             for b in x["content"] if b.get("type") == "tool_use"]
    assert calls and calls[0]["name"] == "remember", lines
    results = [b for x in lines if isinstance(x["content"], list) for b in x["content"]
               if b.get("type") == "tool_result"]
    assert results and not results[0].get("is_error"), (calls[0]["input"], results)
    kept = calls[0]["input"]["text"].strip()
    changed = vault.git("show", "--name-only", "--format=", "HEAD").split()
    memory_files = [f for f in changed if f in ("MEMORY.md", "USER.md")
                    or f.startswith("memory/")]
    assert memory_files, changed
    assert " ".join(kept.split())[:30] in (vault.root / memory_files[0]).read_text()


def test_a_chat_turn_is_saved_with_the_servers_token_counts(fixed_now, llama, vault, run):
    # Greedy and a fixed clock, so the prompt and the reply are the same few words on
    # every run, not by chance (at some minute) a tool call.
    use_llama(vault, llama, extra="max_tokens = 40\n", provider="temperature = 0.0\n")
    r = run("chat", "-m", "Say hello.")
    assert r.exit_code == 0, r.output
    answer = [x for x in lines_of(vault) if x["role"] == "assistant"][-1]
    assert isinstance(answer["content"], str) and answer["content"].strip()
    assert answer["content"].strip()[:20] in r.output
    t = trailers(vault)
    assert t["Model"] == f"local/{ALIAS}"
    used = read_tokens(t["Tokens"])[""]
    # The system prompt and the tools: llama-server keeps the prompt of the previous
    # request, and the part it reused is reported as read from its cache.
    assert used["input_tokens"] + used.get("cache_read_input_tokens", 0) > 300
    assert 0 < used["output_tokens"] <= 40


def test_a_conversation_is_archived_and_dreamt_over_through_the_schema_grammar(
        fixed_now, llama, vault, run, tmp_path):
    # The summary and the dream's replies come through response_format json_schema, which
    # llama-server makes a grammar of; the schemas' bounds (maxLength, maxItems) end a
    # 135M model's strings and lists there, where before its summary ran on to max_tokens
    # and was refused, again and again (issue 42). The penalty is the one docs/providers.md
    # gives a small local model; greedy sampling makes its few words the same each run.
    use_llama(vault, llama, extra="max_tokens = 40\n",
              provider="temperature = 0.0\nrepeat_penalty = 1.15\n")
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace("[dream]\n", "[dream]\nconcurrency = 1\n", 1))
    # The conversation comes as a transcript (a chat turn's long prompt of tools costs a
    # CPU-bound server minutes; the other tests here take turns).
    talk = tmp_path / "talk.jsonl"
    talk.write_text("".join(json.dumps({"session": "cli/default", "role": role, "content": said,
                                        "ts": f"2026-11-20T10:0{n}:00+00:00", "id": f"t{n}"}) + "\n"
                            for n, (role, said) in enumerate((
                                ("user", "My sister Ana lives in Porto."),
                                ("assistant", "Noted: Ana lives in Porto."),
                                ("user", "I am learning to sail."),
                                ("assistant", "Good luck with sailing.")))))
    assert run("import", "--no-embed", str(talk)).exit_code == 0
    r = run("archive")
    assert r.exit_code == 0, r.output
    entries = sorted((vault.root / "archive").rglob("*.md"))
    assert len(entries) == 1, r.output
    head = entries[0].read_text().split("---\n")[1]
    assert "topic:" in head and "importance:" in head
    summary = entries[0].read_text().split("---\n", 2)[2].strip()
    assert summary and len(summary) <= SUMMARY_CHARS
    assert subjects(vault)[0].startswith("archive(cli/default): "), r.output
    assert trailers(vault)["Model"] == f"local/{ALIAS}"
    marker = [x for x in lines_of(vault) if x.get("type") == "compact"]
    assert marker and str(marker[-1]["archive"]) == entries[0].stem, marker
    # The dream at its default output budget, as a person has it ([dream] max_tokens
    # 16,000: before the bounds, its replies ran on for many minutes and were refused).
    r = run("dream")
    assert r.exit_code == 0, r.output
    assert subjects(vault)[0].startswith("dream:"), r.output     # its edits, or "no changes"
    assert (vault.root / ".dream_cursor").read_text().split()[-1] == entries[0].stem
    used = read_tokens(trailers(vault)["Tokens"])
    assert used["analyst"]["output_tokens"] > 0


def test_a_server_killed_mid_reply_falls_back_to_the_next_model(own_llama, fake_openai, vault):
    relay = KillMidReply(own_llama)
    use_llama(vault, relay, fallbacks=("standin/qwen3:8b",),
              tables=(("standin", fake_openai.url),), extra="max_tokens = 2000\n")
    fake_openai.add(reply("The stand-in answers."))
    try:
        proc = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat",
                               "-m", "Write a very long story about a boat."],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=600)
    finally:
        relay.close()
    out, err = proc.stdout, proc.stderr
    assert relay.killed.is_set(), out + err
    assert own_llama.proc.poll() is not None
    assert proc.returncode == 0, out + err
    assert "The stand-in answers." in out
    assert f"local/{ALIAS} did not answer (agent doctor says why); standin/qwen3:8b" in err
    assert trailers(vault)["Model"] == "standin/qwen3:8b"
    answer = [x for x in lines_of(vault) if x["role"] == "assistant"][-1]
    assert answer["content"] == "The stand-in answers."


def test_doctor_and_models_read_the_servers_own_listing(llama, vault, run, tmp_path):
    use_llama(vault, llama)
    r = run("doctor")
    line = next(x for x in r.output.splitlines() if "provider local" in x)
    assert line.startswith("ok") and f"lists {ALIAS}" in line, r.output
    r = run("models", "--served")
    assert r.exit_code == 0 and f"local at {llama.url} lists: {ALIAS}" in r.output
    # Started without an alias, llama-server lists the file it loaded; and it answers a
    # request under any name.
    bare = LlamaServer.start(tmp_path / "bare", alias=None)
    try:
        fresh = vault.root / "agent.toml"
        model_file = paths()[1]
        fresh.write_text(fresh.read_text().replace(llama.url, bare.url).replace(
            f'name = "local/{ALIAS}"', f'name = "local/{model_file.stem}"\n'
                                       f'dream = "local/my-own-name"'))
        r = run("doctor")
        line = next(x for x in r.output.splitlines() if "provider local" in x)
        assert line.startswith("ok"), r.output
        assert f"serves {model_file.stem} as " in line and "answers for my-own-name" in line
    finally:
        bare.stop()


def test_a_runaway_reply_is_cut(fixed_now, endless_llama, vault, run):
    # A model that never ends a reply (the server ignores its end token, so every machine
    # sees it): the turn's time limit, the repeat detector or max_tokens, whichever comes
    # first, cuts the turn. Greedy at a fixed clock, this model begins a tool call, which
    # llama-server holds back, silent: the limit shuts the connection all the same
    # (agent/llm/deadline.py). That llama-server then stops is not asserted here: a
    # silent server learns the client is gone only when it writes again, and on CI's
    # machine it was still busy a minute after the cut (the stand-in's tests check that
    # the connection is closed).
    llama = endless_llama
    use_llama(vault, llama, extra="max_tokens = 200\n", provider="temperature = 0.0\n")
    assert run("config", "set", "chat.turn_timeout", "10").exit_code == 0
    r = run("chat", "-m", "Write the word boat one thousand times.")
    assert r.exit_code == 0, r.output
    # The reply as far as it went, or (cut before a word came) the person's line, is
    # marked cut and why.
    last = lines_of(vault)[-1]
    assert last.get("cut") in ("time", "repeating", "max_tokens"), last
    assert trailers(vault)["Cut"] == last["cut"] and "Cut: the " in r.output
