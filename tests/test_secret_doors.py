"""Every door by which text enters the vault or a model request passes the secret filter,
for the forms that got through it (issue 41): a private key block cut off before its END
line, a key split in two (by a blank line, by a space, over two arguments), and a key
written with JSON escapes, in what a person types and in the model's own tool input.

Each test plays the one who sends the text through one door, then reads what a person
or an attacker could read: the whole history (`git log --all -p`), the files, and every
request the stand-in model server received."""

from __future__ import annotations

import json

import pytest

from fakeanthropic import json_reply, reply, text, tool_use

# Key material without a dash after the prefix, so every form below keeps its pieces.
KEY = ("sk-ant-api03-Hq8vLk2PzW4nRt6YbC9xJm1QsD5fGh7KVb3NcXe0Za9Wy8Ut7Ir6Oe5Pa4Sd3Fg2"
       "Hj1Kl0Mn9Bv8Cx7AA")
FIRST, SECOND = KEY[:48], KEY[48:]
PEM_BODY = ("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
            "QyNTUxOQAAACDxk2pLs7uTqW0vHh4gQ2YfJm8kZrN1pLxT5sEoRvJc9wAAAJgq3Xz1Kt1c\n")
PEM_CUT = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + PEM_BODY       # no END line
FORMS = {
    "a private key block without its END line": PEM_CUT,
    "a key split in two by a blank line": f"{FIRST}\n\n{SECOND}",
    "a key split in two by a space": f"{FIRST} {SECOND}",
    "a key written with JSON escapes": KEY.replace("-", "\\u002d"),
}
# What must appear nowhere: pieces of each half and of the key's body.
PIECES = ["b3BlbnNzaC1rZXktdjEAAAAABG5v", "QyNTUxOQAAACDxk2pLs7uTq", FIRST[13:40],
          SECOND[:24], SECOND[-20:]]
MESSAGE = "My keys:\n" + "\n\nAnd another:\n".join(FORMS.values())


def leaked(text: str) -> list[str]:
    return [p for p in PIECES if p in text]


def history(vault) -> str:
    return vault.git("log", "--all", "-p", "--format=%B")


def files(vault) -> str:
    return "\n".join(p.read_text(errors="replace") for p in vault.root.rglob("*")
                     if p.is_file() and ".git" not in p.parts)


def requests(fake_anthropic) -> str:
    """Every request as the model reads it (batches too): JSON escapes decoded."""
    sent = [r for r in list(fake_anthropic.requests) if r.method == "POST"]
    return "\n".join(json.dumps(c.body, ensure_ascii=False) + str(c.body) for c in sent)


@pytest.mark.parametrize("form", FORMS)
def test_each_form_is_caught_by_the_filter_itself(form):
    from agent import redact

    out, kinds = redact.scrub(f"here it is:\n{FORMS[form]}\nthanks")
    assert not leaked(out), out
    assert kinds and out.startswith("here it is:\n[secret:")


def test_what_a_person_types_in_a_chat(fake_anthropic, vault, run):
    fake_anthropic.add(reply("Noted."))
    r = run("chat", "-m", MESSAGE)
    assert r.exit_code == 0, r.output
    assert "Kept out of the vault and the model" in r.output
    assert leaked(requests(fake_anthropic)) == [] and leaked(history(vault)) == []


def test_a_note(vault, run):
    assert run("note", MESSAGE).exit_code == 0
    assert leaked(history(vault)) == [] and leaked(files(vault)) == []


@pytest.mark.parametrize("tool,args", [
    ("remember", lambda m: {"text": m, "target": "memory"}),
    ("write_file", lambda m: {"path": "workspace/keys.txt", "content": m}),
    ("remember", lambda m: {"text": FIRST, "rest": SECOND, "target": "memory"}),
])
def test_the_models_own_tool_input(fake_anthropic, vault, run, tool, args):
    fake_anthropic.add(reply(tool_use(tool, args(MESSAGE))), reply(text("Done.")))
    r = run("chat", "-m", "keep this for me")
    assert r.exit_code == 0, r.output
    assert leaked(history(vault)) == [] and leaked(files(vault)) == []
    # The next turn replays the stored tool call: it holds no key either.
    fake_anthropic.add(reply("Yes."))
    assert run("chat", "-m", "did you?").exit_code == 0
    assert leaked(json.dumps(fake_anthropic.calls()[-1].body, ensure_ascii=False)) == []


