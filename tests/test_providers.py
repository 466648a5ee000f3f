"""OpenAI-compatible providers through the one seam: the real `openai` SDK against a
stand-in server (tests/fakeopenai.py), with the real CLI on a real vault."""

from __future__ import annotations

import json

from agent.stores import sessions
from conftest import agent_proc, subjects
from fakeanthropic import reply as a_reply, tool_use
from fakeopenai import FakeOpenAI, call, error, reply
from helpers import use


def session_lines(vault, key="cli/default") -> list[dict]:
    return sessions.Session(vault.root, key).lines()


def trailers(vault, rev="HEAD") -> dict:
    out = vault.git("log", "-1", "--format=%(trailers:only,unfold)", rev)
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def model_table(vault) -> str:
    text = (vault.root / "agent.toml").read_text()
    return text[text.index("[model]"):].split("\n\n")[0]


# ---- chat -----------------------------------------------------------------------------


def test_chat_with_a_tool_call_through_a_local_server_needs_no_key(fake_openai, vault, run,
                                                                   monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-openai-key")     # never sent to a local server
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply("Noting it.", call("remember", {"text": "The ryokan is booked"},
                                             id="call_1")),
                    reply("Kept: the ryokan is booked."))
    r = run("chat", "-m", "I booked the ryokan.")
    assert r.exit_code == 0, r.output
    assert "Kept: the ryokan is booked." in r.output
    first, second = fake_openai.calls()
    assert first.body["model"] == "qwen3:8b" and first.body["stream"] is True
    assert first.headers["authorization"] == "Bearer none"
    assert any(t["function"]["name"] == "remember" for t in first.body["tools"])
    # The tool's result went back as a "tool" message answering the call.
    tool_msgs = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_1"]
    assert second.body["messages"][-2]["tool_calls"][0]["function"]["name"] == "remember"
    # The session file keeps today's format: content blocks, tool_use and tool_result.
    lines = session_lines(vault)
    assert [m["role"] for m in lines] == ["user", "assistant", "user", "assistant"]
    assert lines[1]["content"][1] == {"type": "tool_use", "id": "call_1", "name": "remember",
                                      "input": {"text": "The ryokan is booked"}}
    assert lines[2]["content"][0]["type"] == "tool_result"
    assert "The ryokan is booked" in next((vault.root / "memory").glob("*.md")).read_text()
    assert trailers(vault)["Model"] == "local/qwen3:8b"


def test_parallel_tool_calls_stream_back_as_blocks_in_order(fake_openai, vault, run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply(call("remember", {"text": "Tea at five"}, id="call_a"),
                          call("remember", {"text": "Likes green tea", "target": "user"},
                               id="call_b")),
                    reply("Both kept."))
    r = run("chat", "-m", "Tea at five; I like green tea.")
    assert r.exit_code == 0, r.output
    second = fake_openai.calls()[1].body["messages"]
    assert [m["tool_call_id"] for m in second if m["role"] == "tool"] == ["call_a", "call_b"]
    assert [b["id"] for b in session_lines(vault)[1]["content"]] == ["call_a", "call_b"]
    assert "Likes green tea" in (vault.root / "USER.md").read_text()


def test_a_streamed_reply_is_shown_as_it_comes_and_tokens_come_from_usage(fake_openai, vault, run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply("Kyoto in April is lovely.", usage={
        "prompt_tokens": 1200, "completion_tokens": 9, "total_tokens": 1209,
        "prompt_tokens_details": {"cached_tokens": 1000}}))
    p = run("chat", "--local", "-m", "Kyoto?")
    assert p.exit_code == 0, p.output
    assert "Kyoto in April is lovely." in p.stdout
    body = fake_openai.calls()[0].body
    assert body["stream_options"] == {"include_usage": True}
    # Prompt 1200 of which 1000 cached: 200 in, 1000 read from the cache, 9 out.
    tokens = trailers(vault)["Tokens"]
    assert "200 in" in tokens and "9 out" in tokens and "1000" in tokens.replace(",", "")


