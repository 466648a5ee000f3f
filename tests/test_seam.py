"""The model seam speaks no vendor's dialect, and the vendors still hear what they always
heard: the request bodies of a turn with tools and cache hints, of compaction and of the
dream, as the stand-in servers received them, are compared with the bodies the agent sent
before the seam had records (tests/data/seam/, recorded then): the same keys in the same
order, the same values."""

from __future__ import annotations

import json
from pathlib import Path

from dreamkit import finding, op, set_review, write_entries
from fakeanthropic import json_reply, reply, tool_use
from fakeopenai import call, json_reply as o_json, reply as o_reply

GOLDEN = Path(__file__).parent / "data" / "seam"


def same_as_before(name: str, raws: list[bytes]) -> None:
    """Each body, parsed with its keys in the order sent, equals the recorded one."""
    got = [json.loads(r) for r in raws]
    path = GOLDEN / f"{name}.json"
    want = json.loads(path.read_text(encoding="utf-8"))
    assert len(got) == len(want)
    for n, (g, w) in enumerate(zip(got, want)):
        assert json.dumps(g, ensure_ascii=False) == json.dumps(w, ensure_ascii=False), \
            f"{name}: request {n} differs"


def use_local(vault, url: str) -> None:
    path = vault.root / "agent.toml"
    text = path.read_text()
    start = text.index("[model]\n")
    end = text.index("\n\n", start)
    text = f'{text[:start]}[model]\nname = "local/qwen3:8b"\n{text[end:]}'
    text += f'\n[providers.local]\napi = "openai"\nbase_url = "{url}"\nkey_env = ""\n'
    path.write_text(text)


def no_exec(vault) -> None:
    """The `exec` tool is offered only where bubblewrap works; the recorded bodies have none."""
    path = vault.root / "agent.toml"
    text = path.read_text()
    start = text.index("[exec]\n")
    at = text.index("enabled = true", start)
    path.write_text(text[:at] + "enabled = false" + text[at + len("enabled = true"):])


def boat_turns(run) -> None:
    """Two turns: one that calls a tool, one whose window holds that call and its result.
    The first asks to remember, which now forces the remember call (test_forced_remember.py);
    the bodies recorded before the seam had no tool_choice, so that is off here."""
    assert run("config", "set", "chat.force_remember", "false").exit_code == 0
    r = run("chat", "-m", "Remember that my boat is called Wren")
    assert r.exit_code == 0, r.output
    r = run("chat", "-m", "What is my boat called?")
    assert r.exit_code == 0, r.output


def seeded(vault) -> None:
    set_review(vault, "off")
    (vault.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n\n- The team uses Postgres 16\n")
    vault.git("add", "-A")
    vault.git("commit", "-q", "-m", "edit: facts by hand")
    write_entries(vault, ["Planned the Kyoto trip; flights booked for 3 December.",
                          "Talked about the weather."])


KYOTO = finding("Flying to Kyoto on 2026-12-03", evidence=["archive:1"], date="2026-12-03")
ADD = op("add", section="Travel", new="- Flying to Kyoto on 2026-12-03", reason="archive:1")


def test_anthropic_turns_and_compaction_send_the_same_bodies(fake_anthropic, vault, run,
                                                             fixed_now):
    no_exec(vault)
    fake_anthropic.add(
        reply("Noting it.", tool_use("remember", {"text": "The boat is called Wren"},
                                     id="toolu_seam1")),
        reply("Saved."), reply("Wren."),
        json_reply({"topic": "The boat", "summary": "The boat is called Wren.",
                    "importance": 0.8}))
    boat_turns(run)
    r = run("archive")
    assert r.exit_code == 0, r.output
    calls = fake_anthropic.calls()
    assert len(calls) == 4
    # The window's tool call and result, and the cache hints, as the Messages API has them.
    second_turn = calls[2].body
    assert any(b.get("type") == "tool_use" for m in second_turn["messages"]
               for b in m["content"])
    assert any("cache_control" in b for m in second_turn["messages"] for b in m["content"])
    same_as_before("anthropic_chat", [c.raw for c in calls])


def test_anthropic_dream_batches_send_the_same_bodies(fake_anthropic, vault, run, fixed_now):
    seeded(vault)
    fake_anthropic.add(json_reply({"findings": [KYOTO]}), json_reply({"ops": [ADD]}))
    r = run("dream", "--poll-interval", "0.01")
    assert r.exit_code == 0, r.output
    same_as_before("anthropic_dream", [c.raw for c in fake_anthropic.calls("/v1/messages/batches")])


def test_openai_turns_and_dream_send_the_same_bodies(fake_openai, vault, run, fixed_now):
    use_local(vault, fake_openai.url)
    no_exec(vault)
    seeded(vault)
    fake_openai.add(
        o_reply("Noting it.", call("remember", {"text": "The boat is called Wren"},
                                   id="call_seam1")),
        o_reply("Saved."), o_reply("Wren."),
        o_json({"findings": [KYOTO]}), o_json({"ops": [ADD]}))
    boat_turns(run)
    r = run("dream")
    assert r.exit_code == 0, r.output
    same_as_before("openai", [c.raw for c in fake_openai.calls()])