def test_what_a_tool_reads_goes_back_to_the_model_filtered(fake_anthropic, vault, run):
    (vault.root / "workspace").mkdir(exist_ok=True)
    (vault.root / "workspace" / "env.txt").write_text(MESSAGE)
    fake_anthropic.add(reply(tool_use("read_file", {"path": "workspace/env.txt"})),
                       reply(text("It holds keys.")))
    assert run("chat", "-m", "what is in workspace/env.txt?").exit_code == 0
    assert leaked(json.dumps(fake_anthropic.calls()[1].body["messages"][-1],
                             ensure_ascii=False)) == []
    sessions = "".join(p.read_text() for p in (vault.root / "sessions").rglob("*.jsonl"))
    assert leaked(sessions) == []


def test_what_a_person_typed_into_user_md_by_hand(fake_anthropic, vault, run):
    with open(vault.root / "USER.md", "a") as f:
        f.write("\n" + MESSAGE + "\n")
    fake_anthropic.add(reply("Hello."))
    assert run("chat", "-m", "hi").exit_code == 0
    assert leaked(requests(fake_anthropic)) == []


def test_a_transcript_line_a_sync_brought(fake_anthropic, vault, run, evil):
    from helpers import git, push

    fake_anthropic.add(reply("Hello."))
    assert run("chat", "-m", "hi").exit_code == 0
    assert run("sync").exit_code == 0
    git(evil, "pull", "-q", "origin", "main")
    [rel] = [p.relative_to(evil) for p in (evil / "sessions").rglob("*.jsonl")]
    line = json.loads((evil / rel).read_text().splitlines()[-1])
    line.update({"id": "x-1", "role": "user", "turn": line.get("turn", 1) + 1,
                 "content": MESSAGE})
    with open(evil / rel, "a") as f:
        f.write(json.dumps(line, ensure_ascii=False) + "\n")
    push(evil, "chat: a line from elsewhere")
    assert run("sync").exit_code == 0
    fake_anthropic.add(reply("Hello again."))
    assert run("chat", "-m", "and now?").exit_code == 0
    assert leaked(json.dumps(fake_anthropic.calls()[1].body, ensure_ascii=False)) == []


def test_a_message_from_a_channel(fake_anthropic, vault):
    from helpers import router

    fake_anthropic.add(reply("Got it."))
    conv = router(vault)
    ticket = conv.submit("gateway/phone", MESSAGE)
    assert ticket.wait(20).reply.startswith("Got it.")
    assert conv.drain(10)
    assert leaked(requests(fake_anthropic)) == [] and leaked(history(vault)) == []


def test_a_note_or_fact_an_mcp_client_sends(vault):
    from helpers import drive

    async def steps(c):
        await c.call_tool("note", {"text": MESSAGE})
        await c.call_tool("remember", {"text": MESSAGE, "target": "memory"})
    drive(vault, steps)
    assert leaked(history(vault)) == [] and leaked(files(vault)) == []


@pytest.mark.parametrize("kind", ["chatgpt", "jsonl"])
def test_an_import(vault, run, tmp_path, kind):
    if kind == "chatgpt":
        node = {"id": "m1", "parent": None, "children": [], "message": {
            "id": "m1", "author": {"role": "user"}, "create_time": 1_700_000_000,
            "content": {"content_type": "text", "parts": [MESSAGE]}}}
        path = tmp_path / "conversations.json"
        path.write_text(json.dumps([{"id": "c1", "title": "Keys", "current_node": "m1",
                                     "mapping": {"m1": node}}]))
    else:
        path = tmp_path / "old.jsonl"
        path.write_text(json.dumps({"session": "cli/old", "role": "user", "content": MESSAGE,
                                    "ts": "2026-01-01T10:00:00+00:00"}) + "\n")
    r = run("import", str(path))
    assert r.exit_code == 0, r.output
    assert leaked(history(vault)) == [] and leaked(files(vault)) == []


def test_the_dreams_requests(fake_anthropic, vault, run):
    """What the dream reads was filtered as the agent wrote it, but not what a person
    typed into MEMORY.md, nor a transcript a sync brought: its requests pass the filter
    too."""
    from dreamkit import write_entries

    toml = vault.root / "agent.toml"
    before = toml.read_text()
    toml.write_text(before + "\n[security]\nredact_secrets = false\n")
    with vault.locked():            # as another machine, without the filter, wrote them
        write_entries(vault, [{"summary": "The person set up a deploy.",
                               "message": MESSAGE}])
    toml.write_text(before)
    with open(vault.root / "MEMORY.md", "a") as f:
        f.write("\n- " + MESSAGE.replace("\n", " ") + "\n")
    assert leaked(history(vault))                      # (what the remote brought)
    fake_anthropic.add(json_reply({"findings": []}))
    r = run("dream", "--poll-interval", "0.01")
    assert r.exit_code == 0, r.output
    assert "MEMORY.md" in requests(fake_anthropic)           # the analyst's request
    assert leaked(requests(fake_anthropic)) == []
