"""Memory you approve: a dream's edits wait for review on a git branch `dream/<run>`,
and `agent review` accepts, rejects or edits them. Real CLI, real git, the fake API."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import subjects
from dreamkit import finding, op, set_review, write_entries
from fakeanthropic import json_reply
from helpers import KYOTO, LISBON, MEMORY, USER, agent, clone, read, script, seed

@pytest.fixture
def seeded(vault):
    return seed(vault)


@pytest.fixture
def proposed(seeded, run, fake_anthropic):
    """The seeded vault after a dream that proposed USER.md's update (dream/1-2)."""
    script(fake_anthropic)
    assert run("dream", "--sync").exit_code == 0
    return seeded


def trailers(vault, rev="HEAD") -> dict[str, str]:
    out = vault.git("log", "-1", "--format=%(trailers:unfold,only)", rev)
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def branches(vault) -> list[str]:
    return vault.git("for-each-ref", "--format=%(refname:short)", "refs/heads/dream").split()


def test_changes_wait_on_a_branch_and_accept_lands_them_with_the_whole_story(seeded, run, fake_anthropic):
    vault = seeded
    script(fake_anthropic)
    r = run("dream", "--sync")
    assert r.exit_code == 0, r.output
    # The new fact lands on main; the update of an existing line waits on a real branch.
    assert read(vault, "MEMORY.md") == MEMORY + "\n## Travel\n\n" + KYOTO + "\n"
    assert read(vault, "USER.md") == USER
    assert subjects(vault)[0] == "dream: +1 fact, 0 updated, 0 removed, 1 proposed (archive 1..2)"
    assert branches(vault) == ["dream/1-2"]
    assert "1 edit waits for review on branch dream/1-2" in r.output
    assert "Proposed for review: update in USER.md: - Lives in Berlin" in r.output
    diff = vault.git("diff", "main", "dream/1-2")
    assert "-- Lives in Berlin" in diff and f"+{LISBON}" in diff
    assert vault.git("diff", "--stat", "main", "dream/1-2").count("|") == 1   # USER.md only
    assert vault.git("rev-parse", "dream/1-2~1").strip() == vault.head()
    assert not vault.git("status", "--porcelain").strip()

    assert "review:       1 proposal waits for review (`agent review`)" in run("dream", "--status").output
    r = run("review")
    assert r.exit_code == 0, r.output
    assert "1 proposal waits for review (on dream/1-2):" in r.output
    assert "1. update USER.md" in r.output and "[dream 1..2, 1 of 1]" in r.output
    assert "old: - Lives in Berlin" in r.output and f"new: {LISBON}" in r.output
    assert "why: archive:2: moved last week" in r.output
    assert 'from: archive 2 (topic 2): "I moved from Berlin to Lisbon last week!"' in r.output
    items = [json.loads(x) for x in run("review", "--json").output.splitlines()]
    assert [(i["number"], i["id"], i["op"], i["file"], i["old"], i["new"], i["archive"], i["stale"])
            for i in items] == [(1, "1..2#1", "update", "USER.md", "- Lives in Berlin", LISBON, [2], "")]

    r = run("review", "accept", "1")
    assert r.exit_code == 0, r.output
    assert read(vault, "USER.md") == USER.replace("- Lives in Berlin", LISBON)
    assert subjects(vault)[0] == "review: accept 1 of 1 from dream 1..2"
    t = trailers(vault)
    assert t["Run"] == "1..2" and t["Accepted"] == "1"
    assert t["Reviewer"].endswith(">")
    assert "Nothing waits on dream/1-2 any more: branch deleted." in r.output
    assert branches(vault) == []
    assert run("review").output.strip() == "Nothing waits for review."
    assert run("review", "accept", "--all").output.strip() == "Nothing waits for review."
    assert "review:" not in run("dream", "--status").output

    # `agent why` tells the whole story: the person's decision, the proposal, the dream
    # run, the archive entry and the message.
    r = run("why", "Lisbon")
    assert r.exit_code == 0, r.output
    assert "accepted in review by " in r.output
    assert "proposal 1 of the dream over archive 1..2 (branch dream/1-2" in r.output
    assert "I moved from Berlin to Lisbon last week!" in r.output
    story = json.loads(run("why", "--json", "Lisbon").output)
    step = story["steps"][0]
    assert step["kind"] == "review" and step["source"]["archive_ids"] == [2]
    assert story["steps"][1]["text"] == "- Lives in Berlin"     # the version before


