"""`agent import` of ChatGPT's and Claude's own exports: the visible thread, provenance,
idempotence, and one clear line for bad input with the vault left as it was."""

from __future__ import annotations

import json
import subprocess
import zipfile

import pytest
from conftest import agent_proc

T0 = 1_700_000_000          # 2023-11-14 22:13:20 UTC


def gpt_node(nid, parent, children, role=None, text=None, *, t=0, weight=1.0, content=None,
             meta=None, name=None):
    msg = None
    if role is not None:
        author = {"role": role, **({"name": name} if name else {})}
        msg = {"id": nid, "author": author, "create_time": T0 + t, "weight": weight,
               "content": content or {"content_type": "text", "parts": [text]},
               "metadata": meta or {}}
    return {"id": nid, "parent": parent, "children": children, "message": msg}


def gpt_conversation(cid="c-kyoto", title="Trip to Kyoto"):
    """A thread with a system message, a regenerated answer, a hidden message, an image,
    code run by a tool and an empty answer; the current branch ends at a5."""
    nodes = [
        gpt_node("root", None, ["s1"]),
        gpt_node("s1", "root", ["u1"], "system", "You are ChatGPT"),
        gpt_node("u1", "s1", ["a-old", "a1"], "user", "Plan a trip to Kyoto in April", t=1),
        gpt_node("a-old", "u1", [], "assistant", "OLD ANSWER nobody saw again", t=2),
        gpt_node("a1", "u1", ["h1"], "assistant", "Go in early April for the cherry blossom",
                 t=3),
        gpt_node("h1", "a1", ["u2"], "assistant", "HIDDEN CONTEXT", t=4, weight=0.0),
        gpt_node("u2", "h1", ["c1"], "user", t=5, content={
            "content_type": "multimodal_text",
            "parts": [{"content_type": "image_asset_pointer", "asset_pointer": "file-1",
                       "width": 800, "height": 600}, "What temple is this?"]},
            meta={"attachments": [{"name": "map.pdf"}]}),
        gpt_node("c1", "u2", ["x1"], "assistant", t=6, content={
            "content_type": "code", "language": "python", "text": "print(2 + 2)"}),
        gpt_node("x1", "c1", ["a5"], "tool", t=7, name="python", content={
            "content_type": "execution_output", "text": "4"}),
        gpt_node("a5", "x1", ["e1"], "assistant", "That is Kinkaku-ji, the Golden Pavilion",
                 t=8),
        gpt_node("e1", "a5", [], "assistant", "", t=9),
    ]
    return {"id": cid, "conversation_id": cid, "title": title, "create_time": T0,
            "update_time": T0 + 9, "current_node": "e1", "default_model_slug": "gpt-4o",
            "mapping": {n["id"]: n for n in nodes}}


def simple_gpt(cid, title, lines):
    nodes, parent = [gpt_node("root", None, [])], "root"
    for i, (role, text) in enumerate(lines):
        nid = f"{cid}-m{i}"
        nodes[-1]["children"] = [nid]
        nodes.append(gpt_node(nid, parent, [], role, text, t=100 * i))
        parent = nid
    return {"id": cid, "title": title, "create_time": T0, "update_time": T0 + 500,
            "current_node": parent, "mapping": {n["id"]: n for n in nodes}}


def claude_conversation():
    return {"uuid": "u-garden", "name": "Garden plans", "summary": "",
            "created_at": "2024-03-01T09:00:00.000000Z",
            "updated_at": "2024-03-01T09:05:00.000000Z",
            "chat_messages": [
                {"uuid": "m1", "sender": "human", "text": "Here is my soil report",
                 "created_at": "2024-03-01T09:00:00Z", "content": [
                     {"type": "text", "text": "Here is my soil report"}],
                 "attachments": [{"file_name": "soil.txt", "file_size": 30,
                                  "extracted_content": "pH 6.5, loamy, low nitrogen"}],
                 "files": [{"file_name": "photo.jpg"}]},
                {"uuid": "m2", "sender": "assistant", "text": "Plant beans to fix nitrogen",
                 "created_at": "2024-03-01T09:01:00Z", "content": [], "attachments": [],
                 "files": []},
                {"uuid": "m3", "sender": "human", "text": "", "created_at":
                    "2024-03-01T09:02:00Z", "content": [], "attachments": [], "files": []},
            ]}


