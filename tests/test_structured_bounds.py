"""Structured replies a small local model cannot run away with (issue 42): the schemas
carry maxLength and maxItems, which a local server's grammar keeps (llama.cpp, Ollama,
vLLM) and which OpenAI's and Anthropic's strict modes refuse, so they are sent without
them; a reply whose text repeats one phrase over and over is refused in one line, and
nothing is lost. The real server's side: tests/test_real_model.py."""

from __future__ import annotations

import json

from agent.chat.compact import SCHEMA
from agent.llm.openai import request_of
from agent.llm.records import Message, Request
from agent.llm.spec import ProviderSpec
from conftest import subjects
from fakeanthropic import json_reply as a_json, reply as a_reply
from fakeopenai import json_reply, reply
from helpers import use
from test_providers import dreaming_vault, findings_reply

RUNAWAY = "Ana lives in Porto. " + "1.0 lasting facts, " * 30


def bounds_in(schema) -> list[str]:
    text = json.dumps(schema)
    return [w for w in ("maxLength", "maxItems") if f'"{w}"' in text]


def summary_schema(call) -> dict:
    return call.body["response_format"]["json_schema"]["schema"]


def test_a_local_server_is_sent_the_summarys_bounds(fake_openai, vault, run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply("Noted."), json_reply({"topic": "Green tea", "summary":
                                                 "The user likes green tea.", "importance": 0.7}))
    assert run("chat", "-m", "I like green tea").exit_code == 0
    r = run("archive")
    assert r.exit_code == 0, r.output
    props = summary_schema(fake_openai.calls()[1])["properties"]
    # The grammar a local server makes of it ends the strings there.
    assert props["topic"]["maxLength"] <= 200 and props["summary"]["maxLength"] <= 4000
    assert subjects(vault)[0] == "archive(cli/default): Green tea"


def test_openais_own_api_and_anthropics_get_the_schema_without_bounds(fake_anthropic, vault,
                                                                      run):
    request = Request([Message("user", "hi")], 100, schema=SCHEMA)
    own = request_of("gpt-5", request, ProviderSpec("openai", "openai",
                                                    "https://api.openai.com/v1"), "json_schema")
    local = request_of("qwen3:8b", request, ProviderSpec("local", "openai",
                                                         "http://127.0.0.1:11434/v1"),
                       "json_schema")
    assert bounds_in(own["response_format"]) == []
    assert own["response_format"]["json_schema"]["schema"]["required"] == \
        ["topic", "summary", "importance"]
    assert bounds_in(local["response_format"]) == ["maxLength"]
    fake_anthropic.add(a_reply("Noted."), a_json({"topic": "Tea", "summary": "Likes tea.",
                                                  "importance": 0.5}))
    assert run("chat", "-m", "I like tea").exit_code == 0
    assert run("archive").exit_code == 0
    sent = fake_anthropic.calls()[-1].body["output_config"]["format"]["schema"]
    assert sent["required"] == ["topic", "summary", "importance"] and bounds_in(sent) == []


def test_a_server_that_refuses_the_bounds_is_asked_again_without_them(fake_openai, vault, run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.bounds = False
    fake_openai.add(reply("Noted."), json_reply({"topic": "Green tea", "summary":
                                                 "The user likes green tea.", "importance": 0.7}))
    assert run("chat", "-m", "I like green tea").exit_code == 0
    r = run("archive")
    assert r.exit_code == 0, r.output
    refused, taken = fake_openai.calls()[1:]
    # Still the schema (no step down to JSON mode), only without its bounds.
    assert bounds_in(summary_schema(refused)) == ["maxLength"]
    assert taken.body["response_format"]["type"] == "json_schema"
    assert bounds_in(summary_schema(taken)) == [] and summary_schema(taken)["required"] == \
        ["topic", "summary", "importance"]
    assert subjects(vault)[0] == "archive(cli/default): Green tea"


def test_a_summary_that_runs_away_is_one_line_and_the_conversation_is_kept(fake_openai, vault,
                                                                          run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    garbage = json_reply({"topic": "Family", "summary": RUNAWAY, "importance": 0.5})
    fake_openai.add(reply("Noted."), garbage, garbage)
    assert run("chat", "-m", "My sister Ana lives in Porto.").exit_code == 0
    head = vault.head()
    r = run("archive")
    assert r.exit_code != 0 and "Traceback" not in r.output
    line = next(x for x in r.output.splitlines() if "Could not summarise" in x)
    assert "kept repeating the same 19-character text" in line
    assert "repeat_penalty" in line and "[providers.local]" in line
    # Asked once more, told why; then nothing written: no entry, no marker, no commit.
    retry = fake_openai.calls()[-1].body["messages"][-1]["content"]
    assert "kept repeating the same 19-character text" in retry
    assert vault.head() == head and not list((vault.root / "archive").rglob("*.md"))
    assert '"compact"' not in "".join(p.read_text() for p in
                                      (vault.root / "sessions").rglob("*.jsonl"))


def test_a_dream_reply_that_runs_away_changes_nothing(fake_openai, vault, run):
    dreaming_vault(vault, fake_openai.url, concurrency=1)
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace("chunk_tokens = 400", "chunk_tokens = 60000"))
    garbage = json_reply(findings_reply((RUNAWAY, "MEMORY.md")))
    fake_openai.add(garbage, garbage)
    head = vault.head()
    memory = (vault.root / "MEMORY.md").read_text()
    r = run("dream")
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "ran away: $.findings[0].statement kept repeating the same 19-character text" \
        in r.output and "[providers.local]" in r.output
    # The analyst's request held its bounds: as many findings as its entries may hold.
    schema = fake_openai.calls()[0].body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["findings"]["maxItems"] == 4 * 3 + 3
    assert vault.head() == head and (vault.root / "MEMORY.md").read_text() == memory
    assert not (vault.root / ".dream_cursor").exists() or \
        not (vault.root / ".dream_cursor").read_text().strip()
