"""`exec` in the bubblewrap sandbox: what a command can and cannot reach, its limits, and
its writes to workspace/ committed with the turn. Real bwrap, real git, real processes.

The escape attempts are the issue's list: a secret outside the binds, writing outside
workspace/, .git/config, the network with networking off, the API key in the
environment, a fork bomb and a command that never ends (killed with its children), a
symlink in workspace/ pointing out of the vault.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from agent import sandbox
from agent.chat.tools.exec import exec_
from agent.chat.tools.files import read_file
from agent.chat.tools.registry import ToolContext, ToolError, use_context
from agent.config import load_settings
from agent.errors import UserError
from agent.vault.staged import StagedVault
from conftest import agent_proc, subjects, wait_for
from fakeanthropic import reply, tool_use

NOW = datetime(2026, 11, 20, 9, 30, tzinfo=timezone(timedelta(hours=1)))

pytestmark = pytest.mark.skipif(not sandbox.sandbox_status().ok,
                                reason=f"no sandbox here: {sandbox.sandbox_status().message}")


@pytest.fixture
def sh(vault):
    """sh("cmd", timeout=..) -> the exec tool's answer, run as the loop runs it."""
    staged = StagedVault(vault)
    settings = load_settings(vault.root)

    def _sh(command, timeout=None, **ctx):
        with use_context(ToolContext(staged, "cli/default", NOW, settings, **ctx)):
            return exec_(command, timeout)
    _sh.staged = staged
    return _sh


def set_key(vault, table: str, key: str, value: str) -> None:
    """Set `key = value` in [table] of the vault's agent.toml (the template has the table)."""
    toml = vault.root / "agent.toml"
    text = toml.read_text()
    start = text.index(f"[{table}]\n")
    end = text.find("\n[", start + 1)
    end = len(text) if end < 0 else end
    section = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", text[start:end])
    assert f"{key} = {value}" in section
    toml.write_text(text[:start] + section + text[end:])


def status(answer: str) -> str:
    return answer.splitlines()[0]


def leftovers(token: str) -> list[int]:
    """Processes whose command line holds `token` (a command's own text)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if token.encode() in (d / "cmdline").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


def test_a_command_runs_in_workspace_with_its_status_and_streams(sh, vault):
    out = sh("pwd; echo out; echo err >&2; exit 3")
    assert status(out) == "exit status: 3"
    assert "stdout:\n/vault/workspace\nout\n" in out
    assert "stderr:\nerr\n" in out
    out = sh("ls -a /vault; cat /vault/MEMORY.md | head -1")
    listing = out.split("stdout:\n")[1].split("stderr:")[0].split()
    assert "MEMORY.md" in listing and "workspace" in listing
    assert ".git" not in listing and ".agent" not in listing


# ---- escapes ------------------------------------------------------------------------


def test_secrets_outside_the_binds_are_not_there(sh, tmp_path):
    secret = tmp_path / "home" / "secret.txt"
    secret.write_text("s3cret-outside\n")
    secret.chmod(0o644)
    out = sh(f"cat /etc/shadow; cat {secret}; ls /root /home; cat /proc/1/root/etc/shadow")
    assert "s3cret" not in out and "root:" not in out
    assert "/etc/shadow: No such file" in out
    assert f"{secret}: No such file" in out


def test_writing_outside_workspace_fails_and_the_vault_is_untouched(sh, vault):
    before = (vault.root / "MEMORY.md").read_bytes()
    out = sh("echo pwned > /vault/MEMORY.md; echo pwned > /vault/new.md; "
             "mkdir /vault/x; echo pwned > /usr/pwned; echo pwned > /etc/passwd; echo ok")
    assert out.count("Read-only file system") == 5, out
    assert (vault.root / "MEMORY.md").read_bytes() == before
    assert not (vault.root / "new.md").exists() and not (vault.root / "x").exists()
    assert not Path("/usr/pwned").exists()


def test_git_and_agent_state_are_invisible(sh, vault):
    (vault.root / ".agent").mkdir(exist_ok=True)
    (vault.root / ".agent" / "secret").write_text("state")
    out = sh("cat /vault/.git/config; cat /vault/.agent/secret; cat ../.git/config; "
             "git -C /vault log 2>&1 | head -1")
    assert "[core]" not in out and "state" not in out
    assert "/vault/.git/config: No such file" in out


class _Listener:
    """A TCP server on the host's loopback that counts connections."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.sendall(b"hello from the host\n")
            conn.close()