def test_review_all_leaves_main_untouched_and_a_rejection_sticks(seeded, run, fake_anthropic):
    vault = seeded
    set_review(vault, "all")
    before = {f: read(vault, f) for f in ("MEMORY.md", "USER.md")}
    script(fake_anthropic)
    assert run("dream", "--sync").exit_code == 0
    assert {f: read(vault, f) for f in before} == before
    assert subjects(vault)[0] == "dream: +0 facts, 0 updated, 0 removed, 2 proposed (archive 1..2)"
    diff = vault.git("diff", "main", "dream/1-2")
    assert f"+{KYOTO}" in diff and f"+{LISBON}" in diff

    r = run("review", "accept", "1")
    assert r.exit_code == 0, r.output
    assert subjects(vault)[0] == "review: accept 1 of 2 from dream 1..2"
    # The branch is rebuilt on main: it now shows only what still waits.
    diff = vault.git("diff", "main", "dream/1-2")
    assert KYOTO not in diff and f"+{LISBON}" in diff
    assert vault.git("rev-parse", "dream/1-2~1").strip() == vault.head()

    r = run("review", "reject", "2", "--because", "I moved back to Berlin")
    assert r.exit_code == 0, r.output
    assert subjects(vault)[0] == "review: reject 1 of 2 from dream 1..2"
    assert trailers(vault)["Rejected"] == "2"
    assert branches(vault) == []
    assert read(vault, "USER.md") == USER
    rej = [json.loads(x) for x in read(vault, ".dream_rejected.jsonl").splitlines()]
    assert [(x["text"], x["reason"], x["run"]) for x in rej] == [
        ("lives in lisbon (since 2026-11-13)", "I moved back to Berlin", "1..2")]

    # A later dream that proposes the same statement has it dropped, and says so; its
    # analyst was shown the rejection.
    write_entries(vault, ["The user mentioned Lisbon again."])
    fake_anthropic.add(json_reply({"findings": [
        finding("The user lives in Lisbon", kind="update", file="USER.md", evidence=["archive:3"])]}))
    fake_anthropic.add(json_reply({"ops": [
        op("update", "USER.md", old="- Lives in Berlin", new="- Lives in Lisbon (since 2026-11-13).",
           reason="archive:3: Lisbon again")]}))
    r = run("dream", "--sync")
    assert r.exit_code == 0, r.output
    assert "Dropped update in USER.md: - Lives in Lisbon (since 2026-11-13). (rejected in review " \
           "of dream 1..2: I moved back to Berlin)" in r.output
    assert branches(vault) == []
    assert "Dropped before review: 1" in vault.git("log", "-1", "--format=%B")
    analyst = fake_anthropic.calls("/v1/messages")[-2].body
    tail = analyst["messages"][0]["content"][-1]["text"]
    assert "Lives in Lisbon (since 2026-11-13)" in tail and "I moved back to Berlin" in tail


def test_a_proposal_whose_line_changed_by_hand_is_stale_and_not_applied(proposed, run):
    vault = proposed
    (vault.root / "USER.md").write_text(USER.replace("- Lives in Berlin", "- Lives in Porto"))
    r = run("review")
    assert "STALE" in r.output and "edited or removed since the dream" in r.output
    head = vault.head()
    r = run("review", "accept", "1")
    assert r.exit_code == 1
    assert "Not applied 1 (stale" in r.output
    assert "- Lives in Porto" in read(vault, "USER.md") and LISBON not in read(vault, "USER.md")
    assert vault.git("log", "-1", "--format=%s").strip() != "review: accept 1 of 1 from dream 1..2"
    assert vault.git("log", "--format=%s", f"{head}..HEAD").strip() in ("", "edit: USER.md by hand")
    assert run("review", "reject", "1").exit_code == 0
    assert branches(vault) == []


