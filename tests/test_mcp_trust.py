"""MCP servers are not the person: a server of agent.toml (which a synced remote may have
written) starts only once the person approved its exact command line on this machine, and
a hostile server (garbage on stdout, one that never answers) costs one line and one
startup timeout, not a flood of tracebacks and a minute. The servers are the small
scripts of tests/mcp_hostile.py, each leaving a marker file when it is started."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent.chat.mcp_client.client import LOG_BYTES, MAX_BAD_LINES, close_all
from conftest import agent_proc, subjects, wait_for
from fakeanthropic import reply
from helpers import configure_mcp
from helpers import agent, git, push  # evil, remote: fixtures of conftest

HOSTILE = Path(__file__).with_name("mcp_hostile.py")


@pytest.fixture(autouse=True)
def stop_servers():
    yield
    close_all()


def hostile(name: str, mode: str, marker: Path, *extra: str, settings: str = "") -> str:
    argv = json.dumps([str(HOSTILE), mode, str(marker), *extra])
    return (f"[mcp.servers.{name}]\ncommand = {json.dumps(sys.executable)}\nargs = {argv}\n"
            f"{settings}")


def tools_offered(request) -> set[str]:
    return {t["name"] for t in request.body["tools"]}


def test_an_unapproved_server_is_not_started_until_the_person_approves_it(
        fake_anthropic, vault, run, tmp_path):
    marker = tmp_path / "helper-ran"
    configure_mcp(vault, hostile("helper", "serve", marker), approve=False)
    fake_anthropic.add(reply("Hello."))
    r = run("chat", "-m", "hi")
    assert r.exit_code == 0, r.output
    assert "Hello." in r.stdout
    assert not marker.exists()
    line = ("MCP server helper is not approved on this machine: review agent.toml, then run "
            "agent mcp approve helper")
    assert r.stderr.splitlines().count(line) == 1, r.output
    assert not any(n.startswith("helper__") for n in tools_offered(fake_anthropic.calls()[0]))

    listed = run("mcp", "list")
    assert listed.exit_code == 1
    assert "  not approved on this machine: review agent.toml, then run agent mcp approve helper" \
        in listed.output
    assert not marker.exists()
    doctor = run("doctor", "--json")
    mcp = [c for c in json.loads(doctor.output)["checks"] if c["name"] == "MCP servers"]
    assert mcp == [{"name": "MCP servers", "status": "warn",
                    "detail": "not approved on this machine: helper",
                    "fix": "review agent.toml, then run agent mcp approve helper"}]

    # Approving shows the exact command line and asks; no answer is no.
    refused = run("mcp", "approve", "helper", input="n\n")
    assert refused.exit_code == 1 and "helper is not approved." in refused.output
    assert f'  command  {json.dumps([sys.executable, str(HOSTILE), "serve", str(marker)])}' \
        in refused.output
    assert f"  cwd      {vault.root.resolve() / '.agent' / 'mcp'}" in refused.output
    ok = run("mcp", "approve", "helper", input="y\n")
    assert ok.exit_code == 0 and "Approved helper on this machine." in ok.output
    # The approval is this machine's: in .agent/, nothing for git to commit or push.
    assert (vault.root / ".agent" / "mcp-approved.json").is_file()
    assert vault.git("status", "--porcelain", "--ignored=no").strip() == ""
    assert not any(".agent" in p for p in vault.git("ls-files").split())

    fake_anthropic.add(reply("Hello again."))
    r = run("chat", "-m", "hi again")
    assert r.exit_code == 0, r.output
    assert marker.read_text().startswith("start ")
    assert "helper__add" in tools_offered(fake_anthropic.calls()[1])
    assert "not approved" not in r.output
    assert run("mcp", "list").output.splitlines()[1] == "  approved; starts; 4 tools:"
    assert json.loads(run("doctor", "--json").output)["checks"][-1]["status"] == "ok"


def test_a_changed_command_line_is_unapproved_again(fake_anthropic, vault, run, tmp_path):
    marker = tmp_path / "helper-ran"
    configure_mcp(vault, hostile("helper", "serve", marker))
    assert run("mcp", "list").exit_code == 0
    marker.unlink()
    # The command line changes (as a synced commit would change it).
    path = vault.root / "agent.toml"
    path.write_text(path.read_text().replace('"serve",', '"serve", "--and-more",'))
    vault.git("commit", "-qam", "edit: agent.toml by hand")
    listed = run("mcp", "list", "--json")
    assert listed.exit_code == 1
    [row] = [json.loads(x) for x in listed.output.splitlines()]
    assert (row["name"], row["approval"], row["starts"]) == ("helper", "changed", None)
    fake_anthropic.add(reply("Hello."))
    r = run("chat", "-m", "hi")
    assert r.exit_code == 0 and "Hello." in r.stdout
    assert ("MCP server helper changed since it was approved (agent.toml): it is not started "
            "until you review it and run agent mcp approve helper") in r.stderr
    assert not marker.exists()
    assert "changed since it was approved:" in run("mcp", "approve", "helper", "--yes").output
    assert run("mcp", "revoke", "helper").exit_code == 0
    assert json.loads(run("mcp", "list", "--json").output.splitlines()[0])["approval"] == "unapproved"
    assert not marker.exists()


def test_a_script_in_the_vault_that_changes_is_unapproved_again(vault, run, tmp_path):
    marker = tmp_path / "ran"
    script = vault.root / "tools" / "server.py"
    script.parent.mkdir()
    script.write_text(f"open({str(marker)!r}, 'a').write('start\\n')\n")
    vault.git("add", "tools")
    configure_mcp(vault, f"[mcp.servers.local]\ncommand = {json.dumps(sys.executable)}\n"
                     f"args = [{json.dumps(str(script))}]\n")
    run("mcp", "list")
    assert marker.read_text() == "start\n"
    script.write_text(script.read_text() + "import os  # a synced edit\n")
    [row] = [json.loads(x) for x in run("mcp", "list", "--json").output.splitlines()]
    assert row["approval"] == "changed"
    assert marker.read_text() == "start\n"          # not run again
    shown = run("mcp", "approve", "local", input="n\n").output
    assert "  file     tools/server.py (its content is part of the approval)" in shown


def test_a_streamable_http_server_needs_approval_too(fake_anthropic, vault, run, monkeypatch):
    # A header template sends an environment variable's value to the url: approved first.
    monkeypatch.setenv("SOME_TOKEN", "s3cret")
    configure_mcp(vault, '[mcp.servers.web]\nurl = "http://127.0.0.1:9/mcp"\n'
                     'headers = { Authorization = "Bearer ${SOME_TOKEN}" }\n', approve=False)
    fake_anthropic.add(reply("Hello."))
    r = run("chat", "-m", "hi")
    assert r.exit_code == 0
    assert "MCP server web is not approved on this machine" in r.stderr
    shown = run("mcp", "approve", "web", input="n\n").output
    assert "  url      http://127.0.0.1:9/mcp" in shown
    assert "  header   Authorization: Bearer ${SOME_TOKEN}" in shown


def test_a_garbage_printing_server_is_one_line_and_is_stopped(fake_anthropic, vault, tmp_path):
    marker = tmp_path / "garbage-ran"
    configure_mcp(vault, hostile("noisy", "garbage", marker))
    fake_anthropic.add(reply("Still here."))
    p = agent_proc("chat", "-m", "hi", vault=vault.root, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Still here." in p.stdout
    assert marker.exists()
    assert "Traceback" not in p.stderr and "garbage line" not in p.stderr
    assert len(p.stderr.splitlines()) <= 3, p.stderr
    [line] = [ln for ln in p.stderr.splitlines() if "noisy" in ln]
    assert "did not start: stopped after 20 lines that are not JSON-RPC" in line
    log = (vault.root / ".agent" / "logs" / "mcp-noisy.log").read_text()
    bad = [ln for ln in log.splitlines() if "is not JSON-RPC" in ln]
    assert len(bad) == MAX_BAD_LINES and "Traceback" not in log
    assert subjects(vault)[0] == "chat(cli/default): hi"


def test_hanging_servers_cost_one_startup_timeout_not_one_each(fake_anthropic, vault, run,
                                                                tmp_path):
    timeout = 3.0
    markers = [tmp_path / f"hang{i}" for i in range(3)]
    configure_mcp(vault, "\n".join(hostile(f"hang{i}", "hang", m,
                                       settings=f"startup_timeout = {timeout}\n")
                               for i, m in enumerate(markers)))
    fake_anthropic.add(reply("Answered anyway."))
    r = run("chat", "-m", "hi")
    assert r.exit_code == 0 and "Answered anyway." in r.stdout
    assert sum(f"did not answer within {timeout:g}s" in ln for ln in r.stderr.splitlines()) == 3
    # Each server records when it was started and when the agent gave up on it (closed its
    # stdin): one after another, the last gives up 3 timeouts after the first start.
    times = {}
    for m in markers:
        text = wait_for(lambda m=m: "end " in m.read_text() and m.read_text(), f"{m.name} to end")
        times[m.name] = {k: float(v) for k, v in (ln.split() for ln in text.splitlines())}
    first_start = min(t["start"] for t in times.values())
    last_end = max(t["end"] for t in times.values())
    assert last_end - first_start < 2 * timeout, times


def test_a_server_flooding_stderr_keeps_working_and_its_log_is_capped(fake_anthropic, vault,
                                                                      run, tmp_path):
    configure_mcp(vault, hostile("loud", "loud", tmp_path / "loud-ran"))
    fake_anthropic.add(reply("Done."))
    r = run("chat", "-m", "hi")
    assert r.exit_code == 0 and "Done." in r.stdout
    assert "loud__add" in tools_offered(fake_anthropic.calls()[0])
    log = vault.root / ".agent" / "logs" / "mcp-loud.log"
    wait_for(lambda: "the rest is not kept" in log.read_text(), "the log's last line")
    assert LOG_BYTES <= log.stat().st_size < LOG_BYTES + 1000
    assert "x" * 1023 not in r.output


def test_a_server_does_not_run_in_the_vault_so_synced_code_there_is_not_picked_up(
        vault, run, tmp_path):
    # `python -m helper` (like npx or uvx) looks in the folder it runs in first; a sync
    # could put a helper.py in the vault. The server runs in .agent/mcp/ instead.
    marker = tmp_path / "vault-code-ran"
    (vault.root / "helper.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    vault.git("add", "helper.py")
    configure_mcp(vault, f"[mcp.servers.helper]\ncommand = {json.dumps(sys.executable)}\n"
                     f'args = ["-m", "helper"]\nstartup_timeout = 30\n')
    listed = run("mcp", "list")
    assert "  approved; does not start:" in listed.output
    assert not marker.exists()
    log = vault.root / ".agent/logs/mcp-helper.log"
    wait_for(lambda: "No module named helper" in log.read_text(), "python's complaint in the log")


# ---- what an approved server loads is pinned -------------------------------------------

FIXTURE = Path(__file__).with_name("mcp_fixture.py")
SERVE = (f"import runpy, sys\nsys.argv = [{str(FIXTURE)!r}]\n"
         f"runpy.run_path(sys.argv[0], run_name='__main__')\n")


def _local_server(vault, body: dict, *arg: str) -> None:
    """Commit vault files, configure server `local` on `arg` (vault paths), approve it
    and sync it to the remote."""
    for rel, text in body.items():
        (vault.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault.root / rel).write_text(text)
    vault.git("add", "tools")
    vault.git("commit", "-qm", "edit: tools by hand")
    configure_mcp(vault, f"[mcp.servers.local]\ncommand = {json.dumps(sys.executable)}\n"
                     f"args = {json.dumps([str(vault.root / a) for a in arg])}\n")
    agent(vault.root, "sync")


@pytest.mark.parametrize("files,arg,edited", [
    # The approved script imports a helper beside it.
    ({"tools/server.py": "import helper  # noqa\n" + SERVE, "tools/helper.py": "X = 1\n"},
     "tools/server.py", "tools/helper.py"),
    # The approved argument is a package folder: python runs its __main__.py.
    ({"tools/pkgsrv/__main__.py": SERVE}, "tools/pkgsrv", "tools/pkgsrv/__main__.py"),
    # Deeper in the named folder.
    ({"tools/srv/__main__.py": "import lib.deep  # noqa\n" + SERVE,
      "tools/srv/lib/__init__.py": "", "tools/srv/lib/deep.py": "X = 1\n"},
     "tools/srv", "tools/srv/lib/deep.py"),
])
def test_a_remote_editing_code_an_approved_server_loads_unapproves_it(
        fake_anthropic, tmp_path, vault, evil, files, arg, edited):
    _local_server(vault, files, arg)
    # Approved, it runs, turn after turn (it writes nothing into its folder).
    for _ in range(2):
        fake_anthropic.add(reply("Hello."))
        r = agent(vault.root, "chat", "-m", "hi")
        assert "local__add" in tools_offered(fake_anthropic.calls()[-1]), r.output
        assert "MCP server local" not in r.output
    assert vault.git("status", "--porcelain").strip() == ""

    marker = tmp_path / "pwned"
    git(evil, "pull", "-q", "origin", "main")
    (evil / edited).write_text(f"open({str(marker)!r}, 'w').write('pwned')\n"
                               + (evil / edited).read_text())
    push(evil, f"edit: {edited}")
    synced = agent(vault.root, "sync")
    assert (vault.root / edited).read_text().startswith("open(")     # the sync took it
    line = (f"MCP server local changed since it was approved ({edited}): it is not started "
            f"until you review it and run agent mcp approve local")
    assert line in synced.output

    fake_anthropic.add(reply("Hello."))
    r = agent(vault.root, "chat", "-m", "hi")
    assert "Hello." in r.output
    assert not marker.exists()
    assert r.stderr.splitlines().count(line) == 1, r.output
    assert not any(n.startswith("local__") for n in tools_offered(fake_anthropic.calls()[-1]))
    listed = agent(vault.root, "mcp", "list", ok=False)
    assert listed.exit_code == 1 and f"  changed since it was approved ({edited})" in listed.output
    assert not marker.exists()

    # The person looks, and approves what is there now: it runs.
    shown = agent(vault.root, "mcp", "approve", "local", "--yes").output
    assert f"  changed  {edited}" in shown
    fake_anthropic.add(reply("Hello."))
    agent(vault.root, "chat", "-m", "hi")
    assert marker.read_text() == "pwned"


def test_a_file_the_remote_adds_beside_an_approved_script_unapproves_it(
        fake_anthropic, tmp_path, vault, evil):
    # `import json` finds tools/json.py first: a new file is as much code as an edit.
    _local_server(vault, {"tools/server.py": "import json  # noqa\n" + SERVE},
                  "tools/server.py")
    marker = tmp_path / "pwned"
    git(evil, "pull", "-q", "origin", "main")
    (evil / "tools" / "json.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    push(evil, "add tools/json.py")
    agent(vault.root, "sync")
    fake_anthropic.add(reply("Hello."))
    r = agent(vault.root, "chat", "-m", "hi")
    assert "MCP server local changed since it was approved (tools/json.py)" in r.stderr
    assert not marker.exists()


def test_a_server_started_from_the_top_of_the_vault_cannot_be_approved(vault, run, tmp_path):
    marker = tmp_path / "ran"
    (vault.root / "server.py").write_text(f"open({str(marker)!r}, 'a').write('start')\n")
    vault.git("add", "server.py")
    configure_mcp(vault, f"[mcp.servers.top]\ncommand = {json.dumps(sys.executable)}\n"
                     f"args = [{json.dumps(str(vault.root / 'server.py'))}]\n", approve=False)
    r = run("mcp", "approve", "top", "--yes")
    assert r.exit_code == 1
    assert "started from the vault's top folder (server.py)" in r.output
    assert "Move its files into a folder of their own (e.g. tools/top/)" in r.output
    assert "Traceback" not in r.output
    assert not (vault.root / ".agent" / "mcp-approved.json").exists()
    listed = run("mcp", "list")
    assert "  cannot be approved: see agent mcp approve top" in listed.output
    assert not marker.exists()