def session_lines(vault, key):
    out = []
    for f in sorted((vault.root / "sessions" / key).glob("*.jsonl")):
        out += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return out


def messages(vault, key):
    return [o for o in session_lines(vault, key) if o.get("type") != "compact"]


def git(vault, *args):
    return subprocess.run(["git", *args], cwd=vault.root, capture_output=True, text=True,
                          check=True).stdout


def write_zip(path, files: dict[str, bytes | str]):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def test_a_chatgpt_zip_brings_in_the_visible_thread_with_its_title(vault, run, tmp_path):
    export = write_zip(tmp_path / "chatgpt.zip", {
        "conversations.json": json.dumps([gpt_conversation()]),
        "chat.html": "<html></html>", "user.json": "{}"})
    r = run("import", str(export))
    assert r.exit_code == 0, r.output
    assert "Imported 6 messages in 1 conversation (1 new)" in r.output
    got = messages(vault, "import/chatgpt-c-kyoto")
    assert [(m["id"], m["role"]) for m in got] == [
        ("u1", "user"), ("a1", "assistant"), ("u2", "user"), ("c1", "assistant"),
        ("x1", "assistant"), ("a5", "assistant")]
    text = "\n".join(m["content"] for m in got)
    assert "OLD ANSWER" not in text and "HIDDEN" not in text and "You are ChatGPT" not in text
    assert got[2]["content"] == "[image 800x600]\n\nWhat temple is this?\n\n[file: map.pdf]"
    assert got[3]["content"] == "print(2 + 2)" and got[4]["content"] == "4"
    assert got[4]["speaker"] == "tool python"
    assert got[0]["ts"] == "2023-11-14T22:13:21+00:00"
    assert got[0]["conversation"] == {
        "from": "chatgpt", "id": "c-kyoto", "title": "Trip to Kyoto",
        "created": "2023-11-14T22:13:20+00:00", "updated": "2023-11-14T22:13:29+00:00",
        "model": "gpt-4o"}
    assert git(vault, "log", "-1", "--format=%s").strip() == \
        "import: add 6 messages in 1 conversation from ChatGPT (chatgpt.zip)"
    assert git(vault, "status", "--porcelain") == ""
    listed = run("sessions")
    assert "Trip to Kyoto" in listed.output and "import/chatgpt-c-kyoto" in listed.output


def test_the_whole_imported_conversation_waits_to_be_archived(vault, run, tmp_path):
    (tmp_path / "conversations.json").write_text(json.dumps([gpt_conversation()]))
    run("import", str(tmp_path / "conversations.json"))
    marker = [o for o in session_lines(vault, "import/chatgpt-c-kyoto")
              if o.get("type") == "compact"]
    assert len(marker) == 1 and marker[0]["backlog"]["offset"] == 0
    assert marker[0]["through"] == "a5"


def test_a_claude_export_keeps_attachments_and_makes_memories_an_entry_for_review(
        vault, run, tmp_path):
    folder = tmp_path / "claude-export"
    folder.mkdir()
    (folder / "conversations.json").write_text(json.dumps([claude_conversation()]))
    (folder / "memories.json").write_text(json.dumps([{
        "conversations_memory": "The person grows beans and lives in Leeds.",
        "project_memories": {"p1": "Working on a garden planner app."}}]))
    (folder / "users.json").write_text("[]")
    before = (vault.root / "MEMORY.md").read_text(), (vault.root / "USER.md").read_text()
    r = run("import", str(folder))
    assert r.exit_code == 0, r.output
    got = messages(vault, "import/claude-u-garden")
    assert [(m["id"], m["role"]) for m in got] == [("m1", "user"), ("m2", "assistant")]
    # What came attached is kept with the message, each a block of its own after the
    # words, and the line says how many: nobody typed them (agent.dream.learning).
    assert got[0]["content"] == [
        {"type": "text", "text": "Here is my soil report"},
        {"type": "text", "text": "[attachment: soil.txt]\npH 6.5, loamy, low nitrogen"},
        {"type": "text", "text": "[file: photo.jpg]"}]
    assert got[0]["attached"] == 2
    assert got[0]["conversation"]["title"] == "Garden plans"
    assert "proposals for agent review" in r.output
    entries = list((vault.root / "archive").rglob("*.md"))
    assert len(entries) == 1
    body = entries[0].read_text()
    assert "grows beans and lives in Leeds" in body and "garden planner" in body
    assert "session: import/claude-memories" in body
    assert ((vault.root / "MEMORY.md").read_text(), (vault.root / "USER.md").read_text()) \
        == before
    again = run("import", str(folder))
    assert "Nothing new" in again.output and "archive entry" not in again.output
    assert len(list((vault.root / "archive").rglob("*.md"))) == 1


