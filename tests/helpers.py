"""Helpers several test modules share, so that no test module imports another: the CLI
run in-process and plain git, clones of a bare remote and trees pushed with plumbing, the
forget tests' planted phrase, the review dream's seeded vault and its scripted replies,
`agent mcp` driven by the SDK's client, serve's router of conversations and its
transcripts, `agent serve` in process and as a process, the gateway, Telegram, `agent chat`
on a pseudo-terminal, and the web page in Chromium. (Fixtures live in conftest.py.)"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters
from mcp.server.lowlevel import Server as McpServer
from mcp_types import Implementation

from agent import sandbox
from agent.cli.app import cli
from agent.clock import now as vault_now
from agent.config import load_settings
from agent.llm import make_provider
from agent.mcp_server.server import build as build_mcp_server
from agent.serve.channels.telegram import TelegramChannel
from agent.serve.conversations import Conversations
from agent.serve.loop import Server
from agent.ops.vaults import open_vault
from agent.stores import sessions
from agent.vault.repo import Vault
from conftest import ROOT, agent_proc
from dreamkit import finding, op, write_entries
from fakeanthropic import json_reply

# ---- the CLI and git ----------------------------------------------------------------------


def agent(vault_path, *args, ok=True):
    """`agent --vault PATH ARGS...` in-process; asserts exit 0 unless `ok=False`."""
    result = CliRunner().invoke(cli, ["--vault", str(vault_path), *args], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def git(cwd, *args, input=None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=input, check=True,
                          capture_output=True, text=True).stdout


# ---- providers --------------------------------------------------------------------------------


def use(vault, model: str, *tables: tuple[str, str], extra: str = "") -> None:
    """agent.toml's [model] table naming `model` (and `extra` lines), with an
    OpenAI-compatible [providers.NAME] table for each (name, url)."""
    path = vault.root / "agent.toml"
    text = path.read_text()
    start = text.index("[model]\n")
    end = text.index("\n\n", start)
    text = f'{text[:start]}[model]\nname = "{model}"\n{extra}{text[end:]}'
    for name, url in tables:
        text += f'\n[providers.{name}]\napi = "openai"\nbase_url = "{url}"\nkey_env = ""\n'
    path.write_text(text)


# ---- sync: clones and a remote's pushes ------------------------------------------------------


def clone(tmp_path, remote, name, *, accept=True) -> Vault:
    """`agent clone` of the person's own vault on another machine; with `accept`, they
    then take what the clone held (its settings, jobs, heartbeats: `agent sync accept`)."""
    result = CliRunner().invoke(cli, ["clone", str(remote), str(tmp_path / name)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    if accept and "held:" in result.output:
        agent(tmp_path / name, "sync", "accept")
    return open_vault(tmp_path / name)


def with_a_job(remote, vault):
    """The remote after `vault` synced a cron job to it (what an attacker would change)."""
    agent(vault.root, "cron", "add", "water", "--every", "1h", "--message", "water the plants")
    agent(vault.root, "sync")
    return remote


def push(evil, message="update"):
    """Commit everything in a plain git clone and push it to the remote's main."""
    git(evil, "add", "-A")
    git(evil, "commit", "-qm", message)
    git(evil, "push", "-q", "origin", "HEAD:main")


# ---- forget: a planted phrase --------------------------------------------------------------

PHRASE = 'the safe code is "4417" under the fernwood'


def every_object(path) -> bytes:
    return subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=path,
                          capture_output=True, check=True).stdout


def holds(vault, phrase: str = PHRASE, word: str = "fernwood") -> list[str]:
    """Every place of a clone that still holds the phrase (or its JSON-escaped form)."""
    forms = [phrase, json.dumps(phrase)[1:-1]]
    places = []
    log = vault.git("log", "--all", "-p")
    if any(f in log for f in forms):
        places.append("git log --all -p")
    blob = every_object(vault.root)
    if any(f.encode() in blob for f in forms):
        places.append("git cat-file --batch-all-objects")
    for path in vault.root.rglob("*"):
        if path.is_file() and ".git" not in path.parts and ".agent" not in path.parts:
            if any(f in path.read_text(errors="replace") for f in forms):
                places.append(str(path.relative_to(vault.root)))
    found = agent(vault.root, "search", word, ok=False)
    if found.exit_code != 1 or not found.output.startswith("No matches"):   # grep's exit 1
        places.append("agent search")
    return places