def test_edit_applies_the_text_from_the_editor(proposed, run, tmp_path, monkeypatch):
    vault = proposed
    editor = tmp_path / "ed.py"
    editor.write_text("import sys\np = sys.argv[1]\nt = open(p).read()\n"
                      "open(p, 'w').write(t.replace('Lisbon', 'Lisbon, Alfama'))\n")
    monkeypatch.setenv("EDITOR", f"{sys.executable} {editor}")
    r = run("review", "edit", "1")
    assert r.exit_code == 0, r.output
    assert "- Lives in Lisbon, Alfama (since 2026-11-13)" in read(vault, "USER.md")
    assert subjects(vault)[0] == "review: accept 1 of 1 from dream 1..2 (edited)"
    story = json.loads(run("why", "--json", "Alfama").output)
    assert story["steps"][0]["source"]["proposal"]["proposed"] == LISBON


def test_bad_numbers_and_review_off(seeded, run, fake_anthropic):
    vault = seeded
    r = run("review", "accept", "3")
    assert r.exit_code == 1 and "nothing waits for review" in r.output
    assert run("review", "accept").exit_code == 2
    set_review(vault, "off")
    script(fake_anthropic)
    assert run("dream", "--sync").exit_code == 0
    assert LISBON in read(vault, "USER.md") and branches(vault) == []


# ---- review where the person is: Telegram ------------------------------------------------

def test_telegram_review_with_buttons_only_for_allowed_users(vault, run, fake_anthropic,
                                                             fake_telegram):
    from helpers import ANA, EVE, Running, telegram_vault

    telegram_vault(vault, fake_telegram, fake_anthropic)
    assert run("dream", "--sync").exit_code == 0
    tg = Running(vault, fake_telegram)
    try:
        fake_telegram.message(ANA, "/review")
        fake_telegram.wait_for(lambda: fake_telegram.buttons(ANA), what="a message with buttons")
        [keyboard] = fake_telegram.buttons(ANA)
        assert [b["text"] for b in keyboard[0]] == ["Accept", "Reject"]
        accept = keyboard[0][0]["callback_data"]
        assert accept == "rv:a:1..2#1"
        shown = [m["text"] for m in fake_telegram.sent(ANA) if m.get("reply_markup")][0]
        assert "old: - Lives in Berlin" in shown and f"new: {LISBON}" in shown

        # A stranger's tap (a forwarded message, a guessed payload) changes nothing.
        head = vault.head()
        fake_telegram.press(EVE, accept)
        fake_telegram.wait_for(lambda: fake_telegram.answers(), what="an answer to the tap")
        assert fake_telegram.answers()[0]["text"] == "This bot is private."
        assert vault.head() == head and read(vault, "USER.md") == USER

        fake_telegram.press(ANA, accept)
        fake_telegram.wait_for(lambda: len(fake_telegram.answers()) >= 2, what="a second answer")
        assert fake_telegram.answers()[1]["text"] == \
            "Accepted: review: accept 1 of 1 from dream 1..2"
        assert LISBON in read(vault, "USER.md")
        assert trailers(vault)["Reviewer"] == f"telegram user {ANA} (@ana)"
        assert branches(vault) == []
        # Tapped again (an old message): it is decided already, and says so.
        fake_telegram.press(ANA, accept)
        fake_telegram.wait_for(lambda: len(fake_telegram.answers()) >= 3, what="a third answer")
        assert "nothing waits for review" in fake_telegram.answers()[2]["text"]
    finally:
        tg.stop()


# ---- review where the person is: MCP ---------------------------------------------------