PROBE = ("python3 -c \"import socket,sys\n"
         "for host in sys.argv[1:]:\n"
         "  try:\n"
         "    s = socket.create_connection((host, {port}), timeout=2); print(host, 'CONNECTED', s.recv(100))\n"
         "  except OSError as e: print(host, 'FAILED', e)\" 127.0.0.1 1.1.1.1")


def test_no_network_unless_allowed(sh, vault):
    host = _Listener()
    out = sh(PROBE.format(port=host.port))
    assert "127.0.0.1 FAILED" in out and "1.1.1.1 FAILED" in out, out
    assert "CONNECTED" not in out and host.hits == 0
    # The same probe reaches the host once [exec] network = true (the test can tell).
    set_key(vault, "exec", "network", "true")
    staged = StagedVault(vault)
    with use_context(ToolContext(staged, "cli/default", NOW, load_settings(vault.root))):
        out = exec_(PROBE.format(port=host.port).replace(" 1.1.1.1", ""))
    assert "127.0.0.1 CONNECTED b'hello from the host" in out, out
    assert host.hits == 1


def test_the_environment_holds_no_secret(sh, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-key")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:bot-secret")
    out = sh("env; cat /proc/1/environ; cat /proc/$PPID/environ; "
             "for p in /proc/[0-9]*; do cat $p/environ; done 2>/dev/null | tr '\\0' '\\n'")
    assert "secret" not in out
    env = dict(line.split("=", 1) for line in out.split("stdout:\n")[1].splitlines()[:5]
               if "=" in line)
    assert set(env) <= {"PATH", "HOME", "LANG", "TMPDIR", "PWD"}
    assert env["HOME"] == "/vault/workspace"


def test_a_fork_bomb_is_contained_and_killed_at_the_limit(sh):
    token = uuid.uuid4().hex
    out = sh(f"echo {token} >/dev/null; bomb() {{ bomb | bomb & }}; bomb; sleep 30; "
             f"echo slept-{token}", timeout=3)
    # Contained either way: killed at the limit, or stopped by the process cap first
    # (on a busy machine the cap is reached before the shell gets to `sleep`).
    killed = status(out).startswith("exit status: killed after the time limit of 3 s")
    capped = "Cannot fork" in out and not status(out).startswith("exit status: 0")
    assert killed or capped, out
    assert f"slept-{token}" not in out      # the command's own 30 s sleep never finished
    wait_for(lambda: leftovers(token) == [], "every process of the bomb to be gone")


def test_a_command_that_never_ends_is_killed_with_its_children(sh):
    token = uuid.uuid4().hex
    start = time.monotonic()
    out = sh(f"(sleep 1000; echo {token}) & (trap '' TERM HUP; sleep 1000; echo {token}) & "
             f"echo started; sleep 1000", timeout=1)
    assert time.monotonic() - start > 0.9    # it had its second, it was not cut short
    assert "killed after the time limit of 1 s" in status(out)
    assert "started" in out
    # The children, even the one ignoring TERM and HUP, were killed with it: none is
    # left running (the wait only covers the kernel reaping them on a busy machine).
    wait_for(lambda: leftovers(token) == [], "the command's children to be gone")