# ---- review: a dream that proposes ---------------------------------------------------------

MEMORY = "# Memory\n\n## Facts\n\n- The team uses Postgres 16\n"
USER = "# User\n\n## About\n\n- Lives in Berlin\n- Prefers tea to coffee\n"
LISBON = "- Lives in Lisbon (since 2026-11-13)"
KYOTO = "- Flying to Kyoto on 2026-12-03"


def seed(vault):
    """Facts by hand, then two archive entries: a trip, and a move."""
    (vault.root / "MEMORY.md").write_text(MEMORY)
    (vault.root / "USER.md").write_text(USER)
    vault.git("add", "-A")
    vault.git("commit", "-q", "-m", "edit: facts by hand")
    write_entries(vault, ["Planned the Kyoto trip; flights booked for 3 December.",
                          {"summary": "The user moved from Berlin to Lisbon last week.",
                           "message": "I moved from Berlin to Lisbon last week!"}])
    return vault


def script(server, *, first=1, second=2):
    """The dream's two replies: a trip to add to MEMORY.md, a move updating USER.md."""
    server.add(json_reply({"findings": [
        finding("Flying to Kyoto on 2026-12-03", evidence=[f"archive:{first}"]),
        finding("The user lives in Lisbon", kind="update", file="USER.md",
                evidence=[f"archive:{second}"])]}))
    server.add(json_reply({"ops": [
        op("add", section="Travel", new=KYOTO, reason=f"archive:{first}: flights booked"),
        op("update", "USER.md", old="- Lives in Berlin", new=LISBON,
           reason=f"archive:{second}: moved last week")]}))


def read(vault, rel):
    return (vault.root / rel).read_text()


# ---- agent mcp, driven by the SDK's client (in process, or over stdio) -------------------


@asynccontextmanager
async def connect(vault, *args, name="Claude Code", mode="legacy", process=False):
    """The SDK's client on the server `agent mcp ARGS` builds: in this process, on the SDK's
    in-memory transport (a process would cost its start, the MCP SDK's import, a second),
    or with process=True as a client runs it, a process spoken to over stdio."""
    target: McpServer | StdioServerParameters
    if process:
        target = StdioServerParameters(
            command=sys.executable, args=["-m", "agent", "--vault", str(vault.root), "mcp", *args],
            env=dict(os.environ))
    else:
        assert set(args) <= {"--read-only", "--review"}, args
        target = build_mcp_server(open_vault(vault.root),
                                  read_only="--read-only" in args,
                                  **({"review": True} if "--review" in args else {}))
    async with Client(target, client_info=Implementation(name=name, version="9.9"),
                      mode=mode) as client:
        yield client