def test_a_session_started_on_anthropic_continues_on_a_local_model(fake_anthropic, fake_openai,
                                                                    vault, run):
    fake_anthropic.add(a_reply(tool_use("remember", {"text": "Flight on 3 May"}, id="toolu_1")),
                       a_reply("Noted the flight."))
    assert run("chat", "-m", "My flight is on 3 May.").exit_code == 0
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply("Your flight is on 3 May."))
    r = run("chat", "-m", "When is my flight?")
    assert r.exit_code == 0, r.output
    msgs = fake_openai.calls()[0].body["messages"]
    roles = [m["role"] for m in msgs]
    assert roles[0] == "system" and roles[1:] == ["user", "assistant", "tool", "assistant", "user"]
    assert msgs[2]["tool_calls"][0]["id"] == "toolu_1" and msgs[3]["tool_call_id"] == "toolu_1"
    # And back: the turn the local model answered replays on Anthropic as blocks.
    use(vault, "claude-sonnet-5-5")
    fake_anthropic.add(a_reply("Still 3 May."))
    assert run("chat", "-m", "Sure?").exit_code == 0
    sent = fake_anthropic.last.body["messages"]
    assert sent[-2]["role"] == "assistant"
    assert [(b["type"], b["text"]) for b in sent[-2]["content"]] == \
        [("text", "Your flight is on 3 May.")]


# ---- fallbacks ------------------------------------------------------------------------


def test_a_refused_connection_falls_back_to_the_next_provider(fake_openai, vault, run):
    with FakeOpenAI() as gone:
        dead = gone.url                 # a port nothing listens on once it stops
    use(vault, "down/qwen3:8b", ("down", dead), ("local", fake_openai.url),
        extra='fallbacks = ["local/llama3.2"]\n')
    fake_openai.add(reply("Answered by the second."))
    r = run("chat", "-m", "hello")
    assert r.exit_code == 0, r.output
    assert "Answered by the second." in r.output
    assert fake_openai.calls()[0].body["model"] == "llama3.2"
    assert trailers(vault)["Model"] == "local/llama3.2"
    assert "down/qwen3:8b did not answer (agent doctor says why); local/llama3.2, its " \
        "fallback, did." in r.output


def test_an_unknown_model_falls_back_and_a_plain_failure_does_not(fake_openai, vault, run):
    use(vault, "local/nosuch", ("local", fake_openai.url),
        extra='fallbacks = ["local/qwen3:8b"]\n')
    fake_openai.add(reply("From qwen."))
    assert run("chat", "-m", "hi").exit_code == 0
    assert [c.body["model"] for c in fake_openai.calls()] == ["nosuch", "qwen3:8b"]
    fake_openai.add(error(400, "bad request: messages too odd"))
    r = run("chat", "-m", "again")
    assert r.exit_code == 1 and "bad request: messages too odd" in r.output
    assert [c.body["model"] for c in fake_openai.calls()][2:] == ["nosuch", "qwen3:8b"]


# ---- keys -----------------------------------------------------------------------------


def test_a_key_is_read_from_the_named_variable_and_never_from_agent_toml(fake_openai, vault,
                                                                        run, monkeypatch):
    fake_openai.api_key = "sk-local-123"
    use(vault, "remote/qwen3:8b", ("remote", fake_openai.url))
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace('key_env = ""', 'key_env = "REMOTE_API_KEY"'))
    r = run("chat", "-m", "hi")
    assert r.exit_code == 2 and "$REMOTE_API_KEY" in r.output and not fake_openai.calls()
    monkeypatch.setenv("REMOTE_API_KEY", "sk-local-123")
    # The key goes to that server only once this machine says it may (agent keys).
    r = run("chat", "-m", "hi")
    assert r.exit_code == 2 and "agent keys approve REMOTE_API_KEY" in r.output
    assert not fake_openai.calls()
    url = fake_openai.url.rsplit("/v1", 1)[0]
    assert run("keys", "approve", "--yes", "REMOTE_API_KEY", url).exit_code == 0
    fake_openai.add(reply("Authorised."))
    assert run("chat", "-m", "hi").exit_code == 0
    assert fake_openai.calls()[0].headers["authorization"] == "Bearer sk-local-123"
    assert "sk-local-123" not in vault.git("log", "-p", "--all")
    # A key written into agent.toml is refused, and not repeated.
    path.write_text(path.read_text() + 'api_key = "sk-stolen-999"\n')
    r = run("config", "check")
    assert r.exit_code == 1 and "providers.remote.api_key: a key is a secret" in r.output
    assert "sk-stolen-999" not in r.output
    r = run("config", "set", "providers.remote.api_key", "sk-x")
    assert r.exit_code == 1 and "secret" in r.output


