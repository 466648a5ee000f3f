"""`agent why --last` / `--reply ID` (issue 35 item 1): each reply keeps a record of the
memory it was shown, told back line by line with the commit that taught each, through
the real CLI, the fake model, and the MCP server; and nothing of it reaches a request."""

from __future__ import annotations

import json
import subprocess

import pytest
from mcp import MCPError

from agent.ops.vaults import init_vault
from conftest import subjects
from fakeanthropic import reply, tool_use
from helpers import drive, text_of

SEAGULL = "The boat Seagull is moored in Kiel harbour, berth 14"


def plant(vault, run, fake):
    """USER.md gets a line by hand (committed as the person's edit) and another session
    a message a later search finds; the hand edit's commit."""
    path = vault.root / "USER.md"
    path.write_text(path.read_text() + "- Alice lives in Lisbon\n")
    run("note", "planted")                         # commits the hand edit first
    taught = next(line.split()[0] for line in vault.git("log", "--format=%H %s").splitlines()
                  if line.endswith("edit: USER.md by hand"))
    fake.add(reply("Noted about the boat."))
    r = run("chat", "--session", "cli/harbour", "-m", SEAGULL)
    assert r.exit_code == 0, r.output
    return taught


def transcript(vault, session="cli/default"):
    files = sorted((vault.root / "sessions" / session).glob("*.jsonl"))
    return [json.loads(x) for f in files for x in f.read_text().splitlines()]


def test_last_lists_a_planted_memory_line_and_a_retrieved_message(vault, run, fake_anthropic):
    taught = plant(vault, run, fake_anthropic)
    fake_anthropic.add(reply("Seagull is at berth 14 in Kiel, Alice."))
    assert run("chat", "-m", "Where is the boat Seagull moored?").exit_code == 0

    r = run("why", "--last", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    answer = [x for x in transcript(vault) if x["role"] == "assistant"][-1]
    assert out["reply"]["id"] == answer["id"] and out["reply"]["session"] == "cli/default"
    lines = {i["text"]: i for i in out["items"] if i["kind"] == "memory"}
    item = lines["- Alice lives in Lisbon"]
    assert item["where"].startswith("USER.md:") and item["taught"]["sha"] == taught
    assert item["taught"]["kind"] == "hand edit"
    assert item["detail"]["commit"] == vault.git("rev-parse", "HEAD~1").strip()
    said = [x for x in transcript(vault, "cli/harbour") if x["role"] == "user"][0]
    msgs = [i for i in out["items"] if i["kind"] == "message"]
    found = {m["detail"]["id"]: m for m in msgs}
    assert said["id"] in found
    assert SEAGULL in found[said["id"]]["text"]
    assert found[said["id"]]["detail"]["session"] == "cli/harbour"
    assert out["count"] == len(out["items"])
    # Ids, not text: the record on the reply's line holds neither fact.
    assert "Lisbon" not in json.dumps(answer["used"]) and "Kiel" not in json.dumps(answer["used"])

    text = run("why", "--last").output
    assert f"Reply {answer['id']} (cli/default, turn 1," in text
    assert "- Alice lives in Lisbon" in text and f"taught by {taught[:7]}" in text
    assert SEAGULL in text and "Retrieved messages:" in text
    # Each line's story is today's `agent why`.
    assert f"Written: {taught[:7]}" in run("why", "Alice lives in Lisbon").output


def test_reply_by_id_and_the_tools_search_and_skill(vault, run, fake_anthropic):
    plant(vault, run, fake_anthropic)
    skill = vault.root / "skills" / "harbours" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: harbours\ndescription: Finding a berth in a harbour.\n---\n"
                     "Ask the harbour master.\n")
    fake_anthropic.add(reply(tool_use("memory_search", {"query": "Seagull berth"}),
                             tool_use("load_skill", {"name": "harbours"})),
                       reply("It is at berth 14."))
    assert run("chat", "-m", "hello there").exit_code == 0
    fake_anthropic.add(reply("Bye."))
    assert run("chat", "-m", "thanks, bye").exit_code == 0
    first = [x for x in transcript(vault) if x["role"] == "assistant" and x["turn"] == 1][-1]

    out = json.loads(run("why", "--reply", first["id"], "--json").output)
    assert out["reply"]["id"] == first["id"] and out["reply"]["turn"] == 1
    kinds = {i["kind"] for i in out["items"]}
    assert {"memory", "message", "skill"} <= kinds
    assert any(SEAGULL in i["text"] for i in out["items"] if i["kind"] == "message")
    assert [i["detail"]["name"] for i in out["items"] if i["kind"] == "skill"] == ["harbours"]
    # The same with the session named; and --last is the newer reply.
    again = json.loads(run("why", "--reply", first["id"], "--session", "cli/default",
                           "--json").output)
    assert again["items"] == out["items"]
    assert json.loads(run("why", "--last", "--json").output)["reply"]["turn"] == 2