@pytest.mark.slow
def test_mcp_review_list_and_decide_call_the_same_operation(proposed, run):
    from mcp import MCPError
    from helpers import drive, text_of

    vault = proposed

    async def read_only(c):
        names = {t.name for t in (await c.list_tools()).tools}
        listed = text_of(await c.call_tool("review_list", {}))
        try:
            await c.call_tool("review_decide", {"ids": "1..2#1", "decision": "accept"})
        except MCPError as e:
            return names, listed, e.message
        return names, listed, None
    names, listed, refused = drive(vault, read_only, "--read-only")
    assert "review_list" in names and "review_decide" not in names
    assert json.loads(listed)[0]["id"] == "1..2#1"
    assert refused and "--read-only" in refused
    assert read(vault, "USER.md") == USER

    async def decide(c):
        try:
            await c.call_tool("review_decide", {"ids": "9..9#1", "decision": "accept"})
        except MCPError as e:
            bad = e.message
        said = text_of(await c.call_tool("review_decide",
                                         {"ids": "1..2#1", "decision": "reject",
                                          "because": "not true"}))
        return bad, said
    bad, said = drive(vault, decide, "--review")
    assert "No proposal '9..9#1' waits for review (review_list shows 1)" in bad
    assert "Rejected 1..2#1" in said and "review: reject 1 of 1 from dream 1..2" in said
    assert subjects(vault)[0] == "review: reject 1 of 1 from dream 1..2"
    assert trailers(vault)["Reviewer"] == "mcp client Claude Code"
    assert read(vault, "USER.md") == USER and branches(vault) == []


# ---- sync carries proposals --------------------------------------------------------------

def test_sync_carries_proposal_branches_and_a_decision_closes_them_everywhere(
        tmp_path, seeded, run, fake_anthropic):

    vault = seeded
    bare = tmp_path / "remote.git"
    import subprocess
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    vault.git("remote", "add", "origin", str(bare))
    script(fake_anthropic)
    assert run("dream", "--sync").exit_code == 0
    agent(vault.root, "sync")
    remote_branches = lambda: subprocess.run(  # noqa: E731
        ["git", "-C", str(bare), "for-each-ref", "--format=%(refname:short)", "refs/heads/dream"],
        capture_output=True, text=True, check=True).stdout.split()
    assert remote_branches() == ["dream/1-2"]

    b = clone(tmp_path, bare, "b")
    agent(b.root, "sync")
    assert branches(b) == ["dream/1-2"]
    assert b.git("rev-parse", "dream/1-2").strip() == vault.git("rev-parse", "dream/1-2").strip()
    listed = [json.loads(x) for x in agent(b.root, "review", "--json").output.splitlines()]
    assert [i["id"] for i in listed] == ["1..2#1"]

    agent(b.root, "review", "accept", "1")
    assert branches(b) == []
    agent(b.root, "sync")
    assert remote_branches() == []

    agent(vault.root, "sync")
    assert branches(vault) == []
    assert LISBON in read(vault, "USER.md")
    assert agent(vault.root, "review").output.strip() == "Nothing waits for review."


def test_serves_nightly_dream_tells_the_telegram_chat_how_many_wait(vault, fake_anthropic,
                                                                    fake_telegram):
    from datetime import datetime, timedelta

    from agent import schedule as sched
    from helpers import ANA, Running, server_at, telegram_vault

    telegram_vault(vault, fake_telegram, fake_anthropic)
    fake_anthropic.batch_polls = 0
    tg = Running(vault, fake_telegram)
    try:
        fake_telegram.wait_for(lambda: tg.channel.connected.is_set(), what="the channel up")
        night = datetime(2026, 11, 21, 2, 59, tzinfo=sched.local_zone())
        s, clock = server_at(vault, night, compact=False)
        s.outbox.senders["telegram"] = tg.channel
        for minutes in (0, 1.1, 3, 5, 7):
            clock.t = night + timedelta(minutes=minutes)
            s.step(clock.t)
        assert subjects(vault)[0].endswith("1 proposed (archive 1..2)")
        [told] = fake_telegram.wait_sent(ANA)
        first, *_ = told["text"].splitlines()
        assert first == "The dream left 1 proposal for your review: /review shows it."
    finally:
        tg.stop()