def test_split_files_and_a_manifest_of_zips_are_read_whole(vault, run, tmp_path):
    folder = tmp_path / "split"
    folder.mkdir()
    (folder / "conversations-000.json").write_text(json.dumps(
        [simple_gpt("a", "First", [("user", "alpha question"), ("assistant", "alpha")])]))
    (folder / "conversations-001.json").write_text(json.dumps(
        [simple_gpt("b", "Second", [("user", "beta question"), ("assistant", "beta")])]))
    (folder / "export_manifest.json").write_text(json.dumps({"files": 2}))
    r = run("import", str(folder))
    assert "in 2 conversations (2 new)" in r.output, r.output
    assert messages(vault, "import/chatgpt-b")[1]["content"] == "beta"

    many = tmp_path / "many"
    many.mkdir()
    conv = claude_conversation()
    for n, (uuid, name) in enumerate([("z1", "One"), ("z2", "Two")]):
        write_zip(many / f"batch-{n}.zip", {"conversations.json": json.dumps(
            [{**conv, "uuid": uuid, "name": name}])})
    (many / "manifest-2024.json").write_text(json.dumps(
        {"parts": [{"file": "batch-0.zip"}, {"file": "batch-1.zip"}]}))
    r = run("import", str(many / "manifest-2024.json"))
    assert "in 2 conversations (2 new)" in r.output, r.output
    assert messages(vault, "import/claude-z2")[0]["conversation"]["title"] == "Two"


def test_importing_again_adds_nothing_and_a_newer_export_only_what_is_new(vault, run,
                                                                          tmp_path):
    old = [simple_gpt("a", "First", [("user", "q1"), ("assistant", "a1")])]
    (tmp_path / "old.json").write_text(json.dumps(old))
    run("import", str(tmp_path / "old.json"))
    commits = git(vault, "rev-list", "--count", "HEAD")
    again = run("import", str(tmp_path / "old.json"))
    assert again.exit_code == 0
    assert "Nothing new: all 1 conversations (2 messages) of old.json are already in " \
           "the vault." in again.output
    assert git(vault, "rev-list", "--count", "HEAD") == commits

    newer = [simple_gpt("a", "First", [("user", "q1"), ("assistant", "a1"),
                                       ("user", "q2"), ("assistant", "a2")]),
             simple_gpt("b", "Second", [("user", "hello"), ("assistant", "hi")])]
    (tmp_path / "new.json").write_text(json.dumps(newer))
    r = run("import", str(tmp_path / "new.json"))
    assert "Imported 4 messages in 2 conversations (1 new)" in r.output, r.output
    got = messages(vault, "import/chatgpt-a")
    assert [m["content"] for m in got] == ["q1", "a1", "q2", "a2"]
    assert [m["turn"] for m in got] == [1, 1, 2, 2]
    marker = [o for o in session_lines(vault, "import/chatgpt-a") if o.get("type")][-1]
    assert marker["through"] == "a-m3"