def test_unknown_ids_and_replies_from_before_say_so_in_one_line(vault, run, fake_anthropic):
    fake_anthropic.add(reply("Hi."))
    assert run("chat", "-m", "hello").exit_code == 0
    r = run("why", "--reply", "9.9-nothere")
    assert r.exit_code != 0 and "No reply 9.9-nothere" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    r = run("why", "--reply", "../../etc/passwd")
    assert r.exit_code != 0 and "is not a reply id" in r.output
    # A reply written before the feature: its line has no record.
    rel = next((vault.root / "sessions" / "cli" / "default").glob("*.jsonl"))
    rows = [json.loads(x) for x in rel.read_text().splitlines()]
    for row in rows:
        row.pop("used", None)
    rel.write_text("".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n"
                           for x in rows))
    answer = rows[-1]["id"]
    for args in (("--last",), ("--reply", answer)):
        r = run("why", *args)
        assert r.exit_code != 0 and "no record of the memories it used" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1
    # Existing usage is unchanged; --last wants no words.
    r = run("why")
    assert r.exit_code != 0 and "--last" in r.output
    assert run("why", "--last", "Lisbon").exit_code != 0


def test_the_record_adds_nothing_to_a_request(tmp_path, vault, run, fake_anthropic, fixed_now):
    """Two vaults, the same conversation; in one the first reply's record is removed (a
    vault from before): the second turn's request is the same, byte for byte."""
    other, _ = init_vault(tmp_path / "other")
    for v in (vault, other):
        path = v.root / "USER.md"
        path.write_text(path.read_text() + "- Alice lives in Lisbon\n")
    for v in (vault, other):
        fake_anthropic.add(reply("Hello Alice."))
        assert run("chat", "-m", "hello", vault_path=v.root).exit_code == 0
    rel = next((other.root / "sessions" / "cli" / "default").glob("*.jsonl"))
    rows = [json.loads(x) for x in rel.read_text().splitlines()]
    assert "used" in rows[-1]                       # the record is there...
    rows[-1].pop("used")                            # ... and gone in `other`
    rel.write_text("".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n"
                           for x in rows))
    for v in (vault, other):
        fake_anthropic.add(reply("Lisbon, yes."))
        assert run("chat", "-m", "where do I live?", vault_path=v.root).exit_code == 0
    calls = fake_anthropic.calls()
    assert len(calls) == 4

    def raw(call):
        return json.dumps(call.body, ensure_ascii=False, sort_keys=True)
    assert raw(calls[0]) == raw(calls[1])
    assert raw(calls[2]) == raw(calls[3])
    assert "used" not in json.dumps(calls[2].body["messages"])
    assert "used" in transcript(vault)[1]


