"""Shared fixtures: each test gets its own vault under tmp_path, a test git identity,
and no way to reach a real home folder, git config or API key."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.cli.app import cli
from agent.ops.vaults import init_vault, open_vault
from agent.vault.repo import Vault

# The stand-in servers (Anthropic, OpenAI-compatible, Telegram) and the real model server
# (llama-server): their fixtures, for every test.
pytest_plugins = ["fakeanthropic", "fakeopenai", "faketelegram", "realmodel"]

ROOT = Path(__file__).resolve().parent.parent

# Some machines set PYTHONDONTWRITEBYTECODE: then every `agent` process the suite starts
# (hundreds) would compile the package from source, and each worker would rewrite every
# test module's asserts again. Compile the package once, in the controller, and let the
# workers cache what they rewrite.
sys.dont_write_bytecode = False


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        import compileall
        compileall.compile_dir(ROOT / "agent", quiet=1)


@pytest.hookimpl(optionalhook=True)     # run without xdist (`-p no:xdist`), it is not called
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: two workers a core, at most 16. Most scenarios spend their time waiting
    on a process they started (`agent serve`, `agent chat` on a terminal, git, Chromium),
    so one worker a core left a quarter of the CPU idle (docs/benchmarks.md, "Half of the
    baseline")."""
    return min(2 * _cores(), 16)        # (each worker may start Chromium: mind the memory)


def _cores() -> int:
    """The cores this process may use: its CPU affinity, lowered by a cgroup's quota (a
    container can see all of the host's cores and be allowed two)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, round(int(quota) / int(period))))
    except (OSError, ValueError):
        pass        # no cgroup v2 limit to read: the affinity is the limit
    return max(1, cores)


# A runner started in the background by a script (`pytest &`) ignores SIGINT, and every
# program a test starts would inherit that: the Ctrl-C tests would then fail, or test
# nothing. Take the default back (a handler, unlike SIG_IGN, is not inherited by exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[user]\n\tname = Test User\n\temail = test@example.com\n"
                         "[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    # This machine's key for encrypted remotes lives under the test's home, never the real one.
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("AGENT_KEY_FILE", raising=False)
    # The width tables are cut to: the same whatever terminal (or none, as in a parallel
    # worker) runs the suite.
    monkeypatch.setenv("COLUMNS", "100")
    for var in ("AGENT_VAULT", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN",
                "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
                "TELEGRAM_BOT_TOKEN", "AGENT_NOW", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                "XDG_CONFIG_HOME"):       # approvals of keys: the test's home, no other
        monkeypatch.delenv(var, raising=False)
    return home


# The instant `fixed_now` gives every command (through AGENT_NOW): a test asserts the exact
# day's file instead of computing today after the command ran (and racing midnight).
NOW = datetime(2030, 1, 1, 10, 0, tzinfo=timezone.utc)
TODAY_NOTE = "memory/2030-01-01.md"


@pytest.fixture
def fixed_now(monkeypatch) -> datetime:
    """Fix the clock of every command this test runs (in-process or not) at NOW."""
    monkeypatch.setenv("AGENT_NOW", NOW.isoformat())
    return NOW


# A new vault is 35 git processes; a copy of one made once is none. One template for each
# setting `agent init` depends on (the clock, git's identity), made the first time a test of
# this worker asks for a vault with it.
_TEMPLATES: dict[tuple, Path] = {}
_PER_TEST = {"HOME", "GIT_CONFIG_GLOBAL", "GIT_CEILING_DIRECTORIES"}


def _template_key() -> tuple:
    env = tuple(sorted((k, v) for k, v in os.environ.items()
                       if k.startswith(("AGENT_", "GIT_")) and k not in _PER_TEST))
    config = Path(os.environ.get("GIT_CONFIG_GLOBAL", os.devnull))
    return env, config.read_text() if config.is_file() else None


@pytest.fixture
def vault(tmp_path, tmp_path_factory) -> Vault:
    """A new vault, as `agent init` makes it, at tmp_path/vault."""
    key = _template_key()
    template = _TEMPLATES.get(key)
    if template is None:
        template = tmp_path_factory.mktemp("template") / "vault"
        _, what = init_vault(template)
        assert what == "created"
        _TEMPLATES[key] = template
    shutil.copytree(template, tmp_path / "vault", symlinks=True)
    return open_vault(tmp_path / "vault")


@pytest.fixture
def run(vault):
    """Run the real CLI in-process on the test vault: run("note", "hi") -> click Result."""
    def _run(*args, input=None, vault_path=None):
        runner = CliRunner()
        return runner.invoke(cli, ["--vault", str(vault_path or vault.root), *args],
                             input=input, catch_exceptions=False)
    return _run


@pytest.fixture
def procs():
    """Processes a test starts (`agent serve`: helpers.ServeProc), killed at its end
    whatever happened."""
    started: list = []
    yield started
    for p in started:
        p.kill()


@pytest.fixture
def remote(tmp_path, vault):
    """A bare remote holding the test vault, which is machine A."""
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    vault.git("remote", "add", "origin", str(bare))
    out = CliRunner().invoke(cli, ["--vault", str(vault.root), "sync"], catch_exceptions=False)
    assert out.exit_code == 0 and "0 commits in" in out.output, out.output
    return bare


@pytest.fixture
def evil(tmp_path, remote):
    """The malicious side of a sync: a plain git clone of the remote, its own author."""
    path = tmp_path / "evil"
    subprocess.run(["git", "clone", "-q", str(remote), str(path)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(path), "config", "user.name", "Mallory"], check=True)
    subprocess.run(["git", "-C", str(path), "config", "user.email", "mallory@evil.example"], check=True)
    return path


@pytest.fixture
def gateway(vault, fake_anthropic):
    """`agent serve`'s HTTP gateway in process, on a free port, with its router."""
    from agent.serve.gateway import Gateway
    from helpers import router
    conv = router(vault)
    gw = Gateway(vault, conv, port=0).start()
    yield gw
    gw.close(5)
    conv.drain(10)