def text_of(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def drive(vault, steps, *args, **kw):
    """Run `steps(client)` against a fresh `agent mcp`; its return value."""
    out = {}

    async def main():
        async with connect(vault, *args, **kw) as client:
            out["value"] = await steps(client)
    anyio.run(main)
    return out.get("value")


# ---- serve's router of conversations -------------------------------------------------------


def router(vault, **settings) -> Conversations:
    base = load_settings(vault.root)
    s = dataclasses.replace(base, **settings) if settings else base
    return Conversations(vault, make_provider(), clock=vault_now, settings_fn=lambda: s)


def after(event: threading.Event, item, timeout=10.0):
    """A scripted reply the fake gives only once `event` is set (the test's cue)."""
    def answer(_request):
        assert event.wait(timeout), "the test never gave the cue"
        return item
    return answer


def transcript(vault, session) -> list[dict]:
    """The session's messages (not the lines saying a message was received)."""
    files = sorted((vault.root / "sessions" / session).glob("*.jsonl"))
    lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
    return [x for x in lines if x.get("type") != "received"]


# ---- agent serve, in process and as a process -----------------------------------------------


T0 = datetime(2026, 11, 20, 10, 0, tzinfo=timezone.utc)


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def server_at(vault, t, *, compact=True) -> tuple[Server, Clock]:
    clock = Clock(t)
    s = Server(vault, make_provider(), clock=clock, tick=1)
    if not compact:
        s.settings.idle_compact_minutes = 0
    s.watching_since = t
    s.reload(t, first=True)
    return s, clock


def jobs_json(vault) -> list[dict]:
    return json.loads((vault.root / "cron.json").read_text())["jobs"]


def heartbeat_file(vault, name, front, body="Check the notes. If nothing needs attention, "
                                              "reply exactly HEARTBEAT_OK."):
    path = vault.root / "heartbeat" / f"{name}.md"
    path.write_text(f"---\n{front}---\n{body}\n")
    vault.git("add", str(path))
    vault.git("commit", "-q", "-m", f"heartbeat {name}")


class ServeProc:
    """`agent serve` in its own process; its output is collected line by line."""

    def __init__(self, vault, *args, tick="0.2", env=None):
        self.p = subprocess.Popen(
            [sys.executable, "-m", "agent", "--vault", str(vault.root), "serve", "--tick", tick,
             *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text, timeout=30.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(text in line for line in self.lines):
                return
            if self.p.poll() is not None:
                self._t.join(2)
                if any(text in line for line in self.lines):
                    return
                raise AssertionError(f"serve exited ({self.p.returncode}) before {text!r}:\n{self.output}")
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} within {timeout}s:\n{self.output}")

    def stop(self, sig=signal.SIGTERM, timeout=40) -> int:
        """Signal serve (unless it has left) and wait for its exit status."""
        if self.p.poll() is None:
            self.p.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout=40) -> int:
        """Wait for serve to leave on its own, after a signal the test sent: a second
        SIGTERM from stop() would interrupt the turn the first lets finish."""
        code = self.p.wait(timeout)
        self._t.join(2)
        return code

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(10)


# ---- the gateway: over HTTP, and a raw socket's answer --------------------------------------


def enable_gateway(vault):
    path = vault.root / "agent.toml"
    path.write_text(path.read_text() + "\n[gateway]\nport = 0\n")
    vault.git("commit", "-q", "-am", "gateway on")


def http(gw, method, path, body=None, *, token="right", accept=None, raw=None, headers=None):
    """(status, parsed JSON or text) of one request to the gateway."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(gw.url + path, data=data, method=method)
    if token == "right":
        req.add_header("Authorization", f"Bearer {gw.token}")
    elif token is not None:
        req.add_header("Authorization", token)
    if accept:
        req.add_header("Accept", accept)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


MSG = "/v1/sessions/gateway/phone/messages"


def answer(s: socket.socket) -> bytes:
    """Everything the server sends until it closes (b"": closed with no answer)."""
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


# ---- Telegram: the channel in process, its users and sessions -------------------------------


ANA = 42                # an allowed user (her private chat has the same id)
EVE = 666               # a stranger


def configure_telegram(vault, api_base, allow=(ANA,), enabled=True):
    ids = ", ".join(str(i) for i in allow)
    (vault.root / "agent.toml").write_text(
        f"[channels.telegram]\nenabled = {'true' if enabled else 'false'}\n"
        f"allow_from = [{ids}]\napi_base = \"{api_base}\"\n")
    vault.git("add", "agent.toml")
    vault.git("commit", "-q", "-m", "telegram settings")
    # The token goes to the stand-in Bot API: this machine (the test's home) says it may.
    from agent.config import keys
    keys.approve(keys.telegram_pair(api_base), datetime.now(timezone.utc))


class Running:
    """The channel and its router, in process."""

    def __init__(self, vault, fake_telegram, token=None):
        self.settings = load_settings(vault.root)
        provider = make_provider()
        self.router = Conversations(vault, provider, clock=vault_now,
                                    settings_fn=lambda: self.settings)
        self.channel = TelegramChannel(vault, self.router, provider,
                                       token=token or fake_telegram.token,
                                       settings=self.settings, clock=vault_now,
                                       settings_fn=lambda: self.settings)
        self.channel.start()

    def stop(self):
        self.channel.stop_polling()
        self.router.drain(20)
        self.channel.close()


def session_messages(vault, key, *, receipts=False):
    """The session's messages (with `receipts`, also the lines saying a message was
    received, written before its turn ran: agent/serve/receipts.py)."""
    out = []
    for f in sorted((vault.root / "sessions" / key).glob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines()]
    return out if receipts else [line for line in out if line.get("type") != "received"]


def telegram_vault(vault, fake_telegram, fake_anthropic):
    """Telegram on (for ANA), the seeded facts and entries, and the scripted dream."""
    configure_telegram(vault, fake_telegram.url)
    seed(vault)
    script(fake_anthropic)


# ---- agent chat: its session, and the terminal conversation ---------------------------------


def session_lines(vault, key="cli/default") -> list[dict]:
    return sessions.Session(vault.root, key).lines()


class Terminal:
    """`agent chat` on a pseudo-terminal, as a person runs it."""

    def __init__(self, vault, *args):
        import pty
        env = dict(os.environ, PYTHONPATH=str(ROOT), TERM="dumb")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvpe(sys.executable, [sys.executable, "-m", "agent", "--vault",
                                        str(vault.root), "chat", *args], env)
        self.out, self.pos = b"", 0

    def _read(self, deadline: float) -> bool | None:
        """Add what the program wrote by `deadline` to `out`: True when it wrote, False
        at its end (EOF), None when the deadline passed. select first: a read on a quiet
        terminal would wait past the deadline."""
        import select
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.fd], [], [], left)[0]:
            return None
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:
            return False
        self.out += chunk
        return bool(chunk)

    def until(self, marker: bytes, timeout: float = 60) -> None:
        """Wait for `marker` in the output after what was already waited for."""
        deadline = time.monotonic() + timeout
        while marker not in self.out[self.pos:]:
            got = self._read(deadline)
            assert got is not None, f"no {marker!r} after {timeout}s:\n" + self.out.decode(errors="replace")
            if not got:
                break
        assert marker in self.out[self.pos:], self.out.decode(errors="replace")
        self.pos = self.out.index(marker, self.pos) + len(marker)

    def send(self, keys: str, marker: bytes | None = None) -> None:
        os.write(self.fd, keys.encode())
        if marker:
            self.until(marker)

    def ctrl_c_at_prompt(self) -> None:
        """Ctrl-C at the prompt, pressed again while the program has not left.

        Python's input() loses a SIGINT that lands between drawing the prompt and
        waiting for a key (readline only checks signals when its wait is interrupted);
        a person never presses that fast, a test does, so it presses again as they would.
        """
        for _ in range(20):
            os.write(self.fd, b"\x03")
            if self._read(time.monotonic() + 1.0) is not None:
                return
        raise AssertionError("Ctrl-C at the prompt was not heard:\n" + self.out.decode(errors="replace"))

    def exit_status(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while True:                      # drain, so the child never blocks on a full pty
            got = self._read(deadline)
            if got is None:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
                raise AssertionError("agent chat did not exit:\n" + self.out.decode(errors="replace"))
            if not got:
                break
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.WEXITSTATUS(status)


# ---- sync: trees pushed with plumbing, serve syncing on its own -----------------------------


def mktree(evil, entries: list[str]) -> str:
    return git(evil, "mktree", input="".join(e + "\n" for e in entries)).strip()


def blob(evil, data: str) -> str:
    return git(evil, "hash-object", "-w", "--stdin", input=data).strip()


def push_tree(evil, extra: list[str]) -> None:
    """Commit HEAD's tree plus `extra` root entries with plumbing (plain git refuses
    such paths in a work tree, but not in a pushed tree) and push it."""
    root = git(evil, "ls-tree", "HEAD").splitlines()
    tree = mktree(evil, root + extra)
    sha = git(evil, "commit-tree", tree, "-p", "HEAD", "-m", "edit: nothing to see").strip()
    git(evil, "push", "-q", "origin", f"{sha}:refs/heads/main")


def serve(vault, t):
    """`agent serve` in process, at the time the test sets (idle compaction off)."""
    return server_at(vault, t, compact=False)


def set_every(vault, every="5m"):
    with (vault.root / "agent.toml").open("a") as f:
        f.write(f'\n[sync]\nevery = "{every}"\n')
    agent(vault.root, "note", "sync on its own")


# ---- the vault's limits: the sandbox, tool results, the history -----------------------------


needs_bwrap = pytest.mark.skipif(not sandbox.sandbox_status().ok,
                                 reason=f"no sandbox here: {sandbox.sandbox_status().message}")


def tool_result(fake_anthropic, call: int) -> str:
    return fake_anthropic.calls()[call].body["messages"][-1]["content"][0]["content"]


def history(vault) -> str:
    return vault.git("log", "--all", "--stat=200", "--format=%s")


# ---- MCP servers in agent.toml, imports, $EDITOR, today's notes, completion -----------------


def configure_mcp(vault, body: str, approve: bool = True) -> None:
    """Add `body` to agent.toml, commit it, and approve its servers on this machine as
    the person would (`agent mcp approve NAME --yes`)."""
    path = vault.root / "agent.toml"
    path.write_text(path.read_text() + "\n" + body)
    vault.git("commit", "-qam", "edit: agent.toml by hand")
    for name in re.findall(r"^\[mcp\.servers\.([^\]]+)\]", body, re.M) if approve else []:
        r = CliRunner().invoke(cli, ["--vault", str(vault.root), "mcp", "approve", name, "--yes"])
        assert r.exit_code == 0 and f"Approved {name} on this machine." in r.output, r.output


def write_import(tmp_path, lines, name="talk.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines),
                    encoding="utf-8")
    return path


def editor(tmp_path, script: str) -> str:
    """An $EDITOR command running `script` (python) on the file it is given."""
    path = tmp_path / "editor.py"
    path.write_text("import sys\np = sys.argv[1]\n" + script)
    return f"{sys.executable} {path}"


def today_lines(vault: Vault) -> str:
    return "".join(p.read_text() for p in sorted((vault.root / "memory").glob("*.md")))


def complete(vault, monkeypatch, *words: str, cwd=None) -> list[str]:
    """What bash completion offers after `agent WORDS...` (the last word being typed).
    In-process, as the shell's hook runs it (test_completion.py also starts the real program)."""
    words = ["agent", *words]
    monkeypatch.chdir(cwd or vault.root)
    r = CliRunner().invoke(cli, [], prog_name="agent", catch_exceptions=False,
                           env={"_AGENT_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(words),
                                "COMP_CWORD": str(len(words) - 1)})
    assert r.exit_code == 0, r.output
    return [line.split(",", 1)[1] for line in r.stdout.splitlines() if "," in line]


