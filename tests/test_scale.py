"""A life's history: imported years of conversation and huge messages cost a turn what a
short history costs, and no request the model gets is over its budget (issue 28)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from agent.chat.compact import CHUNK_TOKENS
from agent.stores import sessions
from agent.stores import window
from fakeanthropic import json_reply, reply

WINDOW = 24000          # [chat] window_tokens of a new vault


def size(request) -> int:
    """A request's estimated input tokens: its system, messages and tools as JSON / 4."""
    body = request.body
    return len(json.dumps({k: body.get(k) for k in ("system", "messages", "tools") if body.get(k)},
                          ensure_ascii=False)) // 4


def answer(request):
    """The stand-in model: a summary for a summary request, else a short reply."""
    if "output_config" in request:
        return json_reply({"topic": "Old talk", "summary": "They talked.", "importance": 0.3})
    return reply("ok")


def lines(vault, key="cli/default") -> list[dict]:
    out = []
    for f in sorted((vault.root / "sessions" / key).glob("*.jsonl")):
        out += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return out


def write_import(tmp_path, n: int) -> tuple:
    t0 = datetime(2020, 1, 1, tzinfo=timezone.utc)
    path = tmp_path / "history.jsonl"
    with open(path, "w") as f:
        for i in range(n):
            role = "user" if i % 2 == 0 else "assistant"
            text = f"message {i}: we talked about the garden, the tomatoes, the roses and the long trip to Kyoto we planned {i % 97}."
            f.write(json.dumps({"session": "cli/default", "id": f"h{i}", "role": role,
                                "content": text, "ts": (t0 + timedelta(hours=i)).isoformat()}) + "\n")
    return path


@pytest.mark.slow
def test_a_turn_after_importing_5000_messages_sends_only_requests_within_budget(
        fake_anthropic, vault, run, tmp_path):
    r = run("import", str(write_import(tmp_path, 5000)))
    assert r.exit_code == 0 and "Imported 5000 messages" in r.output
    imported = sum(len(json.dumps(m["content"])) for m in lines(vault) if "role" in m) // 4
    assert imported > 4 * WINDOW          # far more history than a window

    for _ in range(3):
        fake_anthropic.add(answer)
    r = run("chat", "-m", "what did we plant?")
    assert r.exit_code == 0 and "ok" in r.output
    calls = fake_anthropic.calls()
    turns = [c for c in calls if "output_config" not in c.body]
    summaries = [c for c in calls if "output_config" in c.body]
    assert len(turns) == 1 and size(turns[0]) <= WINDOW
    # The window is the newest messages: the oldest are not sent.
    sent = json.dumps(turns[0].body["messages"])
    assert "message 4999:" in sent and "message 0:" not in sent
    # One chunk of the older history was archived after the reply, within its budget.
    assert len(summaries) == 1 and size(summaries[0]) <= CHUNK_TOKENS
    assert "message 0:" in summaries[0].body["messages"][0]["content"]
    assert "imported history" in r.output

    # `agent archive` does the rest, chunk by chunk, each request within its budget.
    fake_anthropic.default_reply = answer
    r = run("archive")
    assert r.exit_code == 0 and "KB of imported history left" in r.output
    summaries = [c for c in fake_anthropic.calls() if "output_config" in c.body]
    assert all(size(c) <= CHUNK_TOKENS for c in summaries)
    assert len(summaries) <= imported // (CHUNK_TOKENS // 2) + 3
    # Nothing lost and nothing twice: every imported message is in exactly one entry.
    covered = [i for m in lines(vault) if m.get("type") == "compact" for i in m.get("ids", [])]
    assert len(covered) == len(set(covered))
    assert {f"h{i}" for i in range(5000)} <= set(covered)
    assert window.read_window(vault.root, "cli/default").messages == []


def test_the_model_seam_refuses_a_request_over_the_context_window_without_sending_it(
        fake_anthropic, vault, run):
    toml = vault.root / "agent.toml"
    toml.write_text(toml.read_text().replace(
        "window_tokens = 24000", "window_tokens = 10000000\nmax_message_tokens = 10000000"))
    big = "lorem ipsum dolor sit amet " * 40000         # about 270,000 tokens
    r = run("chat", "-m", big)
    assert "Refused to send a request of about" in r.output and "context window" in r.output
    assert fake_anthropic.requests == []
    saved = lines(vault)[0]
    assert saved["content"] == big and "Refused" in saved["error"]      # nothing lost


