"""The secret filter at the door (issue 26): a key pasted anywhere reaches neither the
vault's history nor the model; the person hears in one line what was kept out."""

from __future__ import annotations

import json

import pytest

from fakeanthropic import reply, text, tool_use

ANTHROPIC = "sk-ant-api03-" + "Zq7_" * 20 + "AA"
AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2" * 9
URL_PW = "postgres://bob:Hunter2Horse@db.example.com/app"
TELEGRAM = "123456789:" + "AAH" * 11 + "xy"
JWT = ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
       "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U")
PRIVATE = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
           "QyNTUxOQAAACDxk2pL\n-----END OPENSSH PRIVATE KEY-----")


def history(vault) -> str:
    return vault.git("log", "--all", "-p")


def test_a_key_pasted_into_chat_reaches_neither_the_vault_nor_the_model(fake_anthropic,
                                                                        vault, run):
    fake_anthropic.add(reply("Noted; I will not repeat it."))
    msg = (f"my anthropic key is {ANTHROPIC} and aws {AWS}, db at {URL_PW}, "
           f"bot {TELEGRAM}, token {JWT} and\n{PRIVATE}")
    r = run("chat", "-m", msg)
    assert r.exit_code == 0, r.output
    assert "Kept out of the vault and the model: 6 secrets" in r.output
    sent = json.dumps(fake_anthropic.calls()[0].body)
    log = history(vault)
    for secret in (ANTHROPIC, AWS, "Hunter2Horse", TELEGRAM, JWT, "b3BlbnNzaC1rZXkt"):
        assert secret not in sent
        assert secret not in log
    assert "[secret:anthropic]" in sent and "[secret:private-key]" in log
    assert "postgres://bob:[secret:password]@db.example.com/app" in log
    # The transcript stays valid JSON lines.
    for f in (vault.root / "sessions").rglob("*.jsonl"):
        for line in f.read_text().splitlines():
            json.loads(line)


def test_a_key_in_a_tool_output_is_not_sent_back_to_the_model(fake_anthropic, vault, run):
    (vault.root / "workspace").mkdir(exist_ok=True)
    (vault.root / "workspace" / "env.txt").write_text(f"GITHUB_TOKEN={GITHUB}\n")
    fake_anthropic.add(reply(tool_use("read_file", {"path": "workspace/env.txt"})),
                       reply(text("It holds a GitHub token.")))
    r = run("chat", "-m", "what is in workspace/env.txt?")
    assert r.exit_code == 0, r.output
    result = json.dumps(fake_anthropic.calls()[1].body["messages"][-1])
    assert GITHUB not in result and "GITHUB_TOKEN=[secret:github]" in result
    assert "Kept out of the vault and the model: 1 secret (github)" in r.output
    session = "".join(f.read_text() for f in (vault.root / "sessions").rglob("*.jsonl"))
    assert GITHUB not in session


def test_the_model_cannot_write_a_key_into_memory(fake_anthropic, vault, run):
    fake_anthropic.add(reply(tool_use("remember", {"text": f"deploy key {AWS}",
                                                   "target": "memory"})),
                       reply(text("Remembered.")))
    r = run("chat", "-m", "remember how we deploy")
    assert r.exit_code == 0, r.output
    assert AWS not in (vault.root / "MEMORY.md").read_text()
    assert "[secret:aws]" in (vault.root / "MEMORY.md").read_text()
    assert AWS not in vault.git("log", "--all", "-p", "--", "MEMORY.md")


def test_a_note_keeps_the_key_out_and_says_so(vault, run):
    r = run("note", f"new github token {GITHUB}")
    assert r.exit_code == 0, r.output
    assert "[secret:github]" in r.output
    assert "Kept out of the vault and the model: 1 secret (github)" in r.output
    assert GITHUB not in history(vault)


def test_ordinary_text_is_left_alone(vault, run):
    plain = "call the dentist at 3pm; commit 6695e97 fixed it; ip 8.8.8.8; sk-learn rocks"
    r = run("note", plain)
    assert r.exit_code == 0 and "Kept out" not in r.output
    assert plain in history(vault)


def test_the_filter_can_be_turned_off(vault, run):
    (vault.root / "agent.toml").write_text("[security]\nredact_secrets = false\n")
    r = run("note", f"token {GITHUB}")
    assert r.exit_code == 0 and "Kept out" not in r.output
    assert GITHUB in history(vault)


def test_a_key_a_command_writes_in_workspace_is_not_committed(fake_anthropic, vault, run):
    from agent import sandbox
    if not sandbox.sandbox_status().ok:
        pytest.skip("no working bwrap sandbox here")
    fake_anthropic.add(reply(tool_use("exec", {"command": f"echo 'AWS={AWS}' > creds.txt"})),
                       reply(text("Saved.")))
    r = run("chat", "-m", "save the credentials")
    assert r.exit_code == 0, r.output
    assert "workspace/creds.txt" in vault.git("show", "--name-only", "--format=", "HEAD")
    assert (vault.root / "workspace" / "creds.txt").read_text() == "AWS=[secret:aws]\n"
    assert AWS not in history(vault)
    # The file, and the command in the transcript.
    assert "Kept out of the vault and the model: 2 secrets (2 aws)" in r.output
    assert vault.dirty_paths() == []


