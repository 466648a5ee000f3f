"""The one git runner: every git process the agent starts is started here.

Each runs with the same settings, whoever asks (the vault, sync, history, forget):
the vault's hooks never run, no signing key or editor is asked for, no file-system
monitor starts, paths are not quoted, and every filter driver git's config defines is
switched off (a clean/smudge/process filter named in .gitattributes would run a
command of the config on every add or checkout). Output is text (undecodable bytes
kept as surrogates) or, with `text=False`, bytes.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from agent.errors import UserError

# Every git call: never run the vault's hooks, never ask for a signing key or an editor,
# never start a file-system monitor; filter drivers are switched off per repository
# (no_filters).
# And `git remote-agent-crypt`, which git runs for a remote whose URL starts with
# `agent-crypt::` (an encrypted remote: agent.sync.crypt), is this Python's helper: git
# takes the alias when no `git-remote-agent-crypt` (the package's console script) is on
# PATH, as when the agent runs from a virtualenv that is not activated.
BASE = ("-c", "core.hooksPath=/dev/null", "-c", "commit.gpgSign=false",
        "-c", "core.quotePath=false", "-c", "core.fsmonitor=false",
        "-c", f"alias.remote-agent-crypt=!{shlex.quote(sys.executable)} -m agent.sync.crypt.helper")


class VaultError(UserError):
    """A problem a user can fix; the message says what and how."""


# Where git runs: a folder, or None for this process's current one.
Cwd = str | os.PathLike[str] | None


class GitError(VaultError):
    def __init__(self, args: Sequence[str], returncode: int, stderr: str):
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"git {' '.join(args)} failed ({returncode}): {stderr.strip()}")


_FILTERS: dict[str, tuple[str, ...]] = {}


def filters_key(cwd: Cwd) -> str:
    """What no_filters' answer for `cwd` depends on: the folder and its configs' times."""
    cwd = "." if cwd is None else cwd          # None: this process's current folder
    stamps = []
    for cfg in (Path(cwd) / ".git" / "config",
                os.environ.get("GIT_CONFIG_GLOBAL") or os.path.expanduser("~/.gitconfig")):
        try:
            stamps.append(os.stat(cfg).st_mtime_ns)
        except OSError:
            stamps.append(0)
    return f"{cwd}\0{stamps}"


def no_filters(cwd: Cwd) -> tuple[str, ...]:
    """`-c` options that switch off every filter driver git's config defines.

    An empty command is no filter. Looked up once per repository and process (again
    when its config or the global one changes): one `git config` call, none when a
    caller read the config already and passed its keys to `know_filters` (sync does).
    """
    key = filters_key(cwd)
    if key not in _FILTERS:
        p = subprocess.run(["git", *BASE, "config", "-z", "--get-regexp", r"^filter\."],
                           cwd="." if cwd is None else cwd, capture_output=True, text=True,
                           errors="surrogateescape")
        know_filters(cwd, [item.split("\n", 1)[0] for item in p.stdout.split("\0")], key)
    return _FILTERS[key]


def know_filters(cwd: Cwd, keys: Iterable[str], key: str | None = None) -> None:
    """Record the filter drivers among config `keys` (every scope's, as `git config
    --get-regexp` lists them) for no_filters, so that it runs no `git config` of its
    own; `key`: filters_key(cwd) as read before that config was."""
    names = set()
    for name in keys:
        if name.startswith("filter.") and name.count(".") >= 2:
            names.add(name[len("filter."):name.rindex(".")])
    opts = []
    for n in sorted(names):
        opts += ["-c", f"filter.{n}.clean=", "-c", f"filter.{n}.smudge=",
                 "-c", f"filter.{n}.process=", "-c", f"filter.{n}.required=false"]
    _FILTERS[key or filters_key(cwd)] = tuple(opts)


def argv(args: Sequence[str], cwd: Cwd, filters: bool = True) -> list[str]:
    """The command line of git `args` run in `cwd`, with the settings above. Without
    `filters`, the filter drivers are left as they are: only for a command that never
    runs one (reading the config that names them)."""
    return ["git", *BASE, *(no_filters(cwd) if filters else ()), *args]


@overload
def run(args: Sequence[str], cwd: Cwd, *, env: dict[str, str] | None = None,
        input: str | None = None, text: Literal[True] = True, errors: str = "surrogateescape",
        wait_lock: bool = False, filters: bool = True) -> subprocess.CompletedProcess[str]: ...


@overload
def run(args: Sequence[str], cwd: Cwd, *, env: dict[str, str] | None = None,
        input: bytes | None = None, text: Literal[False], errors: str = "surrogateescape",
        wait_lock: bool = False, filters: bool = True) -> subprocess.CompletedProcess[bytes]: ...


def run(args: Sequence[str], cwd: Cwd, *, env: dict[str, str] | None = None,
        input: str | bytes | None = None, text: bool = True,
        errors: str = "surrogateescape", wait_lock: bool = False,
        filters: bool = True) -> subprocess.CompletedProcess[Any]:
    """Run git `args` in `cwd` (None: the current folder) and capture its output (str,
    or bytes when not `text`).

    `env` replaces the environment (None: this process's). With `wait_lock`, a command
    that finds a lock file taken (a git command a person runs meanwhile, or their
    editor's git integration, holds the index lock for a moment) is tried again for up
    to two seconds rather than failed.
    """
    kw: dict[str, Any] = {"text": True, "errors": errors} if text else {}
    cmd = argv(args, cwd, filters)
    p = subprocess.run(cmd, cwd=cwd, env=env, input=input, capture_output=True, **kw)
    if wait_lock:
        deadline = time.monotonic() + 2.0
        while (p.returncode == 128 and _lock_taken(p.stderr)
               and time.monotonic() < deadline):
            time.sleep(0.05)
            p = subprocess.run(cmd, cwd=cwd, env=env, input=input, capture_output=True, **kw)
    return p


def _lock_taken(stderr: str | bytes) -> bool:
    return (".lock': File exists" in stderr if isinstance(stderr, str)
            else b".lock': File exists" in stderr)


def output(args: Sequence[str], cwd: Cwd, **kw: Any) -> Any:
    """The output of git `args` (see run: str, or bytes with text=False); GitError when
    it fails."""
    p: subprocess.CompletedProcess[Any] = run(args, cwd, **kw)
    if p.returncode:
        err = p.stderr if isinstance(p.stderr, str) else p.stderr.decode("utf-8", "replace")
        raise GitError(list(args), p.returncode, err)
    return p.stdout


def popen(args: Sequence[str], cwd: Cwd, **kw: Any) -> subprocess.Popen[Any]:
    """Start git `args` in `cwd` and do not wait (streamed output, background work)."""
    return subprocess.Popen(argv(args, cwd), cwd=cwd, **kw)


# What the answers to one batch of questions may take of a pipe's buffer (64 KiB on Linux,
# 16 KiB on some systems): each answer is at most its name and 100 bytes.
_PIPE_ROOM = 12_000


class Objects:
    """One `git cat-file --batch-command` session in `cwd`: the size and the bytes of
    objects (an oid, or `REV:PATH`) read on demand by one process, however many are
    asked for. A git older than 2.36 lacks that command: each question is then a
    `git cat-file` of its own. Close it (or use it as a context manager)."""

    def __init__(self, cwd: Cwd) -> None:
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._old_git = False

    def __enter__(self) -> Objects:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def size(self, name: str) -> int | None:
        """The object's size in bytes; None when there is no such object."""
        return self.sizes([name]).get(name)

    def sizes(self, names: list[str]) -> dict[str, int]:
        """The size of each of `names` there is an object for, asked in batches: the
        answers to one batch fit in a pipe's buffer, so git never waits on this
        process while this process still writes."""
        names = [n for n in dict.fromkeys(names) if n and "\n" not in n]
        out: dict[str, int] = {}
        i = 0
        while i < len(names):
            batch: list[str] = []
            room = _PIPE_ROOM
            while i < len(names) and (not batch or room > len(names[i]) + 100):
                batch.append(names[i])
                room -= len(names[i]) + 100
                i += 1
            answers = self._session("".join(f"info {n}\n" for n in batch), len(batch))
            if answers is None:         # an older git: one `--batch-check` for them all
                answers = run(["cat-file", "--batch-check"], self.cwd, text=False,
                              input="".join(f"{n}\n" for n in names[i - len(batch):])
                              .encode("utf-8", "surrogateescape")).stdout.splitlines()
                i = len(names)
            for n, line in zip(names[i - len(answers):], answers):
                parts = line.split()
                if len(parts) == 3 and parts[2].isdigit():
                    out[n] = int(parts[2])
        return out

    def read(self, name: str) -> bytes | None:
        """The object's bytes; None when there is no such object."""
        if not name or "\n" in name:
            return None
        answer = self._session(f"contents {name}\n", 1)
        if answer is None:
            p = run(["cat-file", "--batch"], self.cwd, text=False,
                    input=f"{name}\n".encode("utf-8", "surrogateescape"))
            head, _, rest = p.stdout.partition(b"\n")
            size = _size_of(head)
            return None if p.returncode or size is None else rest[:size]
        size = _size_of(answer[0])
        if size is None:
            return None                  # "<name> missing" (or ambiguous)
        assert self._proc is not None and self._proc.stdout is not None
        data = self._proc.stdout.read(size + 1)
        if len(data) != size + 1:
            raise GitError(["cat-file", "--batch-command"], -1, "the session ended early")
        return data[:-1]

    def _session(self, commands: str, answers: int) -> list[bytes] | None:
        """Write `commands` to the session (started if need be) and read the first line
        of each of their `answers`; None on a git without `--batch-command` (found out
        by its first answer: none)."""
        if self._old_git:
            return None
        if self._proc is None:
            self._proc = popen(["cat-file", "--batch-command"], self.cwd, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(commands.encode("utf-8", "surrogateescape"))
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass                         # it ended: told by the missing answer below
        lines: list[bytes] = []
        for _ in range(answers):
            line = self._proc.stdout.readline()
            if not line:
                if lines:
                    raise GitError(["cat-file", "--batch-command"], -1, "the session ended early")
                self.close()
                self._old_git = True
                return None
            lines.append(line)
        return lines

    def close(self) -> None:
        if self._proc is not None:
            proc, self._proc = self._proc, None
            for f in (proc.stdin, proc.stdout):
                if f is not None:
                    try:
                        f.close()
                    except BrokenPipeError:
                        pass
            proc.wait()


def _size_of(header: bytes) -> int | None:
    """The size a `cat-file --batch` header (`<oid> <type> <size>`) names; None for
    `<name> missing`."""
    parts = header.split()
    return int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else None


def background(args: Sequence[str], cwd: Cwd) -> None:
    """Start git `args` that maintains derived data (gc, commit-graph) in its own
    session, its output dropped, and do not wait for it."""
    popen(args, cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
          stderr=subprocess.DEVNULL, start_new_session=True)


def call(args: Sequence[str], cwd: Cwd) -> int:
    """Run git `args` with the terminal attached (`agent git`, `agent log`): its status."""
    return subprocess.call(argv(args, cwd), cwd=cwd)


def config_env(cwd: Cwd, env: dict[str, str] | None = None) -> dict[str, str]:
    """An environment that gives these settings, through git's environment
    configuration, to the git commands a program runs itself (git-filter-repo)."""
    env = dict(os.environ if env is None else env)
    opts = [o for i, o in enumerate((*BASE, *no_filters(cwd))) if i % 2]
    env["GIT_CONFIG_COUNT"] = str(len(opts))
    for n, kv in enumerate(opts):
        k, _, v = kv.partition("=")
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = k, v
    return env


def version() -> str:
    """What `git --version` says (`git version 2.43.0`); OSError when git does not run."""
    return subprocess.run(["git", "--version"], capture_output=True, text=True,
                          timeout=10).stdout.strip()
