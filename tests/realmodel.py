"""A real model server for the `real_model` tier: llama.cpp's `llama-server`, serving
SmolLM2-135M-Instruct, both from the package index and built once per machine by
scripts/llama_server.py (which `.ci/run` runs). A test that asks for the `llama` fixture
is skipped with the command that builds them when they are missing, and fails instead
in CI (AGENT_TESTS_REQUIRE_ALL=1: conftest.py).

    def test_x(llama, vault, run):
        use_llama(vault, llama)                 # agent.toml: model local/smollm2 at it
        run("chat", "-m", "hi")

`llama` is one server per test worker (started at the first test that asks, stopped at
the end); `LlamaServer.start()` makes another, for a test that kills its own. The paths
come from $AGENT_LLAMA_SERVER and $AGENT_LLAMA_MODEL, else from the script's cache.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALIAS = "smollm2"       # the name the server lists its model under (--alias)
# --jinja: the model's own chat template, which tool calls need. One thread: llama.cpp's
# threads spin while they wait for each other, and on a machine busy with a test suite
# two of them on two shared cores were slower than one by orders of magnitude (a 20-token
# reply took over ten minutes). --no-repack: kept from the builds made for this machine's
# CPU (GGML_NATIVE), where a CPU that reports AMX the system does not enable died with
# SIGILL repacking the weights for it; the portable build has no AMX code, and the flag
# keeps a server built by hand (AGENT_LLAMA_SERVER) safe too.
SERVE_FLAGS = ("--jinja", "-c", "8192", "-np", "1", "-t", "1", "--no-repack", "--no-webui")


def _script():
    spec = importlib.util.spec_from_file_location("llama_server_script",
                                                  ROOT / "scripts" / "llama_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _paths() -> tuple[Path, Path]:
    script = _script()
    server = os.environ.get("AGENT_LLAMA_SERVER") or str(script.server_path())
    model = os.environ.get("AGENT_LLAMA_MODEL") or str(script.model_path())
    return Path(server), Path(model)


def template() -> Path:
    """The chat template the model is served with (scripts/llama_server.py says why)."""
    return _PATHS[0].parent / _script().TEMPLATE_FILE


# Read once, as the suite starts: each test then runs with a HOME of its own
# (conftest.isolated_env), where the cache would be looked for in vain.
_PATHS = _paths()


def paths() -> tuple[Path, Path]:
    """(the llama-server binary, the GGUF model) this machine has, or would have."""
    return _PATHS


def missing() -> str | None:
    """Why the tier cannot run here (None: it can)."""
    server, model = paths()
    gone = [str(p) for p in (server, model, template()) if not p.is_file()]
    if gone:
        return (f"no llama-server or model at {', '.join(gone)}: build them with "
                f"`python scripts/llama_server.py all` (docs/contributing.md)")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """One llama-server process on 127.0.0.1, its log in `log`."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.log = log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @classmethod
    def start(cls, where: Path, *, alias: str | None = ALIAS, extra: tuple[str, ...] = (),
              limit: float = 120.0) -> "LlamaServer":
        """Started and answering /health (its model loaded). `limit` only ends a server
        that never comes up: it is no measure of anything."""
        server, model = paths()
        where.mkdir(parents=True, exist_ok=True)
        for _ in range(3):              # a port taken between the probe and the bind
            port = free_port()
            log = where / f"llama-server-{port}.log"
            cmd = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                   *SERVE_FLAGS, "--chat-template-file", str(template()), *extra]
            if alias:
                cmd += ["--alias", alias]
            with open(log, "wb") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
            me = cls(proc, port, log)
            if me._healthy(limit):
                return me
            me.stop()
            if "bind" not in log.read_text(errors="replace").lower():
                break
        raise AssertionError(f"llama-server did not start: {log.read_text(errors='replace')[-2000:]}")

    def _healthy(self, limit: float) -> bool:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass            # loading the model answers 503, and before that nothing
            time.sleep(0.1)
        return False

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would."""
        self.proc.kill()
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()



class KillMidReply:
    """A TCP relay between the agent and `server` that kills the server (SIGKILL) the
    moment the first word of a reply has passed through it, and cuts the connection
    there. Watching the server's /slots for the same moment raced it: a quick machine
    could finish a short reply between two looks, and the test then saw no death at all."""

    FIRST_WORD = re.compile(rb'"content":"[^"]')

    def __init__(self, server: LlamaServer) -> None:
        self.server = server
        self.killed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.server.port), timeout=600)
        except OSError:
            client.close()          # the server is gone: as its port would, refuse
            return
        def up() -> None:
            try:
                while data := client.recv(65536):
                    upstream.sendall(data)
            except OSError:
                pass
        threading.Thread(target=up, daemon=True).start()
        seen = b""
        try:
            while data := upstream.recv(65536):
                seen = (seen + data)[-4096:]
                if self.FIRST_WORD.search(seen):
                    client.sendall(data)
                    self.server.kill()
                    self.killed.set()
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._listener.close()


def use_llama(vault, server: LlamaServer, *, model: str = ALIAS, extra: str = "",
              fallbacks: tuple[str, ...] = (), tables: tuple[tuple[str, str], ...] = (),
              provider: str = "") -> None:
    """agent.toml set up as docs/providers.md says for llama-server: the model
    `local/<model>` at `server`, no fallback unless given, `extra` lines in [model],
    `provider` lines in [providers.local] (sampling options), and more
    OpenAI-compatible providers as (name, url)."""
    path = vault.root / "agent.toml"
    text = path.read_text()
    start = text.index("[model]\n")
    end = text.index("\n\n", start)
    chain = ", ".join(f'"{m}"' for m in fallbacks)
    text = (f'{text[:start]}[model]\nname = "local/{model}"\nfallbacks = [{chain}]\n{extra}'
            f'{text[end:]}')
    for name, url in (("local", server.url), *tables):
        text += f'\n[providers.{name}]\napi = "openai"\nbase_url = "{url}"\nkey_env = ""\n'
        if name == "local":
            text += provider
    path.write_text(text)


@pytest.fixture(scope="session")
def llama(tmp_path_factory):
    """llama-server with SmolLM2-135M-Instruct, one per test worker."""
    why = missing()
    if why:
        pytest.skip(why)
    server = LlamaServer.start(tmp_path_factory.mktemp("llama"))
    yield server
    server.stop()


@pytest.fixture
def own_llama(tmp_path):
    """A llama-server of this test's own (it may kill it)."""
    why = missing()
    if why:
        pytest.skip(why)
    server = LlamaServer.start(tmp_path / "llama")
    yield server
    server.stop()


@pytest.fixture
def endless_llama(tmp_path):
    """A llama-server of this test's own that never ends a reply (--ignore-eos): a
    runaway on every machine, where a sampled model might otherwise stop early."""
    why = missing()
    if why:
        pytest.skip(why)
    server = LlamaServer.start(tmp_path / "llama", extra=("--ignore-eos",))
    yield server
    server.stop()