def test_a_synced_agent_toml_cannot_send_a_vendor_key_to_another_host(vault, run):
    path = vault.root / "agent.toml"
    path.write_text(path.read_text() + '\n[providers.openai]\nbase_url = "https://evil.example/v1"\n')
    r = run("config", "check")
    assert r.exit_code == 1
    assert "$OPENAI_API_KEY is OpenAI's key and is sent only to https://api.openai.com" \
        in r.output and "not to https://evil.example" in r.output
    path.write_text(path.read_text() + 'key_env = "HOME"\n')
    assert "must end in KEY or TOKEN" in run("config", "check").output


# ---- configuration --------------------------------------------------------------------


def test_config_set_takes_a_provider_model_and_check_names_an_unknown_provider(vault, run):
    r = run("config", "set", "model.name", "openai/gpt-5-mini")
    assert r.exit_code == 0, r.output
    assert 'name = "openai/gpt-5-mini"' in model_table(vault)
    r = run("config", "set", "model.name", "locl/qwen3:8b")
    assert r.exit_code == 1 and "names the provider 'locl'" in r.output
    assert run("config", "set", "providers.local.base_url", "http://127.0.0.1:11434/v1").exit_code == 0
    assert run("config", "set", "providers.local.key_env", "").exit_code == 0
    assert run("config", "set", "model.name", "local/qwen3:8b").exit_code == 0
    assert '[providers.local]\nbase_url = "http://127.0.0.1:11434/v1"\nkey_env = ""' in \
        (vault.root / "agent.toml").read_text()
    r = run("config", "set", "providers.local.base_url", "ftp://x")
    assert r.exit_code == 1 and "http(s) address" in r.output
    assert run("config", "check").exit_code == 0
    assert subjects(vault)[0] == 'config: set model.name = "local/qwen3:8b"'


def test_an_unknown_setting_is_a_warning_and_the_rest_still_applies(fake_anthropic, vault, run):
    path = vault.root / "agent.toml"
    path.write_text(path.read_text() + "\n[chat]\nfancy_new_thing = 3\n"
                    if "[chat]" not in path.read_text() else
                    path.read_text().replace("[chat]\n", "[chat]\nfancy_new_thing = 3\n"))
    r = run("config", "check")
    assert r.exit_code == 0
    assert "warning: unknown setting chat.fancy_new_thing" in r.output
    p = agent_proc("note", "still works", vault=vault.root)
    assert p.returncode == 0 and "unknown setting chat.fancy_new_thing" in p.stderr


def test_a_provider_table_with_a_wrong_value_is_named(vault, run):
    path = vault.root / "agent.toml"
    path.write_text(path.read_text() + '\n[providers.local]\napi = "ollama"\ncontext_window = 12\n'
                    'colour = "red"\n')
    r = run("config", "check")
    assert r.exit_code == 1
    assert 'providers.local.api must be "openai" or "anthropic", not \'ollama\'' in r.output
    assert "providers.local.context_window must be at least 1000 tokens" in r.output
    assert "providers.local.colour is not a setting of a provider" in r.output
    assert "Traceback" not in r.output and "pydantic" not in r.output