def test_a_person_on_a_channel_hears_what_was_kept_out(fake_anthropic, vault):
    from helpers import router
    fake_anthropic.add(reply("Got it."))
    conv = router(vault)
    ticket = conv.submit("gateway/phone", f"the staging key is {ANTHROPIC}")
    assert ticket.wait(20).reply == "Got it."
    assert ticket.reply.startswith("Got it.\n\n(Kept out of the vault and the model: "
                                     "1 secret (anthropic)")
    assert ANTHROPIC not in json.dumps(fake_anthropic.calls()[0].body)
    assert ANTHROPIC not in history(vault)
    assert conv.drain(10)


# ---- every request passes the filter, whatever wrote the file ---------------------------

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SPLIT = ANTHROPIC[:30] + "\n" + ANTHROPIC[30:]          # wrapped over two lines


def sent_text(fake_anthropic, n=0) -> str:
    """Request `n` as the model reads it: JSON escapes decoded."""
    body = fake_anthropic.calls()[n].body
    return json.dumps(body, ensure_ascii=False) + "\n" + str(body)


def test_a_key_typed_into_user_md_by_hand_does_not_reach_the_model(fake_anthropic, vault, run):
    # Typed by hand, never through the agent's door: system-prompt files are filtered
    # as they go into the request.
    with open(vault.root / "USER.md", "a") as f:
        f.write(f"\n- My AWS login: aws {AWS} secret {AWS_SECRET}\n- GitHub {GITHUB}\n")
    (vault.root / "AGENTS.md").write_text((vault.root / "AGENTS.md").read_text()
                                          + f"\nDeploy with {SPLIT} please.\n")
    fake_anthropic.add(reply("Hello."))
    assert run("chat", "-m", "hi").exit_code == 0
    sent = sent_text(fake_anthropic)
    for secret in (AWS, AWS_SECRET, GITHUB, ANTHROPIC[:30], ANTHROPIC[30:]):
        assert secret not in sent
    assert "- My AWS login: aws [secret:aws] secret [secret:aws]" in sent
    assert "Deploy with [secret:anthropic] please." in sent
    # The person's file is theirs: left as they typed it.
    assert AWS_SECRET in (vault.root / "USER.md").read_text()


@pytest.mark.parametrize("written", [
    SPLIT,                                             # split over lines
    ANTHROPIC.replace("-", "%2D"),                     # URL-encoded
    "\\u0073k\\u002dant\\u002dapi03\\u002d" + ANTHROPIC[13:],   # JSON escapes, in the file
])
def test_a_synced_transcript_line_passes_the_filter_on_its_way_to_the_model(
        fake_anthropic, vault, run, evil, written):
    from helpers import git, push
    # The remote writes a transcript line the agent never filtered: in the session the
    # person then continues here.
    fake_anthropic.add(reply("Hello."))
    assert run("chat", "-m", "hi").exit_code == 0
    assert run("sync").exit_code == 0
    git(evil, "pull", "-q", "origin", "main")
    [rel] = [p.relative_to(evil) for p in (evil / "sessions").rglob("*.jsonl")]
    line = json.loads((evil / rel).read_text().splitlines()[-1])
    line.update({"id": "x-1", "role": "user", "turn": line.get("turn", 1) + 1,
                 "content": "PLACEHOLDER"})
    raw = json.dumps(line).replace("PLACEHOLDER", "my key: " + written.replace("\n", "\\n"))
    with open(evil / rel, "a") as f:
        f.write(raw + "\n")
    push(evil, "chat: a line from elsewhere")
    assert run("sync").exit_code == 0
    assert "my key: " in (vault.root / rel).read_text()

    fake_anthropic.add(reply("Hello again."))
    assert run("chat", "-m", "and now?").exit_code == 0
    sent = sent_text(fake_anthropic, 1)
    assert "my key: [secret:anthropic]" in sent
    assert ANTHROPIC[30:] not in sent and "Zq7_Zq7_Zq7_Zq7_" not in sent


def test_a_write_says_which_secrets_it_kept_out(vault):
    """Each write returns the kinds of secret the filter took out, for the front-end to
    tell; the file and the history hold the placeholder, never the key."""
    from agent.vault.change import Change

    with vault.locked():
        written = vault.write_text("notes.md", f"token {GITHUB}\n")
        appended = vault.append_lines("notes.md", [f"and {AWS}"])
        clean = vault.write_text("plain.md", "nothing secret here\n")
        vault.commit(Change("note", "notes"))
    assert (written, appended, clean) == (["github"], ["aws"], [])
    assert "[secret:github]" in (vault.root / "notes.md").read_text()
    assert GITHUB not in history(vault) and AWS not in history(vault)