def test_a_huge_message_reaches_the_model_as_head_and_tail_and_is_kept_whole(
        fake_anthropic, vault, run):
    big = "START " + "lorem ipsum dolor sit amet " * 30000 + " END"     # about 200,000 tokens
    fake_anthropic.add(reply("read it"), reply("again"))
    r = run("chat", "-m", big)
    assert r.exit_code == 0
    assert "Warning: your message is 810,010 characters" in r.output
    first = fake_anthropic.calls()[0]
    assert size(first) <= WINDOW
    text = json.dumps(first.body["messages"])
    assert "START" in text and "END" in text and "characters of this message left out" in text
    assert lines(vault)[0]["content"] == big
    # The next turn shows it the same way, saying where the whole is and how to page it.
    r = run("chat", "-m", "and now?")
    second = fake_anthropic.calls()[1]
    assert size(second) <= WINDOW
    text = json.dumps(second.body["messages"])
    assert "sessions/cli/default/" in text and "read_file" in text and "starts at character 0" in text


def test_serve_takes_the_last_message_not_a_long_marker_as_the_last_activity(vault):
    rel = "sessions/cli/default/2026-11.jsonl"
    (vault.root / rel).parent.mkdir(parents=True)
    msg = {"id": "1.0-a", "ts": "2026-11-20T10:00:00+00:00", "role": "user", "content": "hi",
           "turn": 1}
    marker = {"type": "compact", "archive": 1, "through": "x",
              "ids": [f"id-{i:06d}" for i in range(20000)]}          # a 300 KB line
    (vault.root / rel).write_text(json.dumps(msg) + "\n" + json.dumps(marker) + "\n")
    assert sessions.Session(vault.root, "cli/default").last_line() == msg


def test_search_shows_a_bounded_part_of_a_huge_message(vault, run, tmp_path):
    big = " ".join(f"lorem ipsum dolor sit amet {i}" for i in range(20000))     # 560 KB
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"session": "cli/default", "role": "user", "content": big,
                                "ts": "2026-11-20T10:00:00+00:00"}) + "\n")
    assert run("import", str(path)).exit_code == 0
    r = run("search", "--json", "--mode", "words", "lorem")
    hit = json.loads(r.output.splitlines()[0])
    assert hit["text_chars"] == len(big) and len(hit["text"]) <= 2001
    assert hit["matched"] == ["lorem"] and len(hit["snippet"]) < 400
    r = run("search", "--mode", "words", "lorem")
    assert r.exit_code == 0 and len(r.output) < 1000 and "[lorem]" in r.output


def test_imported_history_dated_after_today_is_archived_once_and_comes_to_rest(
        fake_anthropic, vault, run, tmp_path, fixed_now):
    # Messages dated next month (an export from a time zone ahead, a clock set wrong): the
    # markers must go where the last one is looked for, or the same chunk is archived
    # again and again, for ever.
    from agent.chat.compact import backlog_of, compact_backlog
    from agent.llm import make_provider

    t0 = fixed_now + timedelta(days=40)
    path = tmp_path / "ahead.jsonl"
    with open(path, "w") as f:
        for i in range(600):
            f.write(json.dumps({"session": "cli/default", "id": f"a{i}",
                                "role": "user" if i % 2 == 0 else "assistant",
                                "content": f"message {i}: " + "the garden and the roses " * 16,
                                "ts": (t0 + timedelta(minutes=i)).isoformat()}) + "\n")
    assert run("import", str(path)).exit_code == 0
    assert backlog_of(vault.root, "cli/default") is not None
    fake_anthropic.default_reply = answer
    provider = make_provider()
    made = []
    for _ in range(8):
        entry = compact_backlog(vault, provider, "cli/default", fixed_now)
        if entry is None:
            break
        made.append(entry)
    assert backlog_of(vault.root, "cli/default") is None
    assert 1 <= len(made) <= 4
    covered = [i for m in lines(vault) if m.get("type") == "compact" for i in m.get("ids", [])]
    assert len(covered) == len(set(covered)) and "a0" in covered