def test_commands_that_call_no_model_load_neither_sdk(fake_openai, vault):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    code = ("import sys; from agent.cli import main; sys.argv = ['agent', *sys.argv[1:]]\n"
            "try: main()\nexcept SystemExit: pass\n"
            "print(sorted(m for m in ('anthropic', 'openai') if m in sys.modules))")
    import os
    import subprocess
    import sys
    for args in (["note", "x"], ["status"], ["config", "check"], ["log"], ["models"]):
        p = subprocess.run([sys.executable, "-c", code, *args], cwd=vault.root,
                           capture_output=True, text=True,
                           env={**os.environ, "AGENT_VAULT": str(vault.root)})
        assert p.stdout.strip().splitlines()[-1] == "[]", (args, p.stdout, p.stderr)
        assert "Error" not in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
    # The seam's modules themselves load their SDK only at the first call.
    code = ("import sys, agent.llm.openai, agent.llm.router, agent.llm.anthropic\n"
            "from agent.llm import make_provider\n"
            "make_provider(None, lazy=True)\n"
            "print(sorted(m for m in ('anthropic', 'openai') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.stdout.strip() == "[]", p.stderr


# ---- the dream --------------------------------------------------------------------------

MEMORY = "# Memory\n\n## Facts\n\n- The team uses Postgres 16\n"
USER = "# User\n\n## About\n\n- Lives in Berlin\n"


def dreaming_vault(vault, url: str, *, concurrency: int = 4, json_schema: bool = True):
    """Memory written by hand, three archive entries, the dream on a local model."""
    from dreamkit import write_entries

    (vault.root / "MEMORY.md").write_text(MEMORY)
    (vault.root / "USER.md").write_text(USER)
    use(vault, "local/qwen3:8b", ("local", url))
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace('[dream]\n', f'[dream]\nconcurrency = {concurrency}\n'
                                             f'chunk_tokens = 400\n', 1)
                    + ("" if json_schema else "json_schema = false\n"))
    vault.git("add", "-A")
    vault.git("commit", "-q", "-m", "edit: facts by hand")
    write_entries(vault, ["Planned the Kyoto trip; flights booked for 3 December.",
                          "The user moved from Berlin to Lisbon last week.",
                          "Talked about the weather."])
    return vault


def findings_reply(*statements_and_files):
    from dreamkit import finding
    return {"findings": [finding(s, file=f, kind="update" if f == "USER.md" else "new",
                                 date="2026-12-03") for s, f in statements_and_files]}


def editor_reply():
    from dreamkit import op
    return {"ops": [op("add", section="Travel", new="- Flying to Kyoto on 2026-12-03",
                       reason="archive:1"),
                    op("update", "USER.md", old="- Lives in Berlin", new="- Lives in Lisbon",
                       reason="archive:2")]}


def test_a_dream_on_a_local_model_ends_in_review(fake_openai, vault, run):
    from fakeopenai import json_reply
    dreaming_vault(vault, fake_openai.url, concurrency=1)
    fake_openai.add(json_reply(findings_reply(("Flying to Kyoto on 2026-12-03", "MEMORY.md"),
                                              ("The user lives in Lisbon", "USER.md"))),
                    json_reply({"findings": []}), json_reply(editor_reply()))
    r = run("dream")
    assert r.exit_code == 0, r.output
    assert "has no Batches API" in r.output
    assert "Cost: none (local/qwen3:8b answers on this machine)" in r.output
    calls = fake_openai.calls()
    analyst = [c for c in calls
               if c.body["response_format"]["json_schema"]["schema"]["required"] == ["findings"]]
    editor = [c for c in calls if c.body["response_format"]["json_schema"]["schema"]
              ["required"] == ["ops"]]
    assert len(analyst) >= 2 and len(editor) == 1        # several chunks, one editor
    assert all(c.body["response_format"]["json_schema"]["strict"] for c in calls)
    # The new fact lands; the change of a line a person wrote waits for review.
    assert "- Flying to Kyoto on 2026-12-03" in (vault.root / "MEMORY.md").read_text()
    assert (vault.root / "USER.md").read_text() == USER
    log = vault.git("log", "-1", "--format=%B")
    assert "Model: local/qwen3:8b" in log and "Batch: none" in log
    assert "1 proposed" in log.splitlines()[0]
    review = run("review")
    assert "Lives in Lisbon" in review.output
    assert not (vault.state / "dream.json").exists()


def test_a_reply_that_is_not_json_is_asked_for_once_more(fake_openai, vault, run):
    from fakeopenai import json_reply
    dreaming_vault(vault, fake_openai.url, json_schema=False)
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace("chunk_tokens = 400", "chunk_tokens = 60000"))
    fake_openai.add(reply("Sure! Here are the findings: Kyoto."),
                    json_reply({"findings": []}))
    r = run("dream")
    assert r.exit_code == 0, r.output
    first, second = fake_openai.calls()
    # JSON mode with the schema in the prompt, where the server has no json_schema.
    assert first.body["response_format"] == {"type": "json_object"}
    assert '"findings"' in first.body["messages"][0]["content"]
    assert "does not fit the JSON schema" in second.body["messages"][-1]["content"]
    assert vault.git("log", "-1", "--format=%s").startswith("dream: no changes")
    # Twice wrong: the dream fails with one line and changes nothing.
    from dreamkit import write_entries
    write_entries(vault, ["Another talk."])
    head = vault.head()
    fake_openai.add(reply("no."), reply("still no."))
    r = run("dream")
    assert r.exit_code == 1 and "the reply is not JSON" in r.output
    assert "Traceback" not in r.output and vault.head() == head