def test_a_conversation_that_cannot_be_read_is_skipped_and_named(vault, run, tmp_path):
    cycle = simple_gpt("loop", "Going round", [("user", "x"), ("assistant", "y")])
    cycle["mapping"]["root"]["parent"] = "loop-m1"
    orphan = simple_gpt("orphan", "Lost parent", [("user", "x")])
    orphan["mapping"]["orphan-m0"]["parent"] = "gone"
    blank = simple_gpt("blank", "Empty", [("user", "")])
    good = simple_gpt("good", "Fine", [("user", "still here"), ("assistant", "yes")])
    (tmp_path / "conversations.json").write_text(json.dumps([cycle, orphan, blank, good]))
    r = run("import", str(tmp_path / "conversations.json"))
    assert r.exit_code == 0
    assert "Skipped conversations.json conversation 1 ('Going round'): its thread runs " \
           "in a cycle at node" in r.output
    assert "Skipped conversations.json conversation 2 ('Lost parent'): its thread names " \
           "a node 'gone' the mapping does not hold (a missing parent)." in r.output
    assert "Skipped conversations.json conversation 3 ('Empty'): no message with text" \
        in r.output
    assert "Imported 2 messages in 1 conversation" in r.output
    assert sorted(p.name for p in (vault.root / "sessions" / "import").iterdir()) == \
        ["chatgpt-good"]


def _bomb() -> bytes:
    return b"[" + b" " * (40 * 1024 * 1024) + b"]"


@pytest.mark.parametrize("name,make,problem", [
    ("conversations.json", lambda p: p.write_bytes(
        json.dumps([simple_gpt("a", "A", [("user", "x")])] * 3).encode()[:-40]),
     ("conversations.json: ends mid-way (a truncated or partly downloaded file); "
     "nothing was imported from it.")),
    ("conversations.json", lambda p: p.write_bytes(
        json.dumps([simple_gpt("a", "A", [("user", "caf\u00e9")])]).encode().replace(
            b"caf\\u00e9", b"caf\xe9")),
     "conversations.json: holds bytes that are not UTF-8; nothing was imported from it."),
    ("escape.zip", lambda p: write_zip(p, {"conversations.json": "[]",
                                           "../../.bashrc": "evil"}),
     ("escape.zip: the name '../../.bashrc' in the zip escapes its folder; an export never "
     "holds one, so nothing was imported.")),
    ("bomb.zip", lambda p: write_zip(p, {"conversations.json": _bomb()}),
     "bomb.zip: conversations.json would unpack to 41,943,042 bytes from"),
    ("photos.zip", lambda p: write_zip(p, {"a.jpg": "x", "b.txt": "y"}),
     ("photos.zip: not an export: no conversations.json, conversations-NNN.json, "
     "memories.json or .jsonl transcript in it.")),
    ("conversations.json", lambda p: p.write_text(json.dumps([{"hello": "world"}])),
     ("conversations.json: not a ChatGPT or Claude export (no mapping or chat_messages in "
     "it); give --format chatgpt|claude|jsonl if it is one.")),
])
def test_bad_input_is_one_line_naming_the_file_and_the_vault_is_unchanged(
        vault, tmp_path, name, make, problem):
    path = tmp_path / name
    make(path)
    head = git(vault, "rev-parse", "HEAD")
    p = agent_proc("import", str(path), vault=vault.root)
    assert p.returncode == 1, p.stdout + p.stderr
    assert problem in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert git(vault, "rev-parse", "HEAD") == head
    assert git(vault, "status", "--porcelain", "--ignored") in ("", "!! .agent/\n")
    assert not (vault.root / "sessions" / "import").exists()


@pytest.mark.parametrize("given,content,told", [
    ("claude", lambda: [gpt_conversation()], "ChatGPT's export, not Claude's: give --format "
                                             "chatgpt"),
    ("chatgpt", lambda: [claude_conversation()], "Claude's export, not ChatGPT's: give "
                                                 "--format claude"),
])
def test_a_format_the_file_is_not_is_told_what_the_file_is(vault, tmp_path, given, content,
                                                           told):
    (tmp_path / "export.json").write_text(json.dumps(content()))
    p = agent_proc("import", "--format", given, str(tmp_path / "export.json"),
                   vault=vault.root)
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stderr.strip() == f"Error: export.json is {told}, or no --format (the content " \
                               f"tells it)."
    assert "Skipped" not in p.stderr and "Nothing to import" not in p.stdout
    assert not (vault.root / "sessions" / "import").exists()