def test_a_symlink_in_workspace_pointing_out_of_the_vault_leads_nowhere(sh, vault, tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("outside secret\n")
    secret.chmod(0o644)
    ws = vault.root / "workspace"
    ws.mkdir(exist_ok=True)
    os.symlink(secret, ws / "planted")               # planted by hand before the command
    os.symlink("..", ws / "up")
    out = sh("cat planted; echo pwned > up/MEMORY.md; ln -s /etc/hostname made; "
             f"ln -s {vault.root}/.git/config gitconf; cat gitconf; echo done")
    assert "outside secret" not in out and "[core]" not in out
    assert "Read-only file system" in out
    assert "pwned" not in (vault.root / "MEMORY.md").read_text()
    # The links a command made are files of the vault, but no tool follows them out.
    with use_context(ToolContext(sh.staged, "cli/default", NOW)):
        for name in ("planted", "made", "gitconf"):
            with pytest.raises(ToolError, match="outside the vault|off limits"):
                read_file(f"workspace/{name}")


def test_the_scratch_folder_itself_may_not_be_a_link(sh, vault, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (vault.root / "workspace").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UserError, match="must be a plain folder"):
        sh("echo pwned > x")
    assert list((tmp_path / "elsewhere").iterdir()) == []


# ---- limits and settings --------------------------------------------------------------


def test_long_output_keeps_head_and_tail_and_says_the_cut(sh):
    out = sh("seq 1 200000")
    body = out.split("stdout:\n")[1]
    assert body.startswith("1\n2\n3\n") and "200000\n" in body
    assert "bytes cut from the middle of this output" in body
    assert len(out) < sandbox.OUTPUT_CAP + 1000


def test_bad_timeouts_are_refused(sh):
    with pytest.raises(ToolError, match="at most 600 seconds"):
        sh("true", timeout=100000)
    with pytest.raises(ToolError, match="more than 0"):
        sh("true", timeout=0)


def test_a_read_only_sub_agent_cannot_write_even_workspace(sh, vault):
    out = sh("echo x > note.txt", readonly=True)
    assert "Read-only file system" in out
    assert not (vault.root / "workspace" / "note.txt").exists()


# ---- in a turn: offered or not, and committed ----------------------------------------


def test_what_a_command_writes_in_workspace_is_in_the_turns_commit(fake_anthropic, vault, run):
    ws = vault.root / "workspace"
    ws.mkdir(exist_ok=True)
    (ws / "hand.txt").write_text("typed by the user\n")
    fake_anthropic.add(reply(tool_use("exec", {"command": "echo 42 > answer.txt; env"})),
                       reply("The answer is in workspace/answer.txt"))
    os.environ["TELEGRAM_BOT_TOKEN"] = "123:bot-secret"
    try:
        r = run("chat", "-m", "compute the answer")
    finally:
        del os.environ["TELEGRAM_BOT_TOKEN"]
    assert r.exit_code == 0, r.output
    assert (ws / "answer.txt").read_text() == "42\n"
    assert subjects(vault)[:2] == ["chat(cli/default): compute the answer",
                                   "edit: workspace/hand.txt by hand"]
    files = vault.git("show", "--name-only", "--format=", "HEAD").split()
    assert "workspace/answer.txt" in files and "workspace/hand.txt" not in files
    assert vault.git("log", "-1", "--format=%an", "--", "workspace/hand.txt").strip() == "Test User"
    result = fake_anthropic.calls()[1].body["messages"][-1]["content"][0]["content"]
    assert result.startswith("exit status: 0") and "test-key" not in result
    assert "bot-secret" not in result
    assert vault.dirty_paths() == []


def test_exec_is_not_offered_when_turned_off(fake_anthropic, vault, run):
    set_key(vault, "exec", "enabled", "false")
    fake_anthropic.add(reply(tool_use("exec", {"command": "touch made"})), reply("ok"))
    assert run("chat", "-m", "try").exit_code == 0
    names = {t["name"] for t in fake_anthropic.calls()[0].body["tools"]}
    assert "exec" not in names and "read_file" in names
    result = fake_anthropic.calls()[1].body["messages"][-1]["content"][0]
    assert result["is_error"] and "[exec] enabled = false" in result["content"]
    assert not (vault.root / "workspace" / "made").exists()


@pytest.mark.slow
def test_without_bwrap_exec_is_not_offered_and_nothing_runs(fake_anthropic, vault, tmp_path):
    import shutil
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    os.symlink(shutil.which("git"), bin_ / "git")
    fake_anthropic.add(reply(tool_use("exec", {"command": "touch made"})), reply("ok"))
    p = agent_proc("chat", "-m", "try", vault=vault.root, env={"PATH": str(bin_)})
    assert p.returncode == 0, p.stderr
    names = {t["name"] for t in fake_anthropic.calls()[0].body["tools"]}
    assert "exec" not in names
    result = fake_anthropic.calls()[1].body["messages"][-1]["content"][0]
    assert result["is_error"] and "bwrap not found" in result["content"]
    assert "apt-get install bubblewrap" in result["content"]
    assert not (vault.root / "workspace" / "made").exists()


def test_settings_of_the_wrong_type_name_the_file(fake_anthropic, vault, run):
    set_key(vault, "exec", "network", '"yes"')
    r = run("chat", "-m", "hi")
    assert r.exit_code != 0
    assert "agent.toml" in r.output and "exec.network must be true or false" in r.output


# ---- memory and /tmp ----------------------------------------------------------------------


def test_a_command_past_its_memory_is_stopped_and_told_the_setting(sh):
    # RLIMIT_AS refuses the mapping at once: nothing near 2 GiB is ever touched.
    out = sh("python3 -c \"a = b'x' * (2 * 1024**3)\"; echo after")
    assert "MemoryError" in out
    assert "the command ran out of memory: [exec] memory is 1 GiB" in out
    ok = sh("python3 -c \"a = b'x' * (64 * 1024**2); print(len(a))\"")
    assert status(ok) == "exit status: 0" and "67108864" in ok
    assert "out of memory" not in ok


def test_the_memory_setting_is_read_from_agent_toml(sh, vault):
    set_key(vault, "exec", "memory", '"200M"')
    staged = StagedVault(vault)
    with use_context(ToolContext(staged, "cli/default", NOW, load_settings(vault.root))):
        out = exec_("python3 -c \"a = b'x' * (300 * 1024**2)\"")
    assert "MemoryError" in out and "[exec] memory is 200 MiB" in out


@pytest.mark.skipif(os.geteuid() != 0 or sandbox._cgroup_parent("memory") is None,
                    reason="a memory cgroup is made only as root, where one can be")
def test_many_processes_together_are_held_to_the_memory_setting(sh, vault):
    set_key(vault, "exec", "memory", '"64M"')
    staged = StagedVault(vault)
    with use_context(ToolContext(staged, "cli/default", NOW, load_settings(vault.root))):
        out = exec_("for i in 1 2 3 4; do python3 -c \"import time; a = b'x' * (40 * 1024**2); "
                    "time.sleep(1); print('alive')\" & done; wait")
    assert out.count("alive") < 4
    assert "the command ran out of memory: [exec] memory is 64 MiB" in out
    assert "of its processes killed for it" in out


def test_tmp_is_bounded_and_a_full_tmp_names_its_setting(sh, vault):
    assert "100M" in sh("df -h /tmp /dev/shm | tail -2")        # the default size
    set_key(vault, "exec", "tmp_size", '"8M"')
    staged = StagedVault(vault)
    with use_context(ToolContext(staged, "cli/default", NOW, load_settings(vault.root))):
        out = exec_("head -c 20M /dev/zero > /tmp/big; ls -l /tmp/big; "
                    "head -c 20M /dev/zero > /dev/shm/big; echo > /run/x; echo > /dev/x")
    assert "No space left on device" in out
    assert "/tmp and /dev/shm hold at most 8 MiB each ([exec] tmp_size" in out
    assert " 8388608 " in out                        # the file stopped at the size
    assert out.count("Read-only file system") == 2   # /run and /dev take no writes
    normal = sh("echo hello > /tmp/x && cat /tmp/x")
    assert status(normal) == "exit status: 0" and "hello" in normal
    assert "note:" not in normal


def test_a_file_past_the_sandboxs_size_limit_is_said(sh, vault, monkeypatch):
    monkeypatch.setattr(sandbox, "FSIZE", 1024 * 1024)
    out = sh("head -c 2M /dev/zero > big.bin; ls -l big.bin")
    assert " 1048576 " in out
    assert "note: a file the command writes may hold at most 1 MiB" in out


def test_memory_sizes_in_agent_toml_are_checked(vault, run):
    set_key(vault, "exec", "memory", "1024")
    r = run("note", "x")
    assert r.exit_code != 0
    assert "exec.memory must be a size" in r.output and '"1G"' in r.output