def test_a_server_without_json_schema_is_asked_again_in_json_mode(fake_openai, vault, run):
    from fakeopenai import json_reply
    dreaming_vault(vault, fake_openai.url)
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace("chunk_tokens = 400", "chunk_tokens = 60000"))
    fake_openai.json_schema = False
    fake_openai.add(json_reply({"findings": []}))
    r = run("dream")
    assert r.exit_code == 0, r.output
    kinds = [c.body["response_format"]["type"] for c in fake_openai.calls()]
    assert kinds == ["json_schema", "json_object"]


def test_a_killed_dream_resumes_with_the_requests_left(fake_openai, vault):
    import signal
    import subprocess
    import sys
    import threading

    from conftest import wait_for
    from fakeopenai import json_reply
    dreaming_vault(vault, fake_openai.url, concurrency=1)
    hold = threading.Event()
    fake_openai.add(json_reply(findings_reply(("Flying to Kyoto on 2026-12-03", "MEMORY.md"))),
                    json_reply({"findings": []}, hold=hold))
    proc = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "dream"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(fake_openai.calls()) == 2, "the second request")
        state = json.loads((vault.state / "dream.json").read_text())
        assert list(state["analyst"]["done"]) == [state["analyst"]["requests"][0]]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        hold.set()
        if proc.poll() is None:
            proc.kill()
    # The kill left memory, cursor and ledger as they were.
    assert subjects(vault)[0] == "compact: 3 archive entries"
    assert not (vault.root / ".dream_cursor").exists()
    assert (vault.root / "MEMORY.md").read_text() == MEMORY
    sent = [c.body["messages"][-1]["content"] for c in fake_openai.calls()]
    fake_openai.add(json_reply({"findings": []}), json_reply(editor_reply()))
    p = agent_proc("dream", vault=vault.root)
    assert p.returncode == 0, p.stderr + p.stdout
    later = [c.body["messages"][-1]["content"] for c in fake_openai.calls()[2:]]
    # The first request is not sent again; the one the kill cut off is, then the editor.
    assert len(later) == 2 and later[0] == sent[1] and sent[0] not in later
    assert "- Flying to Kyoto on 2026-12-03" in (vault.root / "MEMORY.md").read_text()
    assert (vault.root / ".dream_cursor").exists()


# ---- doctor and models ------------------------------------------------------------------


def test_doctor_checks_each_provider_with_the_fix_in_one_line(fake_openai, vault, run):
    with FakeOpenAI() as gone:
        dead = gone.url
    use(vault, "local/qwen3:8b", ("local", fake_openai.url), ("down", dead),
        extra='fallbacks = ["local/mistral", "down/llama3.2"]\n')
    r = run("doctor")
    assert r.exit_code == 1
    out = r.output
    assert "API key" not in out                         # no model of agent.toml is Anthropic's
    assert "FAIL  provider local" in out and "does not list mistral" in out
    assert "-> ollama pull mistral" in out
    assert "FAIL  provider down" in out and "cannot reach" in out
    assert "ollama serve" in out
    fake_openai.models.append("mistral")
    r = run("doctor")
    assert "ok    provider local" in r.output and "no key needed" in r.output
    # The listing, and one token asked for the model it did not list (refused: 404).
    assert [c.path for c in fake_openai.requests] == ["/v1/models", "/v1/chat/completions",
                                                      "/v1/models"]


def test_doctor_names_a_missing_key_of_a_remote_provider(vault, run):
    use(vault, "openai/gpt-5-mini")
    r = run("doctor")
    assert "FAIL  provider openai" in r.output and "$OPENAI_API_KEY is not set" in r.output
    assert "-> export OPENAI_API_KEY=" in r.output