def test_a_format_given_for_a_file_the_content_does_not_tell_is_taken_or_refused(
        vault, run, tmp_path):
    # The keys that tell a Claude export come after 64 KB of a long first title.
    conv = {"name": "x" * 70_000, **{k: v for k, v in claude_conversation().items()
                                     if k != "name"}}
    (tmp_path / "export.json").write_text(json.dumps([conv]))
    r = run("import", "--format", "claude", str(tmp_path / "export.json"))
    assert "Imported 2 messages in 1 conversation" in r.output, r.output
    r = run("import", "--format", "chatgpt", str(tmp_path / "export.json"))
    assert r.exit_code == 1
    assert "export.json: none of its 1 conversations reads as ChatGPT's export (it has no " \
           "id); it is not one. Give another --format, or none." in r.output


def test_a_claude_zip_as_claude_mails_it_brings_its_memories_too(vault, run, tmp_path):
    export = write_zip(tmp_path / "claude-export.zip", {
        "conversations.json": json.dumps([claude_conversation()]),
        "memories.json": json.dumps([{"conversations_memory": "Grows beans in Leeds."}]),
        "users.json": "[]", "projects.json": "[]"})
    r = run("import", str(export))
    assert r.exit_code == 0, r.output
    assert "Claude's memories are archive entry" in r.output
    [entry] = list((vault.root / "archive").rglob("*.md"))
    assert "Grows beans in Leeds." in entry.read_text()
    assert "Claude's memories (claude-export.zip)" in git(vault, "log", "--format=%s")


def test_an_imported_conversation_is_dreamed_into_proposals_that_name_it(
        vault, run, tmp_path, fake_anthropic):
    from dreamkit import finding, op, set_review
    from fakeanthropic import json_reply

    set_review(vault, "off")          # even so, what an import brought waits for review
    (tmp_path / "conversations.json").write_text(json.dumps([gpt_conversation()]))
    assert run("import", str(tmp_path / "conversations.json")).exit_code == 0
    fake_anthropic.add(json_reply({"topic": "Kyoto trip in April", "importance": 0.8,
                                   "summary": "The user plans to visit Kyoto in April."}))
    r = run("archive", "--session", "import/chatgpt-c-kyoto")
    assert r.exit_code == 0, r.output
    [entry] = [int(p.stem) for p in (vault.root / "archive").rglob("*.md")]
    fake_anthropic.add(json_reply({"findings": [finding(
        "Plans to visit Kyoto in April", evidence=[f"archive:{entry}"])]}))
    fake_anthropic.add(json_reply({"ops": [op("add", section="Travel",
                                              new="- Plans to visit Kyoto in April",
                                              reason=f"archive:{entry}")]}))
    memory = (vault.root / "MEMORY.md").read_text()
    r = run("dream", "--poll-interval", "0.01")
    assert r.exit_code == 0, r.output
    assert (vault.root / "MEMORY.md").read_text() == memory
    listed = run("review")
    assert f"archive {entry} (Kyoto trip in April), from ChatGPT: 'Trip to Kyoto' " \
           f"(import/chatgpt-c-kyoto): \"Plan a trip to Kyoto in April\"" in listed.output
    assert run("review", "accept", "1").exit_code == 0
    why = run("why", "Kyoto in April")
    assert why.exit_code == 0, why.output
    assert "session import/chatgpt-c-kyoto \"Trip to Kyoto\"" in why.output
    assert "u1 2023-11-14 22:13 user: Plan a trip to Kyoto in April" in why.output


def _embed_installed() -> bool:
    from agent.search import embed
    return embed.installed() and embed.wanted() != "off"


@pytest.mark.skipif(not _embed_installed(), reason="the embed extra is not installed")
def test_after_an_import_every_message_is_found_by_meaning_without_another_command(
        vault, run, tmp_path):
    import sqlite3

    convs = [simple_gpt(f"g{n}", f"Garden {n}", [
        ("user", f"note {n}.{k} about the garden shed and the {['roof', 'door'][k % 2]}")
        for k in range(20)]) for n in range(10)]
    convs.append(simple_gpt("tea", "Drinks", [("user", "I drank far too much coffee this morning.")]))
    (tmp_path / "conversations.json").write_text(json.dumps(convs))
    r = run("import", str(tmp_path / "conversations.json"))
    assert r.exit_code == 0, r.output
    assert "Embedded 201 documents" in r.output and "meaning-search is up to date" in r.output
    db = sqlite3.connect(vault.root / ".agent" / "index.sqlite")
    try:
        assert db.execute("SELECT count(*) FROM vec_pending").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM vec").fetchone()[0] == 201
    finally:
        db.close()
    found = run("search", "--json", "咖啡")         # Chinese for coffee: by meaning alone
    assert found.exit_code == 0, found.output
    assert "catching up" not in found.output
    hits = [json.loads(x) for x in found.stdout.splitlines() if x.startswith("{")]
    assert hits[0]["why"] == "meaning" and "coffee" in hits[0]["text"]
    # Nothing new: nothing to embed, and nothing said about it.
    again = run("import", str(tmp_path / "conversations.json"))
    assert again.exit_code == 0 and "Embedded" not in again.output


