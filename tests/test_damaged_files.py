"""Bytes and races a person's editor, a sync or a second process can produce, with the
real CLI on a real vault: bad bytes are named and never crash a reading command,
imports refuse what would corrupt a session, turn numbers stay unique, a kill between
the memory files and the transcript is recovered as the turn itself."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import pytest

from conftest import ROOT, TODAY_NOTE, subjects
from fakeanthropic import reply

# Every command here runs at conftest.NOW (2030-01-01 10:00 UTC): the day's note and the
# month's session file are known before the command runs.
pytestmark = pytest.mark.usefixtures("fixed_now")


def today_note(vault) -> str:
    return TODAY_NOTE


# ---- bad bytes ----------------------------------------------------------------------------


def test_latin1_in_memory_files_is_shown_replaced_and_named(fake_anthropic, vault, run):
    (vault.root / "MEMORY.md").write_bytes(b"# Memory\n\n- caf\xe9 au lait\n")
    (vault.root / "AGENTS.md").write_bytes(b"Be brief \xff\n")
    r = run("status")
    assert r.exit_code == 0 and "MEMORY.md line 3: byte 0xe9 is not UTF-8" in r.output
    fake_anthropic.add(reply("ok"))
    r = run("chat", "-m", "hello")
    assert r.exit_code == 0, r.output
    assert "AGENTS.md line 1: byte 0xff is not UTF-8" in r.output
    system = json.dumps(fake_anthropic.calls()[0].body["system"], ensure_ascii=False)
    assert "caf\ufffd au lait" in system
    # The file itself keeps its bytes (committed as the person's edit, never rewritten).
    assert (vault.root / "MEMORY.md").read_bytes() == b"# Memory\n\n- caf\xe9 au lait\n"


def test_agent_log_shows_a_committed_latin1_byte(vault, run):
    (vault.root / "MEMORY.md").write_bytes(b"# Memory\n\n- caf\xe9\n")
    assert run("note", "commit the edit").exit_code == 0
    r = run("log", "--no-pager")
    assert r.exit_code == 0 and "caf\ufffd" in r.output


def test_the_dream_refuses_to_rewrite_a_file_with_bad_bytes(fake_anthropic, vault, run):
    (vault.root / "USER.md").write_bytes(b"# User\n\n- na\xefve\n")
    from dreamkit import write_entries
    write_entries(vault, ["Something worth remembering."])
    r = run("dream", "--sync")
    assert r.exit_code == 1
    assert "USER.md line 3: byte 0xef is not UTF-8" in r.output
    assert fake_anthropic.calls() == []


def test_invalid_utf8_in_a_session_line_is_named(fake_anthropic, vault, run):
    d = vault.root / "sessions" / "cli" / "default"
    d.mkdir(parents=True)
    (d / "2026-11.jsonl").write_bytes(
        b'{"id":"1.0-a","ts":"2026-11-20T10:00:00+00:00","role":"user","content":"caf\xe9","turn":1}\n')
    r = run("chat", "-m", "hello")
    assert r.exit_code == 1 and "2026-11.jsonl:1: byte 0xe9 is not UTF-8" in r.output
    assert fake_anthropic.calls() == []


def test_note_drops_nul_and_terminal_escapes(vault, run):
    r = run("note", "a\x00b \x1b[2J\x1b[31mred\x1b[0m \x1b]0;title\x07done")
    assert r.exit_code == 0, r.output
    text = (vault.root / today_note(vault)).read_text()
    assert text.endswith(" ab red done\n")
    assert "\x00" not in text and "\x1b" not in text
    assert "Bin" not in vault.git("show", "--stat", "HEAD")          # git sees text


def test_non_utf8_on_stdin_is_refused_with_one_line(fake_anthropic, vault):
    head = vault.head()
    for args in (["note"], ["chat"]):
        p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), *args],
                           input=b"caf\xe9\n", capture_output=True)
        err = p.stderr.decode()
        assert p.returncode == 1 and "not UTF-8 text (byte 0xe9 on line 1)" in err
        assert "Traceback" not in err
    assert vault.head() == head and fake_anthropic.calls() == []


@pytest.mark.parametrize("args", [["note", b"caf\xe9"],
                                  ["cron", "add", b"tea\xe9", "--every", "1d", "-m", "brew"]])
def test_an_argument_that_is_not_utf8_is_one_line_and_nothing_is_written(vault, args):
    head = vault.head()
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), *args],
                       capture_output=True, stdin=subprocess.DEVNULL)
    err = p.stderr.decode()
    assert p.returncode == 2, err
    assert err.count("\n") == 1 and "is not UTF-8 text (byte 0xe9)" in err, err
    assert "\\xe9" in err and "Traceback" not in err
    assert vault.head() == head
    assert vault.git("status", "--porcelain", "--untracked-files=all") == ""


def test_a_temporary_file_a_killed_write_left_is_never_committed(vault, run):
    # `.NAME.PID.tmp` is what an atomic write leaves when its process is killed between
    # writing it and renaming it over NAME.
    (vault.root / ".cron.json.4242.tmp").write_text('{"jobs": [')
    (vault.root / "memory").mkdir(exist_ok=True)
    (vault.root / "memory" / ".MEMORY.md.77.tmp").write_text("- half")
    assert run("note", "tea at four").exit_code == 0
    committed = vault.git("log", "--format=", "--name-only").split()
    assert ".cron.json.4242.tmp" not in committed
    assert "memory/.MEMORY.md.77.tmp" not in committed
    assert TODAY_NOTE in committed


# ---- agent.toml, cursor and other files of the wrong shape -------------------------------------


def test_settings_and_cursor_of_the_wrong_shape_are_one_line_errors(vault, run):
    toml = vault.root / "agent.toml"
    for text, says in [('model = "x"\n', "[model] must be a table"),
                       ("[[chat]]\nx = 1\n", "[chat] must be a table"),
                       (b"# caf\xe9\n", "agent.toml line 1: byte 0xe9 is not UTF-8"),
                       ('[identity]\nname = ""\n', "identity")]:
        toml.write_bytes(text if isinstance(text, bytes) else text.encode())
        r = run("note", "x")
        assert r.exit_code == 1 and says in r.output, r.output
    vault.git("checkout", "agent.toml")
    cursor = vault.root / ".dream_cursor"
    cursor.write_bytes(b"\xff\n")
    assert run("status").exit_code == 0
    r = run("dream", "--sync")
    assert r.exit_code == 1 and ".dream_cursor line 1" in r.output
    cursor.unlink()
    cursor.mkdir()
    r = run("dream", "--sync")
    assert r.exit_code == 1 and ".dream_cursor is a folder" in r.output


def test_folders_named_like_entries_or_session_files_are_named(fake_anthropic, vault, run):
    (vault.root / "archive" / "2026" / "11" / "5.md").mkdir(parents=True)
    (vault.root / "sessions" / "cli" / "default" / "2026-11.jsonl").mkdir(parents=True)
    r = run("chat", "-m", "hello")
    assert r.exit_code == 1 and "2026-11.jsonl is a folder" in r.output
    r = run("dream", "--sync")
    assert "Traceback" not in r.output and "5.md is a folder" in r.output


def test_session_keys_are_short_and_have_no_newline(fake_anthropic, vault, run):
    for key in ("cli/" + "x" * 300, "cli/a\n"):
        r = run("chat", "--session", key, "--new", "-m", "hi")
        assert r.exit_code != 0 and "CHANNEL/CHAT" in r.output
    assert fake_anthropic.calls() == []


def test_a_vault_whose_git_is_a_gitfile_works(vault, run, tmp_path):
    moved = tmp_path / "elsewhere.git"
    (vault.root / ".git").rename(moved)
    (vault.root / ".git").write_text(f"gitdir: {moved}\n")
    assert run("note", "through a gitfile").exit_code == 0
    assert run("status").exit_code == 0
    assert subjects(vault)[0].startswith("note:")


# ---- large files ---------------------------------------------------------------------------


def test_a_huge_hand_added_file_is_not_committed_and_said_so(vault, run):
    with open(vault.root / "video.bin", "wb") as f:
        f.truncate(60 * 1024 * 1024)
    r = run("note", "x")
    assert r.exit_code == 0
    assert "video.bin is 60 MB, over the 50 MB limit for a hand-added file" in r.output
    assert "video.bin" not in vault.git("ls-files")


def test_a_huge_daily_note_is_appended_to_without_reading_it(vault, run):
    rel = today_note(vault)
    path = vault.root / rel
    path.parent.mkdir(exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"# big\n\n" + b"- 10:00 filler\n" * 400_000)        # ~6 MB
    vault.git("add", rel)
    vault.git("commit", "-qm", "big note")
    r = run("note", "still appended")
    assert r.exit_code == 0, r.output
    assert path.read_bytes().endswith(b" still appended\n")
    assert run("search", "filler").exit_code == 1          # left out of the index, no crash


# ---- import ----------------------------------------------------------------------------------


def test_import_refuses_what_would_corrupt_a_session(vault, run, tmp_path):
    line = {"session": "imp", "role": "user", "content": "x", "ts": "2026-11-20T10:00:00+00:00"}
    cases = {
        "nan.jsonl": ('{"session": "imp", "role": "user", "content": NaN, '
                      '"ts": "2026-11-20T10:00:00+00:00"}\n', "NaN"),
        "compact.jsonl": (json.dumps({**line, "type": "compact", "through": "x"}) + "\n",
                          "a marker the agent writes itself"),
        "dup.jsonl": (json.dumps({**line, "id": "d"}) + "\n" +
                      json.dumps({**line, "id": "d", "content": "y"}) + "\n",
                      "id 'd' is already used by line 1"),
        "deep.jsonl": ("[" * 100000 + "]" * 100000 + "\n", "nested too deeply"),
    }
    head = vault.head()
    for name, (text, says) in cases.items():
        (tmp_path / name).write_text(text)
        r = run("import", str(tmp_path / name))
        assert r.exit_code == 1 and says in r.output, (name, r.output)
    r = run("import", "/dev/zero")
    assert r.exit_code == 1 and "not a regular file" in r.output
    assert vault.head() == head and not (vault.root / "sessions" / "import").exists()


# ---- turns: torn lines, numbers, kills ---------------------------------------------------------------


def test_chat_after_an_archive_with_a_torn_last_line(fake_anthropic, vault, run):
    d = vault.root / "sessions" / "cli" / "default"
    d.mkdir(parents=True)
    month = "2030-01.jsonl"
    (d / month).write_text(
        json.dumps({"id": "1.0-a", "ts": "2026-11-20T10:00:00+00:00", "role": "user",
                    "content": "hi", "turn": 1}) + "\n" +
        json.dumps({"type": "compact", "archive": 1, "through": "1.0-a"}) + "\n" +
        '{"id": "2.0-b", "ts": "2026-11-20T10:0')
    fake_anthropic.add(reply("hello again"))
    r = run("chat", "-m", "are you there?")
    assert r.exit_code == 0, r.output
    assert "Recovered:" in r.output
    lines = [json.loads(x) for x in (d / month).read_text().splitlines()]
    assert lines[-1]["turn"] == 2 and lines[-1]["content"] == "hello again"


@pytest.mark.slow
def test_concurrent_turns_on_one_session_get_their_own_numbers(fake_anthropic, vault):
    both = threading.Barrier(2, timeout=60)

    def answer(body):
        both.wait()                 # both prompts are built before either turn is saved
        return reply("answered")

    fake_anthropic.add(answer, answer)
    procs = [subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root),
                               "chat", "-m", f"message {n}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for n in (1, 2)]
    for p in procs:
        p.wait(timeout=120)
        assert p.returncode == 0, p.stderr.read()
    key_dir = vault.root / "sessions" / "cli" / "default"
    lines = [json.loads(x) for f in sorted(key_dir.glob("*.jsonl"))
             for x in f.read_text().splitlines()]
    users = [x for x in lines if x["role"] == "user"]
    assert sorted(x["turn"] for x in users) == [1, 2]
    assert all(x["id"].startswith(f"{x['turn']}.") for x in lines)
    turns = vault.git("log", "-2", "--format=%(trailers:key=Turn,valueonly)").split()
    assert sorted(turns) == ["1", "2"]


KILLED_TURN = """
import os, sys
from datetime import datetime, timezone
from agent.chat.turn import persist
from agent.stores.sessions import Line
from agent.vault.change import Change
from agent.vault.repo import Vault
from agent.vault.staged import StagedVault