def test_models_lists_what_answers_chat_and_dream(vault, run):
    use(vault, "local/qwen3:8b", ("local", "http://127.0.0.1:11434/v1"),
        extra='fallbacks = ["anthropic/claude-haiku-4-5"]\ndream = "openai/gpt-5-mini"\n')
    r = run("models")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["local/qwen3:8b", "chat"]
    assert "local (openai API at this machine), key: none needed, context 32,768 tokens" in lines[1]
    assert lines[2].split() == ["anthropic/claude-haiku-4-5", "fallback", "1"]
    assert lines[4].split() == ["openai/gpt-5-mini", "dream"]
    assert "$OPENAI_API_KEY (not set)" in lines[5] and "128,000" in lines[5]


def test_a_model_of_no_known_provider_is_one_line(vault, run):
    r = run("chat", "--model", "nowhere/qwen3:8b", "-m", "hi")
    assert r.exit_code == 1 and "No provider 'nowhere'" in r.output and "[providers.nowhere]" in r.output
    assert "Traceback" not in r.output


def test_a_setting_broken_after_a_sound_check_is_still_refused(vault):
    assert agent_proc("note", "first", vault=vault.root).returncode == 0
    assert (vault.state / "settings.checked").exists()      # sound: not checked again...
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace("window_tokens = 24000", "window_tokens = -5"))
    p = agent_proc("note", "second", vault=vault.root)       # ...until its text changes
    assert p.returncode == 1 and "chat.window_tokens must be at least 1, not -5" in p.stderr


def test_the_request_guard_knows_the_providers_context_window(fake_openai, vault, run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    path = vault.root / "agent.toml"
    path.write_text(path.read_text() + "context_windows = { \"qwen3:8b\" = 1000 }\n")
    r = run("chat", "-m", "hello")
    assert r.exit_code == 1 and "over the model's context window of 1,000 tokens" in r.output
    assert fake_openai.calls() == []                         # refused before it was sent


def test_archiving_summarises_through_the_schema_on_a_local_model(fake_openai, vault, run):
    from fakeopenai import json_reply
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply("Green tea, noted."),
                    json_reply({"topic": "Green tea", "summary": "The user likes green tea.",
                                "importance": 0.7}))
    assert run("chat", "-m", "I like green tea").exit_code == 0
    r = run("archive")
    assert r.exit_code == 0, r.output
    fmt = fake_openai.calls()[1].body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"]["required"] == ["topic", "summary", "importance"]
    assert subjects(vault)[0] == "archive(cli/default): Green tea"
    assert "Model: local/qwen3:8b" in vault.git("log", "-1", "--format=%B")


# ---- local servers that name their model otherwise (issue 42) ----------------------------


def test_doctor_takes_a_model_listed_as_its_file_or_tag(fake_openai, vault, run):
    # llama-server lists the GGUF it loaded; Ollama lists "qwen3:latest" for "qwen3".
    fake_openai.models = ["/models/SmolLM2-135M-Instruct.Q4_1.gguf", "qwen3:latest"]
    use(vault, "local/SmolLM2-135M-Instruct.Q4_1", ("local", fake_openai.url),
        extra='fallbacks = ["local/qwen3"]\n')
    r = run("doctor")
    line = next(x for x in r.output.splitlines() if "provider local" in x)
    assert line.startswith("ok"), r.output
    assert ("serves SmolLM2-135M-Instruct.Q4_1 as /models/SmolLM2-135M-Instruct.Q4_1.gguf"
            in line and "serves qwen3 as qwen3:latest" in line)
    assert fake_openai.calls() == []                 # the listing was enough


def test_doctor_takes_a_local_server_that_answers_any_name(fake_openai, vault, run):
    fake_openai.models = ["smollm2"]
    fake_openai.any_model = True            # as llama-server: one model, any name
    use(vault, "local/my-model", ("local", fake_openai.url))
    fake_openai.add(reply("ok"))
    r = run("doctor")
    line = next(x for x in r.output.splitlines() if "provider local" in x)
    assert line.startswith("ok") and "answers for my-model (it serves smollm2)" in line, r.output
    (probe,) = fake_openai.calls()          # one token asked for, under the configured name
    assert probe.body["model"] == "my-model" and probe.body["max_tokens"] == 1
    # A server that answers only what it lists (Ollama, vLLM) fails with the fix.
    fake_openai.any_model = False
    r = run("doctor")
    assert "FAIL  provider local" in r.output and "does not list my-model" in r.output
    assert "-> ollama pull my-model" in r.output