# ---- the web page in Chromium (the `browser` fixture: conftest.py) --------------------------


SHOTS = Path(os.environ.get("AGENT_SCREENSHOTS") or Path(tempfile.gettempdir()) / "agent-web-shots")
SIZES = {"laptop": (1280, 800), "phone": (390, 844)}


def wait(driver, condition, timeout=30.0):
    """Wait until `condition(driver)` is true (its value), else fail saying what.

    An element read while htmx swaps the part of the page that holds it goes stale
    mid-read: that is a condition not met yet, asked again at the next poll."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05,
                         ignored_exceptions=[StaleElementReferenceException]).until(condition)


def css(driver, selector):
    from selenium.webdriver.common.by import By
    return driver.find_elements(By.CSS_SELECTOR, selector)


def shoot(driver, name: str) -> None:
    """The page as it is, at a laptop's and at a phone's width."""
    for size, (w, h) in SIZES.items():
        driver.set_window_size(w, h)
        driver.execute_script("return document.fonts ? document.fonts.ready : null")
        driver.save_screenshot(str(SHOTS / f"{name}-{size}.png"))
    driver.set_window_size(*SIZES["laptop"])


class Page:
    """A running serve with its web page, and the browser logged in to it."""

    def __init__(self, vault, driver, procs):
        enable_gateway(vault)
        self.vault = vault
        self.serve = ServeProc(vault)
        procs.append(self.serve)
        self.serve.wait_for("agent serve on")
        info = json.loads((vault.state / "gateway.json").read_text())
        self.origin = info["url"]
        self.port = info["port"]
        self.driver = driver

    def login_url(self) -> str:
        p = agent_proc("web", "--no-open", vault=self.vault.root, timeout=60)
        assert p.returncode == 0, p.stderr + self.serve.output
        url = re.search(r"http://\S+/login\?code=\S+", p.stdout).group(0)
        assert url.startswith(self.origin + "/login?code=")
        return url

    def login(self) -> None:
        self.driver.delete_all_cookies()
        self.driver.get(self.login_url())
        wait(self.driver, lambda d: urlsplit(d.current_url).path == "/")

    def open(self, path: str) -> None:
        self.driver.get(self.origin + path)
        wait(self.driver, lambda d: d.execute_script("return document.readyState") == "complete")

    def cookie(self) -> str:
        c = self.driver.get_cookie(f"agent_session_{self.port}")
        return f"{c['name']}={c['value']}"
