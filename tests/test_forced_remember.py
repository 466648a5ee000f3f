"""A message that asks to remember something makes the turn's first model call a
`remember` call (tool_choice), so a model that would only say "I'll remember that"
cannot drop the fact: on Anthropic's API as a named tool, on an OpenAI-compatible server
as "required" over that one tool (llama-server reads a named choice as "auto")."""

from __future__ import annotations

from conftest import TODAY_NOTE, subjects
from fakeanthropic import reply as a_reply, text as a_text, tool_use
from fakeopenai import call, reply
from helpers import use


def test_an_ask_to_remember_forces_the_remember_call_on_a_local_server(fake_openai, vault, run,
                                                                       fixed_now):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply(call("remember", {"text": "The boat is called Wren.",
                                            "target": "memory"}, id="call_1")),
                    reply("Kept: your boat is Wren."))
    r = run("chat", "-m", "Remember that my boat is called Wren.")
    assert r.exit_code == 0, r.output
    first, second = fake_openai.calls()
    assert first.body["tool_choice"] == "required"
    assert [t["function"]["name"] for t in first.body["tools"]] == ["remember"]
    # And the call's arguments as the response format (llama-server's "required" lets
    # a model write prose before the call; this leaves it none).
    remember = first.body["tools"][0]["function"]["parameters"]
    assert first.body["response_format"]["json_schema"]["schema"] == remember
    # Then the model is free again, with every tool, to answer.
    assert "tool_choice" not in second.body
    assert len(second.body["tools"]) > 1
    assert "- The boat is called Wren." in (vault.root / "MEMORY.md").read_text()
    assert subjects(vault)[0].startswith("chat(cli/default): Remember that my boat")
    assert "MEMORY.md" in vault.git("show", "--name-only", "--format=", "HEAD").split()


def test_a_forced_call_answered_as_its_arguments_json_is_the_call(fake_openai, vault, run,
                                                                  fixed_now):
    # llama-server under a forced call answers the response format: the arguments as the
    # reply's text (fenced or not), with no tool call of its own.
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply('```json\n{"text": "The boat is called Wren.", "target": "memory"}\n```'),
                    reply("Kept: your boat is Wren."))
    r = run("chat", "-m", "Remember that my boat is called Wren.")
    assert r.exit_code == 0, r.output
    assert '"text"' not in r.output          # the arguments are not shown as the reply
    assert "Kept: your boat is Wren." in r.output
    assert "- The boat is called Wren." in (vault.root / "MEMORY.md").read_text()
    second = fake_openai.calls()[1].body
    (asked,) = [m for m in second["messages"] if m.get("tool_calls")]
    assert asked["tool_calls"][0]["function"]["name"] == "remember"
    assert [m["role"] for m in second["messages"]][-2:] == ["assistant", "tool"]


def test_an_ask_to_remember_names_the_tool_on_anthropics_api(fake_anthropic, vault, run,
                                                            fixed_now):
    fake_anthropic.add(a_reply(tool_use("remember", {"text": "Prefers window seats."})),
                       a_reply(a_text("Noted.")))
    assert run("chat", "-m", "Please remember: I prefer window seats.").exit_code == 0
    first, second = fake_anthropic.calls()
    assert first.body["tool_choice"] == {"type": "tool", "name": "remember"}
    assert "tool_choice" not in second.body
    assert "Prefers window seats." in (vault.root / TODAY_NOTE).read_text()


def test_a_question_or_a_setting_leaves_the_model_free(fake_openai, vault, run):
    use(vault, "local/qwen3:8b", ("local", fake_openai.url))
    fake_openai.add(reply("Your boat is Wren."), reply("Fine."))
    assert run("chat", "-m", "Do you remember what my boat is called?").exit_code == 0
    assert "tool_choice" not in fake_openai.calls()[-1].body
    assert run("config", "set", "chat.force_remember", "false").exit_code == 0
    assert run("chat", "-m", "Remember that I sail on Sundays.").exit_code == 0
    assert "tool_choice" not in fake_openai.calls()[-1].body