def test_models_served_says_what_each_server_answers_for(fake_openai, vault, run):
    fake_openai.models = ["/models/SmolLM2-135M-Instruct.Q4_1.gguf"]
    fake_openai.any_model = True
    with FakeOpenAI() as gone:
        dead = gone.url
    use(vault, "local/SmolLM2-135M-Instruct.Q4_1", ("local", fake_openai.url), ("down", dead),
        extra='fallbacks = ["local/other", "down/x"]\n')
    fake_openai.add(reply("ok"))
    r = run("models", "--served")
    assert r.exit_code == 0, r.output
    out = r.output
    assert "serves SmolLM2-135M-Instruct.Q4_1 as /models/SmolLM2-135M-Instruct.Q4_1.gguf" in out
    assert "answers for other (it serves /models/SmolLM2-135M-Instruct.Q4_1.gguf)" in out
    assert "not checked: " in out
    assert f"local at {fake_openai.url} lists: /models/SmolLM2-135M-Instruct.Q4_1.gguf" in out
    assert "down at " in out and "lists: cannot say" in out
    # Without --served nothing is asked of any server.
    before = len(fake_openai.requests)
    assert run("models").exit_code == 0 and len(fake_openai.requests) == before


def test_a_fallback_without_its_key_is_a_warning_on_a_local_set_up(fake_openai, vault, run):
    fresh = (vault.root / "agent.toml").read_text()

    def doctor(extra: str) -> str:
        (vault.root / "agent.toml").write_text(fresh)
        use(vault, "local/qwen3:8b", ("local", fake_openai.url), extra=extra)
        return run("doctor").output

    # docs/providers.md's steps, with agent.toml's default Anthropic fallback kept.
    out = doctor('fallbacks = ["claude-sonnet-4-6"]\n')
    assert "FAIL" not in out, out
    assert ("warn  API key" in out and "ANTHROPIC_API_KEY is not set: the fallback "
            "claude-sonnet-4-6 cannot answer" in out)
    assert 'agent config set model.fallbacks ""' in out
    # The same for a provider of its own key; a chat or dream model without its key fails.
    out = doctor('fallbacks = ["openai/gpt-5-mini"]\n')
    assert "warn  provider openai" in out and "$OPENAI_API_KEY is not set" in out
    assert "FAIL  API key" in doctor('dream = "claude-sonnet-4-6"\n')
    # Without a fallback, the documented set-up is all well.
    out = doctor("")
    assert "API key" not in out and "ok    provider local" in out


def test_a_model_of_another_vendor_without_its_provider_is_named(vault, run):
    r = run("config", "set", "model.name", "gpt-5-mini")
    assert r.exit_code == 1
    assert "'gpt-5-mini' is not an Anthropic model" in r.output
    assert "did you mean openai/gpt-5-mini?" in r.output
    assert 'name = "claude' in model_table(vault)            # nothing was changed
    r = run("config", "set", "model.fallbacks", "qwen3:8b")
    assert r.exit_code == 1 and "did you mean local/qwen3:8b?" in r.output
    # Written by hand: config check, models and chat all say it, none takes it.
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace('name = "claude-sonnet-5-5"', 'name = "gpt-5-mini"'))
    for args in (("config", "check"), ("models",), ("chat", "-m", "hi")):
        r = run(*args)
        assert r.exit_code == 1 and "did you mean openai/gpt-5-mini?" in r.output, args
        assert "Traceback" not in r.output
    # A local provider's table makes its name the suggestion.
    path.write_text(path.read_text().replace('name = "gpt-5-mini"', 'name = "qwen3:8b"')
                    + '\n[providers.ollama]\nbase_url = "http://127.0.0.1:11434/v1"\nkey_env = ""\n')
    r = run("config", "check")
    assert "did you mean ollama/qwen3:8b?" in r.output and "[providers.ollama] table" not in r.output