vault = Vault.open(sys.argv[1])
staged = StagedVault(vault)
staged.append_lines("MEMORY.md", ["- Remembered just before the kill"])
now = datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)
line = Line("1.0-x", now.isoformat(), "user", "remember it", 1)
persist(vault, staged, "cli/default", now, [line],
        Change("chat", "remember it", scope="cli/default",
               trailers={"Session": "cli/default", "Turn": "1"}),
        before_commit=lambda: os._exit(9))       # killed after the writes, before the commit
"""


def test_a_kill_before_the_turns_commit_is_recovered_as_the_turn(vault, run):
    p = subprocess.run([sys.executable, "-c", KILLED_TURN, str(vault.root)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 9, p.stderr
    assert run("note", "next command").exit_code == 0
    log = subjects(vault)
    assert log[1] == "chat(cli/default): remember it"
    message = vault.git("log", "-1", "--format=%B", "HEAD~1")
    assert "Turn: 1" in message and "Recovered: interrupted before its commit" in message
    files = vault.git("show", "--name-only", "--format=", "HEAD~1").split()
    assert sorted(files) == ["MEMORY.md", "sessions/cli/default/2026-11.jsonl"]
    r = run("undo", "HEAD~1")
    assert r.exit_code == 0, r.output
    assert "Remembered just before the kill" not in (vault.root / "MEMORY.md").read_text()


def test_a_session_line_nested_too_deeply_is_skipped_by_search_and_status(vault, run):
    d = vault.root / "sessions" / "cli" / "default"
    d.mkdir(parents=True)
    (d / "2026-11.jsonl").write_text("[" * 100000 + "]" * 100000 + "\n")
    for args in (("status",), ("search", "anything"), ("note", "still works")):
        r = run(*args)
        assert "Traceback" not in r.output and not isinstance(r.exception, RecursionError), args


def test_a_file_named_like_the_state_folder_is_named_not_a_traceback(vault, run):
    import shutil
    shutil.rmtree(vault.root / ".agent", ignore_errors=True)
    (vault.root / ".agent").write_text("not a folder\n")
    head = vault.head()
    r = run("note", "x")
    assert r.exit_code == 1 and ".agent should be the agent's folder" in r.output
    assert vault.head() == head


DEEP = "[" * 50_000 + "]" * 50_000


@pytest.mark.parametrize("rel,text,commands", [
    (".dream_ledger.jsonl", '{"run": ' + DEEP + '}\n', [("review",), ("stats",)]),
    (".forgotten", '{"x": ' + DEEP + '}\n', [("note", "a phrase"),
                                              ("forget", "a phrase", "--yes")]),
    ("cron.json", '{"version": 1, "jobs": ' + DEEP + '}', [("cron", "list"), ("status",)]),
])
def test_json_nested_past_any_real_file_is_read_as_bad_not_a_traceback(vault, rel, text,
                                                                       commands):
    from conftest import agent_proc

    # As a sync would bring it: committed, not written by this agent.
    (vault.root / rel).write_text(text)
    vault.git("add", "-A")
    vault.git("commit", "-q", "--no-verify", "-m", "from another machine")
    for args in commands:
        p = agent_proc(*args, vault=vault.root)
        assert "Traceback" not in p.stderr and "RecursionError" not in p.stderr, \
            (args, p.stderr[-500:])