@pytest.mark.skipif(not _embed_installed(), reason="the embed extra is not installed")
def test_an_import_without_embedding_searches_by_words_and_says_meaning_is_catching_up(
        vault, run, tmp_path):
    import re

    convs = [simple_gpt(f"g{n}", f"Garden {n}", [
        ("user", f"note {n}.{k} about the garden shed and the {['roof', 'door'][k % 2]}")
        for k in range(20)]) for n in range(10)]
    (tmp_path / "conversations.json").write_text(json.dumps(convs))
    r = run("import", "--no-embed", str(tmp_path / "conversations.json"))
    assert r.exit_code == 0 and "Embedded" not in r.output, r.output
    r = run("search", "roof")
    assert r.exit_code == 0 and "roof" in r.output
    waiting = re.search(r"Meaning-search is catching up: ([\d,]+) documents still wait",
                        r.output)
    assert waiting and int(waiting[1].replace(",", "")) > 100, r.output    # a slice made
    done = run("index", "embed")
    assert done.exit_code == 0, done.output
    assert f"Embedded {waiting[1]} documents" in done.output
    again = run("search", "roof")
    assert "catching up" not in again.output and "roof" in again.output


@pytest.mark.slow
@pytest.mark.skipif(not _embed_installed(), reason="the embed extra is not installed")
def test_ctrl_c_while_an_import_embeds_keeps_the_import_and_the_vectors_made(vault, tmp_path):
    import signal
    import sqlite3
    import sys
    from conftest import wait_for

    convs = [simple_gpt(f"g{n}", f"Garden {n}", [
        ("user", f"note {n}.{k}: the shed roof leaks after rain, call the roofer on monday")
        for k in range(40)]) for n in range(8)]
    (tmp_path / "conversations.json").write_text(json.dumps(convs))
    index_file = vault.root / ".agent" / "index.sqlite"

    def embedded():
        try:
            db = sqlite3.connect(f"file:{index_file}?mode=ro", uri=True, timeout=1)
            try:
                return db.execute("SELECT count(*) FROM vec").fetchone()[0]
            finally:
                db.close()
        except sqlite3.Error:        # not made yet
            return 0

    proc = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "import",
                             str(tmp_path / "conversations.json")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    wait_for(embedded, "the first batch of vectors", limit=300)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Imported 320 messages" in out and "Traceback" not in err
    made = embedded()
    assert 0 < made < 320 and f"{made:,} of 320 documents embedded" in err
    assert f"{320 - made:,} still wait" in err and "agent index embed" in err
    done = agent_proc("index", "embed", vault=vault.root)
    assert done.returncode == 0, done.stderr
    assert f"Embedded {320 - made:,} documents" in done.stdout      # only what was left


def test_archive_all_summarises_imported_conversations_in_the_order_they_were_lived(
        vault, run, tmp_path, fake_anthropic, fixed_now):
    from fakeanthropic import json_reply

    newer = simple_gpt("a-newer", "Newer", [("user", "spring plans"), ("assistant", "ok")])
    older = simple_gpt("z-older", "Older", [("user", "winter plans"), ("assistant", "ok")])
    for node in older["mapping"].values():
        if node["message"]:
            node["message"]["create_time"] -= 90 * 86400
    older["create_time"] -= 90 * 86400
    (tmp_path / "conversations.json").write_text(json.dumps([newer, older]))
    assert run("import", str(tmp_path / "conversations.json")).exit_code == 0
    for topic in ("first summarised", "second summarised"):
        fake_anthropic.add(json_reply({"topic": topic, "summary": topic, "importance": 0.5}))
    r = run("archive", "--all")
    assert r.exit_code == 0, r.output
    entries = sorted((int(p.stem), p.read_text()) for p in (vault.root / "archive").rglob("*.md"))
    assert ["session: import/chatgpt-z-older" in entries[0][1],
            "session: import/chatgpt-a-newer" in entries[1][1]] == [True, True]