def test_undoing_a_dream_withdraws_its_proposals(proposed, run):
    vault = proposed
    assert branches(vault) == ["dream/1-2"]
    r = run("undo")
    assert r.exit_code == 0, r.output
    assert run("review").output.strip() == "Nothing waits for review."
    assert branches(vault) == []


def test_completion_offers_the_numbers_waiting_for_review(proposed, monkeypatch):
    from helpers import complete

    assert complete(proposed, monkeypatch, "review", "accept", "") == ["1"]
    assert complete(proposed, monkeypatch, "review", "edit", "") == ["1"]


# ---- review holds whatever the mix of ops (issue 35, item 5) --------------------------------


def _dream(vault, run, server, ops, mode):
    if mode != "changes":                           # the default, which a new vault names
        set_review(vault, mode)
    server.add(json_reply({"findings": [
        finding("The user lives in Lisbon", kind="update", file="USER.md",
                evidence=["archive:2"])]}))
    server.add(json_reply({"ops": ops}))
    r = run("dream", "--sync")
    assert r.exit_code == 0, r.output
    return [json.loads(x) for x in run("review", "--json").output.splitlines()]


@pytest.mark.parametrize("mode", ["changes", "all"])
@pytest.mark.parametrize("add_first", [False, True])
def test_an_add_of_the_text_an_update_brings_waits_with_the_update(seeded, run, fake_anthropic,
                                                                    mode, add_first):
    vault = seeded
    update = op("update", "USER.md", old="- Lives in Berlin", new=LISBON, reason="archive:2")
    add = op("add", "USER.md", section="About", new=LISBON, reason="archive:2")
    items = _dream(vault, run, fake_anthropic, [add, update] if add_first else [update, add],
                   mode)
    assert read(vault, "USER.md") == USER                  # nothing reached main
    assert [(i["op"], i["new"]) for i in items] == [("update", LISBON)]
    assert vault.git("show", "dream/1-2:USER.md").count("Lisbon") == 1
    assert run("review", "accept", "1").exit_code == 0
    assert read(vault, "USER.md") == USER.replace("- Lives in Berlin", LISBON)


def test_review_all_keeps_a_fact_added_twice_off_main(seeded, run, fake_anthropic):
    vault = seeded
    twice = [op("add", section="Travel", new=KYOTO, reason="archive:1"),
             op("add", section="Travel", new=KYOTO + ".", reason="archive:1")]
    items = _dream(vault, run, fake_anthropic, twice, "all")
    assert read(vault, "MEMORY.md") == MEMORY and read(vault, "USER.md") == USER
    assert [(i["op"], i["new"]) for i in items] == [("add", KYOTO)]
    assert vault.git("show", "dream/1-2:MEMORY.md").count("Kyoto") == 1


def test_numbers_stay_with_their_proposals_and_run_ids_are_accepted(seeded, run,
                                                                    fake_anthropic):
    vault = seeded
    oolong = "- Drinks oolong in the afternoon"
    items = _dream(vault, run, fake_anthropic, [
        op("add", section="Travel", new=KYOTO, reason="archive:1"),
        op("update", "USER.md", old="- Lives in Berlin", new=LISBON, reason="archive:2"),
        op("add", "USER.md", section="About", new=oolong, reason="archive:2")], "all")
    assert [(i["number"], i["id"], i["new"]) for i in items] == [
        (1, "1..2#1", KYOTO), (2, "1..2#2", LISBON), (3, "1..2#3", oolong)]
    assert run("review", "accept", "1").exit_code == 0
    r = run("review", "reject", "3")                       # what the list showed as 3
    assert r.exit_code == 0, r.output
    rejected = [json.loads(x)["text"] for x in read(vault, ".dream_rejected.jsonl").splitlines()]
    assert rejected == ["drinks oolong in the afternoon"]
    listed = run("review").output
    assert "2. update USER.md" in listed and "1. " not in listed and "3. " not in listed
    r = run("review", "accept", "1..2#2")                  # the stable id
    assert r.exit_code == 0, r.output
    assert LISBON in read(vault, "USER.md") and KYOTO in read(vault, "MEMORY.md")
    assert oolong not in read(vault, "USER.md") and branches(vault) == []