def test_mcp_why_tells_the_last_reply_and_one_by_id(vault, run, fake_anthropic):
    plant(vault, run, fake_anthropic)
    fake_anthropic.add(reply("At berth 14."))
    assert run("chat", "-m", "Where is the boat Seagull moored?").exit_code == 0
    answer = [x for x in transcript(vault) if x["role"] == "assistant"][-1]

    async def steps(c):
        last = await c.call_tool("why", {"reply": "last"})
        by_id = await c.call_tool("why", {"reply": answer["id"], "session": "cli/default"})
        missing = await c.call_tool("why", {"reply": "1.9-zzzzzz"})
        with pytest.raises(MCPError) as both:
            await c.call_tool("why", {"reply": "last", "text": "Lisbon"})
        story = await c.call_tool("why", {"text": "Alice lives in Lisbon"})
        return [text_of(x) for x in (last, by_id, missing, story)] + [missing.is_error,
                                                                      str(both.value)]
    last, by_id, missing, story, missing_err, both = drive(vault, steps)
    assert last == by_id and f"Reply {answer['id']} (cli/default, turn 1" in last
    assert "- Alice lives in Lisbon" in last and SEAGULL in last
    assert missing_err and "No reply 1.9-zzzzzz" in missing
    assert "not both" in both
    assert story.startswith("USER.md:") and "a hand edit" in story
    assert subjects(vault)[0].startswith("chat(cli/default)")
    assert subprocess.run(["git", "-C", str(vault.root), "status", "--porcelain"],
                          capture_output=True, text=True).stdout == ""


def test_a_hostile_record_from_a_sync_reads_nothing_outside_the_vault(vault, run, fake_anthropic,
                                                                       tmp_path):
    """A transcript is a synced file: a record naming paths outside the vault, options for
    git or junk is told back as data, what is wrong said, nothing read or run."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    fake_anthropic.add(reply("Hi."))
    assert run("chat", "-m", "hello").exit_code == 0
    rel = next((vault.root / "sessions" / "cli" / "default").glob("*.jsonl"))
    rows = [json.loads(x) for x in rel.read_text().splitlines()]
    rows[-1]["used"] = {
        "n": 5, "c": "--output=/tmp/x",
        "f": [[str(secret), "abcdef123456"], ["../secret.txt", "abcd"], ["USER.md", "--all"],
              ["USER.md", "abcdef", ["1"]]],
        "m": [["sessions/../../secret.txt", ["1.0-aaaaaa"]], ["sessions/cli/default/x.jsonl", []]],
        "a": ["../../secret", True], "s": ["../../../etc/passwd"]}
    rel.write_text("".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n"
                           for x in rows))
    r = run("why", "--last", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["items"] == [] and "TOP SECRET" not in r.output
    assert len(out["problems"]) == 9, out["problems"]
    assert not (tmp_path / "x").exists()
    text = run("why", "--last").output
    assert "Note: not a memory file in the record" in text and "Traceback" not in text


def test_a_sha256_vault_keeps_blob_ids_git_resolves(tmp_path, run, fake_anthropic):
    """A vault whose repository names objects by SHA-256 (`git init --object-format=
    sha256`): a reply's record names the files it was shown by the ids git gives them
    there, so `agent why --last` tells their lines back."""
    root = tmp_path / "sha256"
    p = subprocess.run(["git", "init", "-q", "--object-format=sha256", "-b", "main", str(root)],
                       capture_output=True, text=True)
    if p.returncode:
        pytest.skip(f"this git makes no SHA-256 repository: {p.stderr.strip()}")
    init_vault(root)
    user = root / "USER.md"
    user.write_text(user.read_text() + "- Alice lives in Lisbon\n")
    assert run("note", "planted", vault_path=root).exit_code == 0
    fake_anthropic.add(reply("Lisbon, Alice."))
    assert run("chat", "-m", "Where do I live?", vault_path=root).exit_code == 0

    answer = [x for x in transcript_of(root) if x["role"] == "assistant"][-1]
    blobs = dict(f[:2] for f in answer["used"]["f"])
    whole = subprocess.run(["git", "hash-object", "USER.md"], cwd=root, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert len(whole) == 64 and blobs["USER.md"] == whole[:len(blobs["USER.md"])]
    r = run("why", "--last", "--json", vault_path=root)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["problems"] == []
    item = {i["text"]: i for i in out["items"]}["- Alice lives in Lisbon"]
    assert item["detail"]["blob"] == whole and item["taught"]["kind"] == "hand edit"


def transcript_of(root, session="cli/default"):
    files = sorted((root / "sessions" / session).glob("*.jsonl"))
    return [json.loads(x) for f in files for x in f.read_text().splitlines()]