def test_a_kill_mid_import_leaves_a_consistent_vault_and_a_rerun_finishes(vault, tmp_path):
    import os
    import signal
    import sys

    convs = [simple_gpt(f"k{n:03d}", f"Kill {n}", [("user", f"question {n}"),
                                                    ("assistant", f"answer {n}")])
             for n in range(400)]
    (tmp_path / "conversations.json").write_text(json.dumps(convs))
    p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "import",
                          str(tmp_path / "conversations.json")], env=os.environ.copy(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    written = vault.root / "sessions" / "import"
    while p.poll() is None and not (written.is_dir() and len(list(written.iterdir())) >= 20):
        pass                                    # until it is writing conversations
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    again = agent_proc("import", str(tmp_path / "conversations.json"), vault=vault.root)
    assert again.returncode == 0, again.stderr
    assert "Imported" in again.stdout or "Nothing new" in again.stdout
    assert git(vault, "status", "--porcelain") == ""
    ids = [m["id"] for n in range(400) for m in messages(vault, f"import/chatgpt-k{n:03d}")]
    assert len(ids) == 800 and len(set(ids)) == 800
    assert all(any(o.get("type") == "compact" for o in session_lines(vault, f"import/chatgpt-k{n:03d}"))
               for n in range(400))                 # every conversation waits to be archived
    third = agent_proc("import", str(tmp_path / "conversations.json"), vault=vault.root)
    assert "Nothing new: all 400 conversations (800 messages)" in third.stdout


def _start_import(vault, tmp_path, conversations: int):
    """`agent import` of a ChatGPT export of `conversations` two-message conversations,
    in its own process: (the process, the export's path)."""
    import os
    import sys

    convs = [simple_gpt(f"k{n:04d}", f"Chunk {n}", [("user", f"question {n}"),
                                                    ("assistant", f"answer {n}")])
             for n in range(conversations)]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(convs))
    p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "import",
                          str(path)], env={**os.environ, "AGENT_EMBED": "off"},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    return p, path


def _written(vault) -> int:
    folder = vault.root / "sessions" / "import"
    return len(list(folder.iterdir())) if folder.is_dir() else 0


def _import_commits(vault) -> list[tuple[str, str, str]]:
    """(sha, subject, body) of each import commit, oldest first."""
    out = git(vault, "log", "--reverse", "--format=%H%x00%s%x00%b%x01", "--grep=^import: ")
    return [tuple(c.strip("\n").split("\0")) for c in out.split("\x01") if c.strip()]


def _messages_added(vault, sha: str) -> tuple[int, int]:
    """(messages, conversations) a commit added to sessions/import/."""
    diff = git(vault, "show", "--format=", "--unified=0", sha, "--", "sessions/import")
    lines = [json.loads(x[1:]) for x in diff.splitlines()
             if x.startswith("+{") and not x.startswith("+++")]
    msgs = [o for o in lines if o.get("role")]
    files = {x for x in git(vault, "show", "--format=", "--name-only", sha, "--",
                            "sessions/import").split()}
    return len(msgs), len({f.rsplit("/", 1)[0] for f in files})


def _counts(subject: str) -> tuple[int, int]:
    import re
    m = re.search(r"add (\d+) messages? in (\d+) conversations?", subject)
    assert m, subject
    return int(m[1]), int(m[2])