def test_a_card_quotes_the_message_that_states_its_own_fact(vault, run, fake_anthropic):
    (vault.root / "USER.md").write_text(USER)
    vault.git("add", "-A")
    vault.git("commit", "-q", "-m", "edit: facts by hand")
    write_entries(vault, [{"summary": "Moved to Lisbon; a sister in Porto.", "messages": [
        "I moved from Berlin to Lisbon last week!", "Congratulations on the move.",
        "My sister Ana works as a nurse in Porto.", "Good to know."]}])
    sister = "- Sister Ana is a nurse in Porto"
    items = _dream(vault, run, fake_anthropic, [
        op("update", "USER.md", old="- Lives in Berlin", new=LISBON, reason="archive:1"),
        op("add", "USER.md", section="About", new=sister, reason="archive:1"),
        op("add", "USER.md", section="About", new="- Plays the cello", reason="archive:1")],
        "all")
    cards = {i["new"]: i["source"] for i in items}
    assert not any(i["guess"] for i in items)           # the dream named archive 1
    assert cards[LISBON] == 'archive 1 (topic 1): "I moved from Berlin to Lisbon last week!"'
    assert cards[sister] == 'archive 1 (topic 1): "My sister Ana works as a nurse in Porto."'
    assert cards["- Plays the cello"] == ('archive 1 (topic 1), no message of it states this '
                                          'exactly; it begins: "I moved from Berlin to Lisbon '
                                          'last week!"')
    assert 'from: archive 1 (topic 1): "My sister Ana works as a nurse in Porto."' \
        in run("review").output


# ---- with review = "all", a chat turn's writes to memory wait too (issue 35, item 5) --------


def test_review_all_holds_a_chat_turns_writes_to_memory_for_review(seeded, run, fake_anthropic,
                                                                   fixed_now):
    from fakeanthropic import reply, tool_use

    from agent.vault.repo import Vault

    vault = seeded
    set_review(vault, "all")
    before = {f: read(vault, f) for f in ("MEMORY.md", "USER.md")}
    counted = json.loads(run("stats", "--json").output)["total"]["proposals"]
    veg = "- The user is vegetarian"
    fake_anthropic.add(
        reply(tool_use("remember", {"text": "The user is vegetarian", "target": "user",
                                    "section": "Food"}, id="t1"),
              tool_use("edit_file", {"path": "MEMORY.md", "old": "- The team uses Postgres 16",
                                     "new": "- The team uses Postgres 17"}, id="t2"),
              tool_use("write_file", {"path": "USER.md",
                                      "content": USER + "- Has a cat named Miso\n"}, id="t3")),
        reply("Both wait for your review."))
    r = run("chat", "-m", "Remember that I'm vegetarian; we moved to Postgres 17; I have a cat.")
    assert r.exit_code == 0, r.output
    results = [b for b in fake_anthropic.calls()[-1].body["messages"][-1]["content"]
               if b.get("type") == "tool_result"]
    assert all("held for review" in str(b["content"]) for b in results), results
    assert not any(b.get("is_error") for b in results)
    # Nothing reached main's memory files, now or after archiving and dreaming.
    assert {f: read(vault, f) for f in before} == before
    fake_anthropic.add(json_reply({"topic": "Food and Postgres", "summary": "Vegetarian.",
                                   "importance": 0.5}))
    assert run("archive").exit_code == 0
    fake_anthropic.add(json_reply({"findings": []}))
    assert run("dream", "--sync").exit_code == 0
    assert {f: read(vault, f) for f in before} == before
    assert {f: vault.git("show", f"HEAD:{f}") for f in before} == before

    items = [json.loads(x) for x in run("review", "--json").output.splitlines()]
    chat = [i for i in items if i["run"].startswith("chat-")]
    host = Vault(vault.root).host()
    run_id = f"chat-{host}-{fixed_now:%Y-%m-%d}"
    # The three tools ran at once: their numbers follow the order they were staged in.
    assert sorted(i["id"] for i in chat) == [f"{run_id}#1", f"{run_id}#2", f"{run_id}#3"]
    assert sorted((i["op"], i["file"], i["old"], i["new"]) for i in chat) == [
        ("add", "USER.md", "", "- Has a cat named Miso"), ("add", "USER.md", "", veg),
        ("update", "MEMORY.md", "- The team uses Postgres 16", "- The team uses Postgres 17")]
    assert {i["source"] for i in chat} == {"written in chat (cli/default turn 3), held for review"}
    veg_id = next(i["id"] for i in chat if i["new"] == veg)
    pg_id = next(i["id"] for i in chat if i["op"] == "update")
    assert branches(vault)[-1] == f"dream/{run_id}"
    assert f"+{veg}" in vault.git("diff", "main", f"dream/{run_id}")
    listed = run("review").output
    assert f"[{run_id}, 1 of 3]" in listed

    r = run("review", "accept", veg_id)
    assert r.exit_code == 0, r.output
    assert read(vault, "USER.md").endswith("## Food\n\n" + veg + "\n")
    assert subjects(vault)[0] == f"review: accept 1 of 3 from {run_id}"
    assert run("review", "reject", pg_id).exit_code == 0
    assert "Postgres 17" not in read(vault, "MEMORY.md")
    # Memory health counts what chat held as proposals made, and what became of them.
    now = json.loads(run("stats", "--json").output)["total"]["proposals"]
    assert [now[k] - counted[k] for k in ("made", "accepted", "rejected")] == [3, 1, 1]


