"""The session line format: what existing vaults hold reads back byte for byte through
`Line`, and a turn, a delivery and an import write the shape they always did."""

import json
import re

import pytest
from fakeanthropic import reply

from agent.stores import sessions
from agent.stores.sessions import Line

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
