"""`agent doctor`: all well, or each problem named with what to do, exit 1."""

from __future__ import annotations

import json

import pytest


def test_doctor_all_well(fake_anthropic, vault, run):
    import shutil
    r = run("doctor")
    lines = r.output.splitlines()
    for name in ("API key", "agent.toml", "git", "git fsck", "index", "cron.json", "heartbeats",
                 "skills"):
        assert any(l.startswith("ok") and f"  {name}  " in l for l in lines), (name, r.output)
    assert any("  sandbox  " in l for l in lines)
    assert [c.path for c in fake_anthropic.requests] == ["/v1/models"]
    h = fake_anthropic.requests[0].headers
    assert "test-key" in (h.get("x-api-key"), h.get("authorization", "").removeprefix("Bearer "))
    if shutil.which("bwrap"):
        sandbox = next(l for l in lines if "  sandbox  " in l)
        if sandbox.startswith("ok"):
            assert r.exit_code == 0 and "All is well." in r.output
    data = json.loads(run("doctor", "--json").stdout)
    assert {c["name"] for c in data["checks"]} >= {"API key", "models", "sandbox", "git fsck"}


@pytest.mark.slow
def test_doctor_names_each_problem_and_fails(fake_anthropic, vault, run):
    fake_anthropic.api_keys = {"another-key"}
    (vault.root / "cron.json").write_text("{ not json")
    hb = vault.root / "heartbeat" / "broken.md"
    hb.write_text("---\nname: broken\nevery: often\n---\nhi\n")
    r = run("doctor")
    assert r.exit_code == 1
    assert "FAIL  API key" in r.output and "check ANTHROPIC_API_KEY" in r.output
    assert "FAIL  cron.json   cron.json:1:3: not valid JSON" in r.output
    assert "FAIL  heartbeats  heartbeat/broken.md" in r.output
    data = json.loads(run("doctor", "--json").stdout)
    assert data["ok"] is False
    assert {c["name"]: c["status"] for c in data["checks"]}["git fsck"] == "ok"


def test_doctor_finds_a_damaged_repository(fake_anthropic, vault, run):
    sha = vault.git("rev-parse", "HEAD:USER.md").strip()
    obj = vault.root / ".git" / "objects" / sha[:2] / sha[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"garbage")
    r = run("doctor")
    assert r.exit_code == 1
    line = next(l for l in r.output.splitlines() if "git fsck" in l)
    assert line.startswith("FAIL") and sha[:2] in r.output


def test_doctor_unknown_model_and_missing_key(fake_anthropic, vault, run, monkeypatch):
    assert run("config", "set", "model.name", "claude-nonesuch-9").exit_code == 0
    r = run("doctor")
    assert r.exit_code == 1
    assert "FAIL  models" in r.output and "unknown to the API: claude-nonesuch-9" in r.output
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    r = run("doctor")
    assert r.exit_code == 1 and "ANTHROPIC_API_KEY is not set" in r.output


def test_doctor_answers_a_404_with_the_url_to_check_not_try_again(fake_anthropic, vault, run,
                                                                 monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.url + "/not/the/api")
    r = run("doctor")
    assert r.exit_code == 1
    assert "answered HTTP 404" in r.output and "check ANTHROPIC_BASE_URL" in r.output
    assert "try again later" not in r.output