@pytest.mark.slow
def test_review_all_holds_an_mcp_clients_remember_for_review(seeded, run, fixed_now):
    from helpers import drive, text_of

    vault = seeded
    set_review(vault, "all")

    async def steps(c):
        return text_of(await c.call_tool("remember", {"text": "Prefers window seats",
                                                      "target": "user", "section": "Travel"}))
    said = drive(vault, steps)
    assert "Not written to USER.md: - Prefers window seats is held for review" in said
    assert read(vault, "USER.md") == USER
    assert subjects(vault)[0] == "mcp(claude-code): propose 1 fact for USER.md (held for review)"
    [item] = [json.loads(x) for x in run("review", "--json").output.splitlines()]
    assert item["new"] == "- Prefers window seats" and item["section"] == "Travel"
    assert item["source"] == "asked to remember (MCP client Claude Code), held for review"
    assert item["remote"] == ""
    assert run("review", "accept", item["id"]).exit_code == 0
    assert "## Travel\n\n- Prefers window seats\n" in read(vault, "USER.md")


# ---- a card whose source the dream did not name (issue 43, item 6) -------------------------


def _two_imported_conversations(vault, run, tmp_path, fake_anthropic) -> dict[str, int]:
    """ChatGPT's 'Trip to Kyoto' and Claude's 'Marathon training', imported and archived:
    their archive ids by title."""
    def gpt(cid, title, texts):
        nodes, parent = {"root": {"id": "root", "parent": None, "children": [],
                                  "message": None}}, "root"
        for n, text in enumerate(texts):
            nid = f"{cid}-{n}"
            nodes[parent]["children"] = [nid]
            nodes[nid] = {"id": nid, "parent": parent, "children": [], "message": {
                "id": nid, "author": {"role": "user" if n % 2 == 0 else "assistant"},
                "create_time": 1_700_000_000 + n, "weight": 1.0,
                "content": {"content_type": "text", "parts": [text]}, "metadata": {}}}
            parent = nid
        return {"id": cid, "title": title, "create_time": 1_700_000_000,
                "update_time": 1_700_000_100, "current_node": parent, "mapping": nodes}
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "conversations.json").write_text(json.dumps([gpt("c-kyoto", "Trip to Kyoto", [
        "Plan a trip to Kyoto in April, I want to see the temples and run along the river.",
        "Early April is cherry blossom season; book the ryokan now."])]))
    claude = [{"uuid": "u-run", "name": "Marathon training", "summary": "",
               "created_at": "2024-03-01T09:00:00Z", "updated_at": "2024-03-01T09:05:00Z",
               "chat_messages": [
                   {"uuid": "m1", "sender": "human", "created_at": "2024-03-01T09:00:00Z",
                    "text": "I signed up for the Lisbon marathon on 12 October; my target is "
                            "3 hours 45 minutes.", "content": [], "attachments": [],
                    "files": []},
                   {"uuid": "m2", "sender": "assistant", "created_at": "2024-03-01T09:01:00Z",
                    "text": "Then build up to 32 km long runs by September.", "content": [],
                    "attachments": [], "files": []}]}]
    (tmp_path / "claude").mkdir()
    (tmp_path / "claude" / "conversations.json").write_text(json.dumps(claude))
    for folder, fmt in (("gpt", "chatgpt"), ("claude", "claude")):
        r = run("import", "--format", fmt, str(tmp_path / folder / "conversations.json"))
        assert r.exit_code == 0, r.output
    for topic in ("Kyoto in April", "Marathon training"):      # the order they were lived
        fake_anthropic.add(json_reply({"topic": topic, "summary": topic, "importance": 0.5}))
    assert run("archive", "--all").exit_code == 0
    ids = {}
    for p in (vault.root / "archive").rglob("*.md"):
        ids["Kyoto" if "chatgpt" in p.read_text() else "Marathon"] = int(p.stem)
    return ids


