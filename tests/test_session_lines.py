"""The session line format: what existing vaults hold reads back byte for byte through
`Line`, and a turn, a delivery and an import write the shape they always did."""

import json
import re
from pathlib import Path

import pytest
from fakeanthropic import reply, tool_use

from agent.llm.records import Opaque, Text, ToolCall, ToolResult
from agent.stores import sessions
from agent.stores.sessions import Line

# A session file of three turns (a tool call, a plain answer, a tool that failed) as the
# agent wrote it before the seam spoke records (ids and the commit made stable).
TODAYS = Path(__file__).parent / "data" / "seam" / "session.jsonl"

# Lines as vaults written by earlier versions hold them, byte for byte.
OLD_LINES = [
    '{"id":"1.0-a1b2c3","ts":"2026-11-20T10:00:00+01:00","role":"user","content":"Plan Kyoto",'
    '"turn":1}',
    '{"id":"1.1-d4e5f6","ts":"2026-11-20T10:00:00+01:00","role":"assistant","content":'
    '"Kyoto in April.","turn":1,"model":"claude-sonnet-5-5"}',
    '{"id":"2.0-aaaaaa","ts":"2026-11-20T10:05:00+01:00","role":"user","content":"and?",'
    '"turn":2,"error":"overloaded","source":"telegram:42","received":"tg-7"}',
    '{"id":"2.1-bbbbbb","ts":"2026-11-20T10:05:00+01:00","role":"assistant","content":[{"type":'
    '"tool_use","id":"t1","name":"remember","input":{"text":"x"}}],"turn":2,"model":"m",'
    '"interrupted":true}',
    '{"id":"d-0a0b0c0d","ts":"2026-11-20T11:00:00+01:00","role":"assistant","content":"Stand-up '
    'in 5 minutes ✓","source":"cron/standup"}',
    '{"id":"imp-0123456789ab","ts":"2026-01-02T03:04:05+00:00","role":"user","content":"hi",'
    '"turn":1,"speaker":"Ana"}',
]
NOT_MESSAGES = [
    '{"type":"compact","archive":42,"through":"1.1-d4e5f6","ids":["1.0-a1b2c3","1.1-d4e5f6"]}',
    '{"type":"received","id":"tg-7","ts":"2026-11-20T10:05:00+01:00","content":"and?"}',
]


@pytest.mark.parametrize("raw", OLD_LINES)
def test_a_line_of_an_existing_vault_reads_back_byte_for_byte(raw):
    line = Line.read(json.loads(raw))
    assert line is not None
    assert line.dumps() == raw


@pytest.mark.parametrize("raw", NOT_MESSAGES)
def test_markers_and_receipts_are_not_message_lines(raw):
    assert Line.read(json.loads(raw)) is None


def test_a_line_says_who_spoke_and_what():
    imported = Line.read(json.loads(OLD_LINES[-1]))
    assert (imported.speaker, imported.text, imported.turn) == ("Ana", "hi", 1)
    delivered = Line.read(json.loads(OLD_LINES[4]))
    assert delivered.turn is None and delivered.speaker == "assistant"
    assert "turn" not in delivered.to_dict()


def test_a_turn_writes_lines_in_the_format_vaults_already_hold(fake_anthropic, vault, run):
    fake_anthropic.add(reply("Kyoto in April is lovely."))
    assert run("chat", "-m", "Plan the Kyoto trip").exit_code == 0
    [path] = (vault.root / "sessions" / "cli" / "default").glob("*.jsonl")
    raws = path.read_text(encoding="utf-8").splitlines()
    assert len(raws) == 2
    for raw in raws:
        assert list(json.loads(raw))[:5] == ["id", "ts", "role", "content", "turn"]
        assert Line.read(json.loads(raw)).dumps() == raw
    assert re.fullmatch(r'\{"id":"1\.0-[0-9a-f]{6}","ts":"[^"]+","role":"user",'
                        r'"content":"Plan the Kyoto trip","turn":1\}', raws[0])
    assert json.loads(raws[1])["model"] == "claude-sonnet-5-5"


def test_an_import_writes_speakers_and_turns_as_before(vault, run, tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text('{"session":"g/1","role":"user","content":"hi","ts":"2026-01-02T03:04:05Z",'
                   '"speaker":"Ana"}\n', encoding="utf-8")
    assert run("import", str(src)).exit_code == 0
    [raw] = (vault.root / "sessions/g/1/2026-01.jsonl").read_text().splitlines()
    obj = json.loads(raw)
    assert list(obj) == ["id", "ts", "role", "content", "turn", "speaker", "imported"]
    assert obj["imported"] is True        # history told by a file: the dream holds it
    assert obj["ts"] == "2026-01-02T03:04:05+00:00" and obj["turn"] == 1
    assert sessions.dumps(obj) == raw


def stable(text: str) -> str:
    text = re.sub(r'"id":"(\d+\.\d+)-[0-9a-f]{6}"', r'"id":"\1-xxxxxx"', text)
    return re.sub(r'"c":"[0-9a-f]+"', '"c":"commit"', text)


@pytest.mark.parametrize("raw", TODAYS.read_text(encoding="utf-8").splitlines() + OLD_LINES)
def test_a_line_of_today_reads_into_records_and_back_byte_for_byte(raw):
    line = Line.read(json.loads(raw))
    again = Line(line.id, line.ts, line.role, sessions.stored(line.blocks)
                 if isinstance(line.content, list) else line.content, line.turn, line.extra)
    assert again.dumps() == raw


def test_the_stored_blocks_are_the_seams_records():
    lines = [Line.read(json.loads(raw)) for raw in TODAYS.read_text().splitlines()]
    assert lines[1].blocks == [Text("Noting it."),
                               ToolCall("toolu_seam1", "remember", {"text": "The boat is called Wren"})]
    [result] = lines[2].blocks
    assert isinstance(result, ToolResult) and result.call_id == "toolu_seam1"
    assert not result.is_error and result.text.startswith("Noted in memory/")
    [failed] = lines[8].blocks
    assert failed.is_error and failed.call_id == "toolu_seam2"
    assert lines[0].blocks == [Text("Remember that my boat is called Wren")]
    # A block the agent does not read (an imported image) is kept whole.
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    assert sessions.blocks([image]) == [Opaque(image)]
    assert sessions.stored([Opaque(image)]) == [image]


def test_turns_with_tools_append_what_todays_agent_appended(fake_anthropic, vault, run,
                                                            fixed_now):
    fake_anthropic.add(
        reply("Noting it.", tool_use("remember", {"text": "The boat is called Wren"},
                                     id="toolu_seam1")),
        reply("Saved."), reply("Wren."),
        reply(tool_use("no_such_tool", {"n": 1}, id="toolu_seam2")), reply("That failed."))
    for said in ("Remember that my boat is called Wren", "What is my boat called?",
                 "Try the missing tool"):
        assert run("chat", "-m", said).exit_code == 0
    [path] = (vault.root / "sessions/cli/default").glob("*.jsonl")
    assert stable(path.read_text(encoding="utf-8")) == TODAYS.read_text(encoding="utf-8")