def test_ctrl_c_stops_an_import_commits_what_is_in_under_its_counts_and_says_how_to_finish(
        vault, tmp_path):
    import signal

    from conftest import wait_for

    p, path = _start_import(vault, tmp_path, 1200)
    wait_for(lambda: p.poll() is not None or _written(vault) >= 20, "the import to write")
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130, out + err
    assert "Aborted!" not in err and "Traceback" not in err
    assert f"Run the same command again to finish: agent import {path}" in err
    assert "Stopped: " in err and " are in, committed." in err
    assert git(vault, "status", "--porcelain") == ""          # nothing left uncommitted
    commits = _import_commits(vault)
    assert commits
    for sha, subject, _ in commits:
        assert _counts(subject) == _messages_added(vault, sha), subject
    again = agent_proc("import", str(path), vault=vault.root)
    assert again.returncode == 0, again.stderr
    ids = [m["id"] for n in range(1200) for m in messages(vault, f"import/chatgpt-k{n:04d}")]
    assert len(ids) == 2400 and len(set(ids)) == 2400


def test_status_shows_a_running_import_as_one_and_a_killed_one_is_committed_as_it_was(
        vault, tmp_path):
    import signal

    from conftest import wait_for

    p, path = _start_import(vault, tmp_path, 2000)
    try:
        seen = 0
        while True:             # until it is stopped mid-chunk, its files not yet committed
            wait_for(lambda n=seen: p.poll() is not None or _written(vault) >= n + 10,
                     "the import to write")
            assert p.poll() is None, "the import ended before it was caught mid-chunk"
            p.send_signal(signal.SIGSTOP)
            if git(vault, "--no-optional-locks", "status", "--porcelain"):
                break
            p.send_signal(signal.SIGCONT)
            seen = _written(vault)
        st = agent_proc("status", vault=vault.root, timeout=120)
        assert st.returncode == 0, st.stderr
        assert "in progress: import: add " in st.stdout, st.stdout
        assert "hand edits: none" in st.stdout
        as_json = json.loads(agent_proc("status", "--json", vault=vault.root,
                                        timeout=120).stdout)
        assert as_json["in_progress"]["running"] is True
        assert as_json["in_progress"]["change"].startswith("import: add ")
    finally:
        p.kill()
        p.wait()
    st = agent_proc("status", vault=vault.root)
    assert "interrupted: import: add " in st.stdout and "the next command commits them" \
        in st.stdout, st.stdout
    assert "hand edits: none" in st.stdout
    assert agent_proc("note", "after the kill", vault=vault.root).returncode == 0
    sha, subject, body = _import_commits(vault)[-1]
    assert "Recovered: interrupted before its commit" in body
    told, got = _counts(subject), _messages_added(vault, sha)
    # Journalled before each conversation: true, but for the one being written.
    assert 0 <= told[0] - got[0] <= 2 and 0 <= told[1] - got[1] <= 1, (subject, got)
    assert git(vault, "status", "--porcelain") == ""
    again = agent_proc("import", str(path), vault=vault.root)
    assert again.returncode == 0, again.stderr
    ids = [m["id"] for n in range(2000) for m in messages(vault, f"import/chatgpt-k{n:04d}")]
    assert len(ids) == 4000 and len(set(ids)) == 4000


def test_a_title_holding_terminal_escapes_is_shown_without_them(vault, run, tmp_path):
    evil = "Trip\x1b]0;owned\x07 to \x1b[2JKyoto\x9b31m\u202e"
    (tmp_path / "conversations.json").write_text(json.dumps(
        [simple_gpt("esc", evil, [("user", "Plan the trip"), ("assistant", "Sure")])]))
    assert run("import", str(tmp_path / "conversations.json")).exit_code == 0
    assert messages(vault, "import/chatgpt-esc")[0]["conversation"]["title"] == \
        "Trip to Kyoto"
    # One a sync brought as it was: stored with its escapes, shown without.
    rel = vault.root / "sessions" / "import" / "chatgpt-other" / "2023-11.jsonl"
    rel.parent.mkdir(parents=True)
    rel.write_text(json.dumps({"id": "o1", "ts": "2023-11-14T22:13:21+00:00", "role": "user",
                               "content": "hello \x1b]52;c;ZXZpbA==\x07there", "turn": 1,
                               "conversation": {"from": "chatgpt", "id": "other",
                                                "title": evil}}) + "\n")
    vault.git("add", "-A")
    vault.git("commit", "-qm", "from elsewhere")
    listed = agent_proc("sessions", vault=vault.root)
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    assert "\x9b" not in listed.stdout and "\u202e" not in listed.stdout
    assert "Trip to Kyoto: user: hello there" in listed.stdout