def test_a_card_whose_source_the_dream_did_not_name_says_its_guess_is_a_guess(
        vault, run, tmp_path, fake_anthropic):
    """The analyst cited no evidence: each card names the entry of the run that holds its
    fact (not the run's first entry for every card), says that is a best guess, and a
    fact no entry holds is not pinned on one."""
    ids = _two_imported_conversations(vault, run, tmp_path, fake_anthropic)
    set_review(vault, "all")
    marathon = "- Runs the Lisbon marathon on 12 October, aiming for 3 hours 45 minutes"
    kyoto = "- Plans a trip to Kyoto in April to see the temples"
    cello = "- Plays the cello"
    fake_anthropic.add(json_reply({"findings": [
        finding(marathon[2:], evidence=[]), finding(kyoto[2:], evidence=[]),
        finding(cello[2:], evidence=[])]}))
    fake_anthropic.add(json_reply({"ops": [
        op("add", section="Sport", new=marathon, reason="a race is planned"),
        op("add", section="Travel", new=kyoto, reason="a trip is planned"),
        op("add", section="Music", new=cello, reason="mentioned")]}))
    assert run("dream", "--sync").exit_code == 0
    items = {i["new"]: i for i in
             (json.loads(x) for x in run("review", "--json").output.splitlines())}
    run_label = f"dream {min(ids.values())}..{max(ids.values())}"
    assert items[marathon]["guess"] and items[kyoto]["guess"] and items[cello]["guess"]
    assert items[marathon]["source"] == (
        f"best guess (the dream named no source): archive {ids['Marathon']} (Marathon "
        f"training), from Claude: 'Marathon training' (import/claude-u-run): \"I signed up "
        f"for the Lisbon marathon on 12 October; my target is 3 hours 45 minutes.\"")
    assert items[kyoto]["source"].startswith(
        f"best guess (the dream named no source): archive {ids['Kyoto']} (Kyoto in April), "
        f"from ChatGPT: 'Trip to Kyoto' (import/chatgpt-c-kyoto): \"Plan a trip to Kyoto")
    assert items[cello]["source"] == (f"not known: the dream named no source, and no "
                                      f"message of {run_label} states this")
    listed = run("review").output
    assert (f"from: best guess (the dream named no source): archive {ids['Marathon']} "
            f"(Marathon training)") in listed
