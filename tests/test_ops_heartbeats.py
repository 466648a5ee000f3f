"""agent/ops/heartbeats.py called directly: add writes the file in one commit, enable
and disable change one line of it, the listing says when each runs."""

from __future__ import annotations

import pytest

from agent.ops import heartbeats
from agent.stores.heartbeatfile import HeartbeatError
from conftest import subjects


def test_add_disable_enable_and_list(vault):
    hb, sha = heartbeats.add(vault, "inbox", "check my inbox note", every="2h",
                             active_hours="08:00-22:00")
    path = vault.root / "heartbeat/inbox.md"
    assert path.exists() and "check my inbox note" in path.read_text()
    assert sha == vault.git("rev-parse", "HEAD").strip()
    assert subjects(vault)[0] == 'heartbeat: add "inbox" (every 2h)'
    def listed():
        return {b.heartbeat.name: b for b in heartbeats.list_heartbeats(vault).heartbeats}
    assert listed()["inbox"].why_not == "when serve starts"       # serve schedules it

    before = path.read_text()
    heartbeats.disable(vault, "inbox")
    assert subjects(vault)[0] == 'heartbeat: disable "inbox"'
    diff = vault.git("show", "--format=", "-U0", "HEAD").splitlines()
    assert [l for l in diff if l[:1] in "+-" and l[:3] not in ("+++", "---")] == [
        "-enabled: true", "+enabled: false"]                       # that line, nothing else
    assert heartbeats.disable(vault, "inbox").sha is None
    assert listed()["inbox"].why_not == "disabled"
    heartbeats.enable(vault, "inbox")
    assert path.read_text() == before


def test_a_name_taken_or_unknown_is_refused_saying_what_there_is(vault):
    heartbeats.add(vault, "inbox", "check my inbox note", every="2h")
    n = len(subjects(vault))
    with pytest.raises(HeartbeatError, match="exists already"):
        heartbeats.add(vault, "inbox", "again", cron="0 8 * * *")
    with pytest.raises(HeartbeatError, match="Did you mean inbox"):
        heartbeats.enable(vault, "inbx")
    with pytest.raises(HeartbeatError, match="exactly one of"):
        heartbeats.add(vault, "news", "read the news")
    assert len(subjects(vault)) == n


def test_run_now_that_finds_nothing_to_do_leaves_no_commit(vault, fake_anthropic):
    import json
    from datetime import datetime, timezone

    from agent.llm import make_provider
    from fakeanthropic import reply

    heartbeats.add(vault, "inbox", "check my inbox note", every="2h", enabled=False)
    n = len(subjects(vault))
    fake_anthropic.add(reply("HEARTBEAT_OK"))
    now = datetime(2030, 1, 1, 10, 0, tzinfo=timezone.utc)
    outcome = heartbeats.run_now(vault, make_provider(), "inbox", now)
    assert outcome.status == "quiet" and outcome.sha is None
    assert len(subjects(vault)) == n and vault.dirty_paths() == []
    state = json.loads((vault.state / "heartbeat-state.json").read_text())["inbox"]
    assert state["last_status"] == "quiet" and state["last_run"].startswith("2030-01-01T10:00")
