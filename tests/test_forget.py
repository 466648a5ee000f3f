"""`agent forget` (issue 26): a phrase planted in a chat message, a note, MEMORY.md
(through the model's remember) and an archive entry, synced to a second clone through a
bare remote, is gone from both clones after one forget and one sync each: from
`git log --all -p`, from every object, from `agent search` and from the files."""

from __future__ import annotations

import json

import pytest


from agent.vault.change import Change
from conftest import subjects
from fakeanthropic import json_reply, reply, text, tool_use
from helpers import PHRASE, agent, clone, every_object, holds

def plant(fake_anthropic, vault):
    fake_anthropic.add(reply(tool_use("remember", {"text": PHRASE, "target": "memory"})),
                       reply(text("Remembered.")))
    agent(vault.root, "chat", "-m", f"please remember: {PHRASE}")
    agent(vault.root, "note", f"told the agent {PHRASE}")
    fake_anthropic.add(json_reply({"topic": "The garden", "summary": f"They said {PHRASE}.",
                                   "importance": 0.5}))
    agent(vault.root, "archive")
    assert PHRASE in (vault.root / "MEMORY.md").read_text()
    assert list((vault.root / "archive").rglob("*.md"))


@pytest.mark.slow
def test_forget_reaches_both_clones_and_keeps_unsynced_work(fake_anthropic, tmp_path, vault,
                                                            remote):  # noqa: F811
    plant(fake_anthropic, vault)
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    assert holds(b)                            # b has it, and its search index too
    agent(b.root, "note", f"b knows {PHRASE} as well")       # b's work, not yet synced
    agent(b.root, "note", "b's own line survives")
    before = vault.git("log", "--format=%an|%ae|%ad|%cd|%s").splitlines()

    r = agent(vault.root, "forget", "--yes", PHRASE)
    assert "Found in:" in r.output and "MEMORY.md: 1 line" in r.output
    assert "remote: origin/main rewritten (--force-with-lease)" in r.output
    for place in ("files", "git grep, all refs", "every object", "search index and vectors"):
        assert f"  {place}: 0  ✓" in r.output
    assert holds(vault) == []
    # Authors, dates and messages are kept (a subject that held the phrase loses it);
    # one commit says what was done.
    after = vault.git("log", "--format=%an|%ae|%ad|%cd|%s").splitlines()
    assert after[0].endswith("|forget: a phrase removed from 4 files, 3 commits rewritten")
    assert after[1:] == [line.replace(PHRASE, "[forgotten]") for line in before]
    assert any("[forgotten]" in line for line in after[1:])
    tomb = (vault.root / ".forgotten").read_text()
    assert "fernwood" not in tomb and json.loads(tomb)["forgotten"][0]["length"] == len(PHRASE)
    remote_objects = every_object(remote)     # a remote on this machine is pruned too
    assert PHRASE.encode() not in remote_objects
    assert json.dumps(PHRASE)[1:-1].encode() not in remote_objects

    r = agent(b.root, "sync")                # b's person decides: held until then
    assert f"held: forgotten phrase {json.loads(tomb)['forgotten'][0]['id']} " \
           f"({len(PHRASE)} characters, would rewrite 5 commits here)" in r.output
    assert "nothing was merged or pushed" in r.output and holds(b)
    r = agent(b.root, "sync", "accept")
    assert "Accepted forgotten phrase" in r.output and "history is rewritten" in r.output
    agent(b.root, "sync")
    agent(vault.root, "sync")
    for v in (vault, b):
        assert holds(v) == [], v.root
        daily = "".join(p.read_text() for p in (v.root / "memory").glob("*.md"))
        assert "b's own line survives" in daily and "b knows [forgotten] as well" in daily
    assert vault.head() == b.head()
    assert "[forgotten]" in (b.root / "MEMORY.md").read_text()


def test_forget_asks_first_and_changes_nothing_without_a_yes(vault, run):
    run("note", "my locker is 7731 at the gym")
    head = vault.head()
    r = run("forget", "locker is 7731")
    assert r.exit_code == 1 and "confirm on a terminal, or pass --yes" in r.output
    assert vault.head() == head and "7731" in vault.git("log", "-p")
    r = run("forget", "nothing like this anywhere")
    assert r.exit_code == 0 and "Nothing to forget" in r.output
    assert run("forget", "--yes", "ab").exit_code == 1


def test_forget_one_fact_and_one_message(fake_anthropic, vault, run):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Bank PIN hint: the blue door 88\n"
                                          "- Likes tea\n")
    fake_anthropic.add(reply("ok"))
    run("chat", "-m", "my passport number is X1234567")
    r = run("forget", "--yes", "--fact", "bank pin")
    assert r.exit_code == 0, r.output
    assert "the blue door 88" not in vault.git("log", "--all", "-p")
    assert "Likes tea" in (vault.root / "MEMORY.md").read_text()
    line = next(json.loads(x) for f in (vault.root / "sessions").rglob("*.jsonl")
                for x in f.read_text().splitlines() if "passport" in x)
    r = run("forget", "--yes", "--message", line["id"])
    assert r.exit_code == 0, r.output
    assert "X1234567" not in vault.git("log", "--all", "-p")
    assert subjects(vault)[0].startswith("forget: a phrase removed from 1 file,")


def test_a_remote_that_moved_is_never_overwritten(tmp_path, vault, remote):  # noqa: F811
    agent(vault.root, "note", "the wifi password is orchid-lantern")
    agent(vault.root, "sync")
    b = clone(tmp_path, remote, "b")
    agent(b.root, "note", "b pushed this meanwhile")
    agent(b.root, "sync")
    # A forgets without fetching first: its push must not drop b's commit.
    from agent.ops import forget as op
    from datetime import datetime
    from agent.vault.repo import Vault
    receipt = op.forget(Vault.open(vault.root), "orchid-lantern",
                        datetime.now().astimezone(), sync_first=False)
    assert receipt.pushed == "" and "the next `agent sync` rewrites it" in receipt.push_problem
    assert b"b pushed this meanwhile" in every_object(remote)
    r = agent(vault.root, "sync")            # puts the remote right, keeping b's commit
    assert "forget: applied 1" in r.output
    assert "held: forgotten phrase" in agent(b.root, "sync").output
    agent(b.root, "sync", "accept")
    agent(b.root, "sync")
    for v in (vault, b):
        assert holds(v, "orchid-lantern", "orchid") == []
        assert "b pushed this meanwhile" in v.git("log", "--all", "-p")


def test_the_prune_by_hand_drops_what_no_ref_reaches(vault):
    """The fallback of the prune (where /dev/null is no device, git's own repack cannot
    run): every reachable object kept in one pack, every other object gone, and git
    finds nothing wrong."""
    from agent.vault import prune

    with vault.locked():
        vault.write_text("kept.md", "kept\n")
        vault.commit(Change("edit", "a kept file"))
    kept = vault.head()
    blob = vault.git("hash-object", "-w", "--stdin", input="never reachable\n").strip()
    vault.git("repack", "-q")                      # some of it packed, some loose
    vault.git("reflog", "expire", "--expire=now", "--all")
    prune.repack_by_hand(vault.root, vault.git_dir)
    assert vault.git("cat-file", "-t", blob, check=False).strip() == ""
    assert vault.git("cat-file", "-t", kept).strip() == "commit"
    assert len(list((vault.git_dir / "objects" / "pack").glob("*.pack"))) == 1
    assert vault.git("fsck", "--no-progress", "--no-dangling").strip() == ""
