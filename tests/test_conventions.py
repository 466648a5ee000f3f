"""Everyday defects a newcomer found (issue 27), and the conventions of git, grep and
simonw/llm, through the real CLI: broken control files, `edit` names, sync conflict
blocks, the search floor, Ctrl-C through serve, NO_COLOR, --json, exit codes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import subprocess

import pytest
from click.testing import CliRunner

from agent.cli.app import cli
from agent.stores.merge import CONFLICT_END, CONFLICT_START
from agent.vault.repo import Vault
from conftest import agent_proc, subjects
from test_serve import procs  # noqa: F401  (fixture: serve processes killed at the end)


def editor(tmp_path, script: str) -> str:
    """An $EDITOR command running `script` (python) on the file it is given."""
    path = tmp_path / "editor.py"
    path.write_text("import sys\np = sys.argv[1]\n" + script)
    return f"{sys.executable} {path}"


# ---- a broken cron.json is refused as a broken agent.toml is ------------------------------


def test_a_broken_cron_json_hand_edit_is_never_committed_and_status_says_so(vault, run, tmp_path):
    good = (vault.root / "cron.json").read_text()
    (vault.root / "cron.json").write_text('{"version": 1, "jobs": [\n')
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Likes tea\n")
    r = run("status")
    assert "cron.json is not committed until the problem below is fixed, the rest before" in r.output
    assert "cron.json:2:1: not valid JSON" in r.output
    r = run("note", "call the dentist")
    assert r.exit_code == 0, r.output
    assert "cron.json:2:1: not valid JSON" in r.output and "agent edit cron.json" in r.output
    # The other hand edit and the note are committed; the broken cron.json never is.
    assert subjects(vault)[:2][1] == "edit: MEMORY.md by hand"
    assert vault.git("show", "HEAD:cron.json") == good
    assert vault.dirty_paths() == ["cron.json"]
    assert (vault.root / "cron.json").read_text() == '{"version": 1, "jobs": [\n'
    r = run("status")
    assert "cron.json is not committed until the problem below is fixed" in r.output
    assert "committed before the agent's next change" not in r.output
    # A broken agent.toml: status does not promise a commit either.
    toml = (vault.root / "agent.toml").read_text()
    (vault.root / "agent.toml").write_text(toml + "x = [\n")
    r = run("status")
    assert "not committed until the problem below is fixed" in r.output
    assert "agent.toml" in r.output and "agent edit agent.toml" in r.output
    (vault.root / "agent.toml").write_text(toml)
    # `agent edit cron.json` is how it is repaired, and then the commit goes through.
    fix = editor(tmp_path, f"open(p, 'w').write({good!r})\n"
                           "open(p, 'a').write('\\n')\n")
    p = agent_proc("edit", "cron.json", vault=vault.root, env={"VISUAL": fix})
    assert p.returncode == 0, p.stderr
    assert subjects(vault)[0] == "edit: cron.json by hand"
    assert run("note", "call the dentist").exit_code == 0


# ---- agent edit: unknown names, --new, names from a sub-folder ----------------------------


def test_edit_refuses_an_unknown_name_with_a_suggestion_and_new_makes_one(vault, tmp_path):
    ed = editor(tmp_path, "open(p, 'a').write('- a fact\\n')\n")
    head = vault.head()
    p = agent_proc("edit", "MEMROY.md", vault=vault.root, env={"VISUAL": ed})
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "There is no MEMROY.md" in p.stderr and "Did you mean MEMORY.md?" in p.stderr
    assert "agent edit --new MEMROY.md" in p.stderr
    assert not (vault.root / "MEMROY.md").exists() and vault.head() == head
    p = agent_proc("edit", "--new", "ideas.md", vault=vault.root, env={"VISUAL": ed})
    assert p.returncode == 0, p.stderr
    assert subjects(vault)[0] == "edit: ideas.md by hand"
    assert (vault.root / "ideas.md").read_text() == "- a fact\n"


def test_edit_from_a_sub_folder_finds_the_vaults_own_files(vault, tmp_path):
    ed = editor(tmp_path, "open(p, 'a').write('# tweaked\\n')\n")
    sub = vault.root / "memory"
    p = agent_proc("edit", "agent.toml", cwd=sub, env={"VISUAL": ed})
    assert p.returncode == 0, p.stderr
    assert subjects(vault)[0] == "edit: agent.toml by hand"
    assert not (sub / "agent.toml").exists()
    assert (vault.root / "agent.toml").read_text().endswith("# tweaked\n")
    # A file of the current folder is still found there first.
    (sub / "2026-11-20.md").write_text("# 2026-11-20\n")
    p = agent_proc("edit", "2026-11-20.md", cwd=sub, env={"VISUAL": ed})
    assert p.returncode == 0, p.stderr
    assert subjects(vault)[0] == "edit: memory/2026-11-20.md by hand"


# ---- sync conflict blocks hold only what conflicts -----------------------------------------
# (the merge rule itself: tests/test_merge.py)


def cli_ok(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_a_sync_conflict_block_holds_the_two_versions_and_nothing_else(tmp_path, vault):
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    vault.git("remote", "add", "origin", str(bare))
    (vault.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n\n- Likes tea\n- Lives in Berlin\n")
    cli_ok("--vault", vault.root, "note", "facts")
    cli_ok("--vault", vault.root, "sync")
    cli_ok("clone", bare, tmp_path / "b")
    b = Vault.open(tmp_path / "b")
    (vault.root / "MEMORY.md").write_text(
        "# Memory\n\n## Facts\n\n- Likes tea\n- Lives in Paris\n- Has a cat named Miso\n"
        "- Plays the cello\n- Learns Japanese\n")
    (b.root / "MEMORY.md").write_text("# Memory\n\n## Facts\n\n- Likes tea\n- Lives in Lisbon\n")
    cli_ok("--vault", vault.root, "note", "a")
    cli_ok("--vault", b.root, "note", "b")
    cli_ok("--vault", b.root, "sync")
    cli_ok("--vault", vault.root, "sync")
    cli_ok("--vault", b.root, "sync")
    for v in (vault, b):
        text = (v.root / "MEMORY.md").read_text()
        assert text == ("# Memory\n\n## Facts\n\n- Likes tea\n" + CONFLICT_START + "\n"
                        "- Lives in Paris\n- Lives in Lisbon\n" + CONFLICT_END + "\n"
                        "- Has a cat named Miso\n- Plays the cello\n- Learns Japanese\n"), text


# ---- NO_COLOR ------------------------------------------------------------------------------


def on_a_terminal(*args, vault, env=None) -> str:
    """Run `agent` with stdout and stderr on a pseudo-terminal; what it wrote there."""
    import pty
    import subprocess

    leader, follower = pty.openpty()
    full = {**os.environ, "PAGER": "cat", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault), *args],
                            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=full)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:               # the other end closed: the process is done
            break
        if not chunk:
            break
        out += chunk
    proc.wait()
    os.close(leader)
    return out.decode("utf-8", "replace")


def test_no_color_is_honoured_on_a_terminal_by_search_log_and_the_vault_line(vault, run):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Likes green tea\n")
    assert run("note", "green tea with Ada").exit_code == 0
    for args in (("search", "--mode", "words", "green", "tea"), ("log", "-n", "1")):
        assert "\x1b[" in on_a_terminal(*args, vault=vault.root), args   # coloured by default
        out = on_a_terminal(*args, vault=vault.root, env={"NO_COLOR": "1"})
        assert "\x1b[" not in out and "tea" in out, args


def test_no_color_is_honoured_by_chat_on_a_terminal(fake_anthropic, vault):
    from fakeanthropic import reply, tool_use

    for answer in ("Kyoto in April is lovely.", "Still lovely."):
        fake_anthropic.add(reply(tool_use("list_dir", {"path": "."})), reply(answer))
    out = on_a_terminal("chat", "--local", "-m", "Kyoto?", vault=vault.root)
    assert "Kyoto in April is lovely." in out and "\x1b[" in out     # the tool line is dimmed
    out = on_a_terminal("chat", "--local", "-m", "And now?", vault=vault.root, env={"NO_COLOR": "1"})
    assert "Still lovely." in out and "[list_dir]" in out and "\x1b[" not in out


# ---- search: exit 1 on no match, --until a moment ------------------------------------------


def test_search_until_a_moment_keeps_that_second_and_no_match_exits_1(vault, run, tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps(m) + "\n" for m in [
        {"session": "import/x", "role": "user", "content": "the walrus sings at dawn",
         "ts": "2026-11-24T01:48:27+00:00", "id": "a"},
        {"session": "import/x", "role": "assistant", "content": "a walrus sings at noon",
         "ts": "2026-11-24T01:48:28+00:00", "id": "b"}]))
    assert run("import", str(src)).exit_code == 0
    for until in ("2026-11-24T01:48:27+00:00", "2026-11-24T02:48:27+01:00"):
        r = run("search", "--mode", "words", "--json", "--until", until, "walrus")
        assert r.exit_code == 0, r.output
        assert [json.loads(x)["message_ids"] for x in r.output.splitlines()] == [["a"]]
    r = run("search", "--mode", "words", "--json", "--since", "2026-11-24T01:48:28+00:00", "walrus")
    assert [json.loads(x)["message_ids"] for x in r.output.splitlines()] == [["b"]]
    r = run("search", "--mode", "words", "--until", "2026-11-24", "walrus")
    assert r.exit_code == 0 and "dawn" in r.output and "noon" in r.output
    r = run("search", "--mode", "words", "--until", "2026-11-24T01:48:26Z", "walrus")
    assert r.exit_code == 1
    assert "No matches for 'walrus' until 2026-11-24T01:48:26+00:00." in r.output
    assert run("search", "xylophone").exit_code == 1


# ---- Ctrl-C on a turn that runs in agent serve ---------------------------------------------


def test_ctrl_c_on_chat_m_through_serve_stops_the_turn_keeps_it_interrupted_exit_130(
        vault, fake_anthropic, procs):
    import signal
    import subprocess
    import threading

    from fakeanthropic import reply
    from test_reach_gateway import after, enable_gateway, transcript
    from test_serve import ServeProc

    enable_gateway(vault)
    cue = threading.Event()
    fake_anthropic.add(after(cue, reply("Far too late."), timeout=60))
    serve = ServeProc(vault)
    procs.append(serve)
    serve.wait_for("agent serve on")
    p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat", "-m",
                          "think about it slowly"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        fake_anthropic.wait_for_requests(1, path="/v1/messages", timeout=60)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        cue.set()                      # the fake's held reply goes, to a turn already stopped
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "Aborted!" not in err and "Traceback" not in err
    assert "[interrupted: your message and the partial reply are saved]" in err
    lines = transcript(vault, "cli/default")
    assert lines[0]["role"] == "user" and lines[0]["content"] == "think about it slowly"
    assert lines[-1].get("interrupted") is True
    assert "Far too late." not in json.dumps(lines)
    assert subjects(vault)[0].startswith("chat(cli/default): think about it slowly")
    serve.wait_for("chat cli/default turn 1: interrupted")


# ---- which vault, whose hand edit --------------------------------------------------------


def test_vault_option_pointing_inside_a_vault_finds_the_vault(vault, tmp_path):
    p = agent_proc("--vault", str(vault.root / "memory"), "note", "from a sub-folder", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert subjects(vault)[0].startswith("note: add 1 line to memory/")
    assert not (vault.root / "memory" / "memory").exists()
    p = agent_proc("--vault", str(vault.root / "memory"), "path", cwd=tmp_path)
    assert p.stdout.strip() == str(vault.root)


def test_hand_edits_are_committed_as_git_author_name_and_email(vault):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Likes tea\n")
    p = agent_proc("note", "x", vault=vault.root,
                   env={"GIT_AUTHOR_NAME": "Ada Lovelace", "GIT_AUTHOR_EMAIL": "ada@example.org"})
    assert p.returncode == 0, p.stderr
    assert vault.git("log", "-1", "--format=%an <%ae>|%s", "--", "MEMORY.md").strip() == \
        "Ada Lovelace <ada@example.org>|edit: MEMORY.md by hand"


# ---- --json: one object for a report, JSON Lines for records ----------------------------


def test_json_on_every_command_that_lists_or_reports(vault, run):
    (vault.root / "MEMORY.md").write_text("# Memory\n\n- Likes tea\n")
    assert run("cron", "add", "water", "--every", "1h", "--message", "water the plants").exit_code == 0

    def lines(*args):
        r = run(*args, "--json")
        assert r.exit_code == 0, (args, r.output)
        return [json.loads(x) for x in r.stdout.splitlines()]
    [st] = lines("status")
    assert st["vault"] == str(vault.root) and st["facts"]["MEMORY.md"] == 1 and st["hand_edits"] == []
    [job] = lines("cron", "list")
    assert job["name"] == "water" and job["schedule"]["every_seconds"] == 3600
    assert {b["name"] for b in lines("heartbeat", "list")} >= {"morning"}
    assert lines("agents") == []
    assert "memory" in {s["name"] for s in lines("skills", "list")}
    [ix] = lines("index", "status")
    assert ix["path"].endswith("index.sqlite")
    [dr] = lines("dream", "--status")
    assert dr["cursor"] == 0 and dr["waiting"] == 0
    settings = {s["key"]: s for s in lines("config", "list")}
    assert settings["chat.window_tokens"]["value"] == 24000
    log = lines("log")
    assert log[0]["subject"] == "edit: MEMORY.md by hand"
    assert log[0]["files"]["MEMORY.md"]["added"] == ["- Likes tea"]


def test_piped_text_and_a_message_are_both_sent_stdin_first(fake_anthropic, vault, run):
    from fakeanthropic import reply

    fake_anthropic.add(reply("A short summary."))
    r = run("chat", "--local", "-m", "summarise this", input="The meeting moved to Friday.\n")
    assert r.exit_code == 0, r.output
    sent = fake_anthropic.calls()[0].body["messages"][-1]["content"]
    text = sent if isinstance(sent, str) else "".join(b.get("text", "") for b in sent)
    assert text.endswith("The meeting moved to Friday.\n\nsummarise this")


# ---- search by meaning has a floor ---------------------------------------------------------

CHATTER = ["Hey Joanna, glad I could help. Let me know how it turns out!",
           "Wow, that sounds great! What flavors are you experimenting with?",
           "Thanks Nate! It's been a wild ride. I've been decompressing, but it's hard to switch off.",
           "Cheers, Nate! Your support means a lot. I'll definitely keep you updated.",
           "No worries. Hope you enjoy it! Let me know how it turns out.",
           "We are going to Kyoto in April, window seat please.",
           "Done, the train leaves at nine.",
           "My sister finished her first marathon last weekend.",
           "I painted the living room a pale green.",
           "The team won the regional tournament yesterday, I am so proud of them!",
           "I adopted a puppy from the shelter, her name is Luna.",
           "Thanks for the book recommendation, I loved the ending."]


def test_a_query_about_nothing_in_the_vault_finds_nothing_by_meaning(vault, run, tmp_path):
    from test_recall import index_embed_installed

    if not index_embed_installed():
        pytest.skip("the embed extra is not installed")
    src = tmp_path / "chatter.jsonl"
    src.write_text("".join(json.dumps({"session": "import/x", "id": f"m{i}", "role": "user",
                                       "ts": f"2026-11-{10 + i:02d}T10:00:00+00:00", "content": m}) + "\n"
                           for i, m in enumerate(CHATTER)))
    assert run("import", str(src)).exit_code == 0
    for query in ("咖啡", "vaccine booster side effects", "Kubernetes pod eviction"):
        r = run("search", query)
        assert r.exit_code == 1, (query, r.output)
        assert r.output.strip() == f"No matches for {query!r}."
    # What is there is still found by meaning alone.
    r = run("search", "--json", "Japan", "trip")
    hits = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.exit_code == 0 and "Kyoto" in hits[0]["text"] + hits[1]["text"]


# ---- exit codes and streams -----------------------------------------------------------------


def test_ctrl_c_at_the_repl_prompt_exits_130_and_ctrl_d_exits_0(fake_anthropic, vault):
    import pty
    import subprocess

    import signal

    def repl(press) -> int:
        leader, follower = pty.openpty()
        p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat",
                              "--local"], stdin=follower, stdout=follower, stderr=follower)
        os.close(follower)
        seen = b""
        while b"> " not in seen:          # the prompt: the REPL waits for a line
            seen += os.read(leader, 4096)
        try:
            # A key pressed again if the program has not left: input() loses a SIGINT that
            # lands between drawing the prompt and waiting for a key (see test_chat's
            # Terminal.ctrl_c_at_prompt); a person never presses that fast, a test does.
            for _ in range(30):
                press(p, leader)
                try:
                    return p.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    continue
            raise AssertionError("agent chat did not leave")
        finally:
            p.kill()
            os.close(leader)
    # Ctrl-C: the terminal sends the foreground process SIGINT; Ctrl-D: end of input.
    assert repl(lambda p, tty: p.send_signal(signal.SIGINT)) == 130
    assert repl(lambda p, tty: os.write(tty, b"\x04")) == 0


def test_config_check_findings_are_its_result_on_stdout(vault):
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace("window_tokens = 24000", 'window_tokens = "lots"'))
    p = agent_proc("config", "check", vault=vault.root)
    assert p.returncode == 1
    assert "chat.window_tokens must be a whole number, not 'lots'" in p.stdout and p.stderr == ""


def test_completion_prints_the_script_for_each_shell(vault, tmp_path):
    for shell, mark in (("bash", "complete -o nosort -F _agent_completion agent"),
                        ("zsh", "compdef _agent_completion agent"),
                        ("fish", "complete --no-files --command agent")):
        p = agent_proc("completion", shell, vault=vault.root)
        assert p.returncode == 0 and mark in p.stdout, (shell, p.stdout[-300:])
    # The script it prints completes the commands.
    p = agent_proc(env={"_AGENT_COMPLETE": "bash_complete", "COMP_WORDS": "agent sta",
                        "COMP_CWORD": "1"})
    assert "plain,status" in p.stdout.split()


# ---- smaller ones ----------------------------------------------------------------------------


def test_doctor_answers_a_404_with_the_url_to_check_not_try_again(fake_anthropic, vault, run,
                                                                 monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_anthropic.url + "/not/the/api")
    r = run("doctor")
    assert r.exit_code == 1
    assert "answered HTTP 404" in r.output and "check ANTHROPIC_BASE_URL" in r.output
    assert "try again later" not in r.output


def test_config_set_of_a_telegram_token_points_to_the_environment(vault, run):
    before = (vault.root / "agent.toml").read_text()
    r = run("config", "set", "channels.telegram.token", "123:SECRET")
    assert r.exit_code == 1 and "$TELEGRAM_BOT_TOKEN" in r.output
    assert "enabled" not in r.output and "SECRET" not in r.output
    assert (vault.root / "agent.toml").read_text() == before