@pytest.fixture
def tg(vault, fake_telegram, fake_anthropic):
    """The Telegram channel and its router in process, on the fake Bot API."""
    from helpers import ANA, Running, configure_telegram
    configure_telegram(vault, fake_telegram.url, allow=(ANA,))
    running = Running(vault, fake_telegram)
    yield running
    running.stop()


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's headless Chromium through Selenium (chromedriver from the system: Selenium
    Manager downloads nothing), one for each test module that asks for it."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("no /usr/bin/chromium and /usr/bin/chromedriver (apt-get install "
                    "chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,800",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    from helpers import SHOTS
    SHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots of the web page: {SHOTS}")
    try:
        yield driver
    finally:
        driver.quit()


def agent_proc(*args, vault=None, env=None, **kw) -> subprocess.CompletedProcess:
    """Run `agent` as a separate process (python -m agent)."""
    cmd = [sys.executable, "-m", "agent"]
    if vault is not None:
        cmd += ["--vault", str(vault)]
    full_env = os.environ.copy()
    full_env.update(env or {})
    if "input" not in kw:       # never the test runner's own stdin: `chat -m` reads a pipe
        kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(cmd + list(args), capture_output=True, text=True, env=full_env, **kw)


def wait_for(condition, what: str, limit: float = 60.0):
    """Poll `condition` until it is truthy and return its value. The limit only ends a
    test that would otherwise hang: it is generous, never the behaviour under test."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def vault_lock_held(vault: Vault) -> bool:
    """Whether some process holds the vault's lock (the flock on .agent/lock)."""
    import fcntl
    path = vault.root / ".agent" / "lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)            # (closing lets go of a lock taken here)
    return False


def subjects(vault: Vault, *paths: str) -> list[str]:
    """Commit subjects, newest first."""
    out = vault.git("log", "--format=%s", "--", *paths) if paths else vault.git("log", "--format=%s")
    return out.splitlines()


def authors(vault: Vault) -> list[str]:
    return vault.git("log", "--format=%an <%ae>").splitlines()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With AGENT_TESTS_REQUIRE_ALL=1 (set by .ci/run) a skipped test fails: CI has bwrap
    and the embed extra, so a skip there means a sandbox or model test silently did not run
    (user namespaces blocked, the extra missing) and the suite would pass without them."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("AGENT_TESTS_REQUIRE_ALL") == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"skipped where every test must run (AGENT_TESTS_REQUIRE_ALL=1): "
                           f"{reason}")


# What makes a scenario slow: it starts `agent serve` (the `procs` fixture) or a real
# model server, drives a browser, or builds thousands of messages. `-m "not slow"` runs
# the rest in a minute.
SLOW_FIXTURES = {"procs", "llama", "own_llama", "endless_llama"}
SLOW_MODULES = {"test_webpage", "test_scale"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if (SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
                or item.module.__name__ in SLOW_MODULES):
            item.add_marker(pytest.mark.slow)
