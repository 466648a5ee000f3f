"""The vault: a Git repository of plain files, and the only module that runs git.

Everything that changes the vault goes through a `Vault`:

    with vault.locked():                      # serialise with other processes
        vault.append_line("memory/2026-11-20.md", "- 14:05 bought milk")
        vault.commit(Change("note", "add 1 line to memory/2026-11-20.md"))

`locked()` first repairs what a crash may have left (a torn JSONL line, files written
but not committed) and commits uncommitted hand edits on their own, authored by the
user, so that every agent commit holds only the agent's own changes. A commit's message
is made from a `Change` record (agent.vault.change); reading history back is
agent.vault.history.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import getpass
import json
import os
import re
import stat
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

from agent.errors import UserError
from agent.package import package_data
from agent import redact
from agent.vault import atomic
from agent.vault.change import Change, Identity, by_hand, recovered
from agent.vault.offlimits import STATE_DIR, is_off_limits, link_problem, refusal

MARKER = "agent.toml"
DEFAULT_VAULT = Path("~/.agent/vault")

# Every git call: never run the vault's hooks, never ask for a signing key or an editor,
# never start a file-system monitor; filter drivers are switched off per vault (_no_filters).
_GIT_BASE = ("-c", "core.hooksPath=/dev/null", "-c", "commit.gpgSign=false",
             "-c", "core.quotePath=false", "-c", "core.fsmonitor=false")
# Files the agent itself writes and reads back: never committed, whatever .gitignore says.
CONTROL_FILES = (".gitignore", ".gitattributes", MARKER, "AGENTS.md")

class VaultError(UserError):
    """A problem a user can fix; the message says what and how."""


class NotAVault(VaultError):
    pass


class UnfinishedGit(VaultError):
    """The vault's repository is mid-operation (merge, rebase, ...): the agent commits nothing."""


class CheckoutStuck(VaultError):
    """A sync's checkout a kill interrupted cannot be finished (the commit it moves to
    is one git refuses to check out): nothing is committed until `agent doctor --fix`."""


# The command that gives up a checkout that cannot be finished (Vault.abandon_checkout).
FIX_CHECKOUT = "agent doctor --fix"
CHECKOUT_JOURNAL = "checkout.json"          # in .agent/
HELD_FILE = "uncommitted.json"              # in .agent/: files left uncommitted on purpose


class GitError(VaultError):
    def __init__(self, args, returncode, stderr):
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"git {' '.join(args)} failed ({returncode}): {stderr.strip()}")



def find_vault_above(start: str | os.PathLike) -> Path | None:
    """The vault containing the folder `start` (itself or a parent), as git finds its repo."""
    here = Path(start).absolute()
    for d in (here, *here.parents):
        if (d / MARKER).is_file() and (d / ".git").exists():
            return d
    return None


def resolve_path(explicit: str | os.PathLike | None) -> tuple[Path, str]:
    """Which vault a command works on, as git finds its repository: --vault, else the
    vault containing the current folder, else $AGENT_VAULT, else ~/.agent/vault.

    Returns the path and where it came from: "option", "cwd", "env" or "default"
    (the default one may be created on use).
    """
    if explicit:
        path = Path(explicit).expanduser().absolute()
        # A folder inside a vault names that vault, as `git -C` finds the repository.
        return (find_vault_above(path) if path.is_dir() else None) or path, "option"
    try:
        here = find_vault_above(Path.cwd())
    except OSError:               # the current folder was deleted under us
        here = None
    if here is not None:
        return here, "cwd"
    env = os.environ.get("AGENT_VAULT")
    if env:
        return Path(env).expanduser().absolute(), "env"
    return DEFAULT_VAULT.expanduser().absolute(), "default"


_FILTERS: dict[str, tuple] = {}


def _no_filters(cwd) -> tuple:
    """`-c` options that switch off every filter driver git's config defines.

    A clean/smudge/process filter named in .gitattributes runs a command of the config
    on every add or checkout; the agent's own git calls run none (an empty command is
    no filter). Looked up once per vault and process: one `git config` call.
    """
    stamps = []
    for cfg in (Path(cwd) / ".git" / "config",
                os.environ.get("GIT_CONFIG_GLOBAL") or os.path.expanduser("~/.gitconfig")):
        try:
            stamps.append(os.stat(cfg).st_mtime_ns)
        except OSError:
            stamps.append(0)
    key = f"{cwd}\0{stamps}"
    if key not in _FILTERS:
        p = subprocess.run(["git", *_GIT_BASE, "config", "-z", "--get-regexp", r"^filter\."],
                           cwd=cwd, capture_output=True, text=True,
                           errors="surrogateescape")
        names = set()
        for item in p.stdout.split("\0"):
            name = item.split("\n", 1)[0]
            if name.count(".") >= 2:
                names.add(name[len("filter."):name.rindex(".")])
        opts = []
        for n in sorted(names):
            opts += ["-c", f"filter.{n}.clean=", "-c", f"filter.{n}.smudge=",
                     "-c", f"filter.{n}.process=", "-c", f"filter.{n}.required=false"]
        _FILTERS[key] = tuple(opts)
    return _FILTERS[key]


def _run(args, cwd, env=None, input=None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *_GIT_BASE, *_no_filters(cwd), *args], cwd=cwd, env=env,
                          input=input, capture_output=True, text=True, errors="surrogateescape")


def git_version() -> str:
    """What `git --version` says (`git version 2.43.0`); OSError when git does not run."""
    return subprocess.run(["git", "--version"], capture_output=True, text=True,
                          timeout=10).stdout.strip()


def _git_toplevel(path: Path) -> Path | None:
    p = _run(["rev-parse", "--show-toplevel"], cwd=path)
    return Path(p.stdout.strip()) if p.returncode == 0 else None


def git_dir_of(root: Path) -> Path:
    """The repository folder of the vault at `root` (`.git`, or where a gitfile points)."""
    dotgit = Path(root) / ".git"
    if dotgit.is_file():
        try:
            line = dotgit.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            line = ""
        if line.startswith("gitdir:"):
            target = Path(line[len("gitdir:"):].strip())
            return target if target.is_absolute() else (Path(root) / target).resolve()
    return dotgit


def unfinished_operation(root: Path, *, unmerged: bool = True) -> str | None:
    """What stops the agent committing in the vault at `root` now, or None.

    The answer is one sentence saying what to finish: an unfinished merge, rebase,
    cherry-pick, revert or bisect, conflicted files, a detached HEAD, or a person's own
    `git commit` waiting for its message. Any code about to commit (the vault's commit
    path, sync) calls this first; it runs no git command in the common case.
    `unmerged=False` leaves out the conflicted files (one `git ls-files`): the vault
    lock's `prepare` finds them in the `git status` it runs anyway.
    """
    root = Path(root)
    g = git_dir_of(root)
    finish = "; then run the command again. Nothing was changed."
    if (g / "rebase-merge").is_dir() or (g / "rebase-apply").is_dir():
        if (g / "rebase-apply" / "applying").exists():
            return (f"A `git am` is unfinished in the vault {root}: run `git am --continue` "
                    f"or `git am --abort`" + finish)
        return (f"A rebase is unfinished in the vault {root}: resolve it and run "
                f"`git rebase --continue`, or `git rebase --abort`" + finish)
    for head, what in (("MERGE_HEAD", "merge"), ("CHERRY_PICK_HEAD", "cherry-pick"),
                       ("REVERT_HEAD", "revert")):
        if (g / head).exists():
            return (f"A {what} is unfinished in the vault {root}: resolve the conflicts and "
                    f"run `git {what} --continue`, or `git {what} --abort`" + finish)
    if (g / "BISECT_LOG").exists():
        return (f"A git bisect is under way in the vault {root}: run `git bisect reset`"
                + finish)
    try:
        head = (g / "HEAD").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        head = ""
    if head and not head.startswith("ref:"):
        return (f"The vault {root} has a detached HEAD (at {head[:7]}): a commit there "
                f"belongs to no branch. Run `git switch main` (or your branch)" + finish)
    if unmerged and (g / "index").exists():
        p = _run(["ls-files", "-u", "-z"], cwd=root)
        if p.returncode == 0 and p.stdout:
            return conflicted(root, {item.split("\t", 1)[-1]
                                     for item in p.stdout.split("\0") if item})
    busy = _git_commit_running(root, g)
    if busy:
        return (f"A `git commit` is waiting for its message in the vault {root} (process "
                f"{busy}): finish or abandon it" + finish)
    return None


def conflicted(root: Path, files) -> str:
    """The sentence for a vault with conflicted (unmerged) files."""
    files = sorted(files)
    return (f"The vault {root} has conflicted files ({', '.join(files[:3])}"
            f"{', ...' if len(files) > 3 else ''}): resolve them and `git add` them; then "
            f"run the command again. Nothing was changed.")


# The two-letter codes `git status --porcelain` gives a path with a conflict.
_UNMERGED = frozenset({"DD", "AU", "UD", "UA", "DU", "AA", "UU"})


def _git_commit_running(root: Path, g: Path) -> int | None:
    """The pid of a person's `git commit` running in the vault, or None (Linux's /proc).

    Checked only when COMMIT_EDITMSG is newer than the last ref update, that is when a
    commit started and has not ended with one.
    """
    try:
        started = (g / "COMMIT_EDITMSG").stat().st_mtime
    except OSError:
        return None
    try:
        last = (g / "logs" / "HEAD").stat().st_mtime
    except OSError:
        last = 0.0
    if started < last:
        return None
    return _git_process_in(root, lambda argv: "commit" in argv[1:])


def _git_process_in(root: Path, match) -> int | None:
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    real = os.path.realpath(root)
    me = os.getpid()
    for d in proc.iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            if not argv or os.path.basename(argv[0]) not in (b"git", b"git.exe"):
                continue
            args = [a.decode("utf-8", "replace") for a in argv if a]
            if not match(args):
                continue
            cwd = os.path.realpath(os.readlink(d / "cwd"))
        except OSError:
            continue
        for i, a in enumerate(args):
            if a == "-C" and i + 1 < len(args):
                cwd = os.path.realpath(os.path.join(cwd, args[i + 1]))
        if cwd == real or cwd.startswith(real + os.sep):
            return int(d.name)
    return None


class Vault:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.state = self.root / STATE_DIR
        self._lock_depth = 0
        self.last_commit: tuple[str | None, str, list[str]] | None = None  # (parent, sha, paths)
        self._lock_fd: int | None = None
        self._thread_lock = threading.RLock()
        self._touched: list[str] = []
        self.recovered: list[str] = []  # what the last repair set aside, for the CLI to report
        self._agent: Identity | None = None
        self.git_dir = git_dir_of(self.root)
        self.too_big: list[str] = []
        self._host: str | None = None
        self._intent: Change | None = None     # the agent change being written (intend)    # hand-added files left uncommitted for their size

    # ---- opening -------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Vault":
        """The vault at `path`, or a NotAVault error saying how to make one."""
        root = Path(path).expanduser().absolute()
        if root.exists() and not root.is_dir():
            raise NotAVault(f"{root} is a file, not a vault folder. "
                            f"Give --vault a folder (run `agent init PATH` to make one).")
        if not root.is_dir():
            raise NotAVault(f"No vault at {root}: run `agent init {root}` to make one.")
        if not (root / MARKER).is_file() or not (root / ".git").exists():
            raise NotAVault(f"{root} is not a vault (no {MARKER} or no git repository): "
                            f"run `agent init {root}` to make it one.")
        state = root / STATE_DIR
        if state.is_symlink() or (state.exists() and not state.is_dir()):
            raise VaultError(f"{state} should be the agent's folder of derived state, but it "
                             f"is {'a link' if state.is_symlink() else 'a file'}: move it away "
                             f"(it is rebuilt on its own).")
        return cls(root)

    @classmethod
    def init(cls, path: str | os.PathLike) -> tuple["Vault", str]:
        """Make a vault at `path` (new, or adopting a folder of notes).

        Returns the vault and what happened: "created", "adopted" or "exists".
        Never overwrites a file and never nests a repository inside another.
        """
        root = Path(path).expanduser().absolute()
        if root.exists() and not root.is_dir():
            raise VaultError(f"{root} is a file; give `agent init` a folder.")
        if root.is_dir() and (root / MARKER).is_file() and (root / ".git").exists():
            return cls(root), "exists"
        adopting = root.is_dir() and any(p.name != ".git" for p in root.iterdir())
        root.mkdir(parents=True, exist_ok=True)
        top = _git_toplevel(root)
        if top is not None and top.resolve() != root.resolve():
            raise VaultError(
                f"{root} is inside the git repository {top}; a vault is a repository of "
                f"its own and is never nested in another. Choose a folder outside it, "
                f"or run `agent init {top}` to make the whole repository the vault.")
        if top is None:
            p = _run(["init", "-q", "-b", "main"], cwd=root)
            if p.returncode:
                raise GitError(["init"], p.returncode, p.stderr)
        vault = cls(root)
        vault._configure_repo()
        if adopting and vault.dirty_paths():
            # The user's own notes go in first, as their commit, so the init commit
            # holds only what the agent added.
            vault._commit_paths(None, Change("edit", "adopt existing notes as a vault",
                                             author=vault.user_identity()))
        existed = {n for n in (".gitignore", ".gitattributes") if (root / n).exists()}
        vault._copy_template()
        vault._ensure_line(".gitignore", f"{STATE_DIR}/")
        for line in _union_lines():
            vault._ensure_line(".gitattributes", line)
        committed = vault.dirty_paths()           # what the init commit holds
        added = [p for p in committed if p not in existed]
        changed = [p for p in committed if p in existed]
        what = f"{len(added)} file{'s' * (len(added) != 1)} added" + (
            f", {' and '.join(changed)} changed" if changed else "")
        vault._commit_paths(None, Change("init", "new vault" if not adopting else
                                         f"adopt this folder as a vault ({what})"))
        return vault, "adopted" if adopting else "created"

    def _configure_repo(self) -> None:
        # Status scans and index writes stay cheap as the vault grows.
        self.git("config", "core.untrackedCache", "true")
        self.git("config", "core.splitIndex", "true")
        self._exclude_state()
        self.configure_merge_drivers()
        self.host()

    def _exclude_state(self) -> None:
        """`.agent/` in the repository's own exclude file (which no sync or edit of
        .gitignore touches), so git never lists the agent's state as untracked."""
        exclude = self.git_dir / "info" / "exclude"
        try:
            text = exclude.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        if f"/{STATE_DIR}/" in text.splitlines():
            return
        with contextlib.suppress(OSError):
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with open(exclude, "a", encoding="utf-8") as f:
                f.write(("" if not text or text.endswith("\n") else "\n") + f"/{STATE_DIR}/\n")

    def configure_merge_drivers(self, have: dict[str, str] | None = None) -> None:
        """Point git at the vault's merge drivers (also for a person's own `git pull`).

        The settings live in .git/config, which is not versioned, so a clone or a move
        to another Python sets them again; unchanged settings are not rewritten.
        `have`: the config already read (key -> value), to spare a `git config`."""
        if have is None:
            current = self.git("config", "--get-regexp", r"^merge\.agent-", check=False)
            have = dict(line.split(" ", 1) for line in current.splitlines() if " " in line)
        from agent.vault import mergedriver

        for key, value in mergedriver.git_config():
            if have.get(key) != value:
                self.git("config", key, value)

    def _copy_template(self) -> list[str]:
        from shutil import copyfile
        copied = []
        template = package_data("vault")
        for src in sorted(template.rglob("*")):
            rel = src.relative_to(template)
            dst = self.root / rel
            if src.is_dir():
                dst.mkdir(parents=True, exist_ok=True)
            elif not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                copyfile(src, dst)
                copied.append(str(rel))
        heartbeats = package_data("heartbeat")
        for src in sorted(heartbeats.glob("*.md")):
            dst = self.root / "heartbeat" / src.name
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                copyfile(src, dst)
                copied.append(f"heartbeat/{src.name}")
        return copied

    def _ensure_line(self, rel: str, line: str) -> None:
        from agent.vault import safe
        path = self.root / rel
        text = safe.read_text(self.root, rel, errors="replace") or ""
        if line in text.splitlines():
            return
        sep = "" if not text or text.endswith("\n") else "\n"
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{sep}{line}\n")

    # ---- paths ---------------------------------------------------------------------

    def rel(self, path: str | os.PathLike) -> str:
        """A vault-relative POSIX path for `path`, refusing anything outside the vault."""
        p = Path(path)
        full = p if p.is_absolute() else self.root / p
        real = Path(os.path.realpath(full))
        root = Path(os.path.realpath(self.root))
        try:
            rel = real.relative_to(root)
        except ValueError:
            raise VaultError(f"{path} is outside the vault {self.root}.") from None
        return rel.as_posix()

    def path(self, rel: str) -> Path:
        return self.root / rel

    # ---- identities ----------------------------------------------------------------

    def agent_identity(self) -> Identity:
        if self._agent is None:
            from agent.config import load_settings  # local: config reads agent.toml
            s = load_settings(self.root)
            self._agent = Identity(s.agent_name, s.agent_email)
        return self._agent

    def host(self, known: str | None = None) -> str:
        """This machine's name for the vault (`git config agent.host` in the vault's own,
        unversioned config): the cron jobs and heartbeats marked with it run here.
        Set from the hostname the first time it is asked for. `known`: the value the
        caller already read from the vault's config."""
        if self._host is None and known and known.strip():
            self._host = known.strip()
        if self._host is None:
            name = self.git("config", "--local", HOST_KEY, check=False).strip()
            if not name:
                name = default_host()
                # Saved so that renaming the computer later does not orphan its jobs.
                self.git("config", "--local", HOST_KEY, name, check=False)
            self._host = name
        return self._host

    def has_remote(self) -> bool:
        """Whether the vault has a git remote (it is kept on several machines)."""
        return bool(self.git("remote", check=False).strip())

    def set_host(self, name: str) -> str:
        name = check_host(name)
        self.git("config", "--local", HOST_KEY, name)
        self._host = name
        return name

    def user_identity(self) -> Identity:
        """The user's git identity, or a fallback named after the login when none is set."""
        # $GIT_AUTHOR_NAME / $GIT_AUTHOR_EMAIL first, as git itself honours them.
        name = (os.environ.get("GIT_AUTHOR_NAME", "").strip()
                or self.git("config", "user.name", check=False).strip())
        email = (os.environ.get("GIT_AUTHOR_EMAIL", "").strip()
                 or self.git("config", "user.email", check=False).strip())
        if name and email:
            return Identity(name, email)
        login = getpass.getuser() or "user"
        import socket
        return Identity(name or login, email or f"{login}@{socket.gethostname() or 'localhost'}")

    # ---- git -----------------------------------------------------------------------

    def git(self, *args: str, check: bool = True, env: dict | None = None,
            input: str | None = None) -> str:
        full_env = None
        if env:
            full_env = os.environ.copy()
            full_env.update(env)
        p = _run(list(args), cwd=self.root, env=full_env, input=input)
        # A git command a person runs meanwhile (or their editor's git integration) may
        # hold the index lock for a moment: wait for it rather than fail the change.
        deadline = time.monotonic() + 2.0
        while (p.returncode == 128 and ".lock': File exists" in p.stderr
               and time.monotonic() < deadline):
            time.sleep(0.05)
            p = _run(list(args), cwd=self.root, env=full_env, input=input)
        if check and p.returncode:
            raise GitError(list(args), p.returncode, p.stderr)
        return p.stdout

    def fsck(self) -> str | None:
        """The first problem `git fsck` finds in the repository, None when it is sound."""
        p = _run(["fsck", "--no-progress", "--no-dangling"], cwd=self.root)
        if p.returncode == 0:
            return None
        lines = (p.stderr.strip() + "\n" + p.stdout.strip()).strip().splitlines()
        named = [l for l in lines if any(w in l for w in ("corrupt", "missing", "broken"))]
        return (named or lines or ["git fsck failed"])[0].removeprefix("error: ")

    def git_passthrough(self, *args: str) -> int:
        """Run git with the terminal attached (for `agent git`, `agent log`)."""
        return subprocess.call(["git", *_GIT_BASE, *_no_filters(self.root), *args], cwd=self.root)

    def head(self) -> str | None:
        p = _run(["rev-parse", "--verify", "-q", "HEAD"], cwd=self.root)
        return p.stdout.strip() or None

    def head_from_files(self) -> str | None:
        """Where HEAD points, read from the .git folder with no process ("ref:<name>:<sha>",
        "packed:...", "unborn:...", "detached:<sha>"): a signature to compare, not a
        commit to use. None when .git is not a plain folder of loose and packed refs (a
        linked work tree, a reftable): then ask git."""
        git = self.root / ".git"
        try:
            if (git / "reftable").exists():
                return None
            head = (git / "HEAD").read_text("ascii").strip()
            if not head.startswith("ref: "):
                return "detached:" + head
            ref = head[5:]
            if not ref.startswith("refs/") or ".." in ref:
                return None
            try:
                return "ref:" + ref + ":" + (git / ref).read_text("ascii").strip()
            except FileNotFoundError:
                pass
            try:
                packed = (git / "packed-refs").read_text("ascii")
            except FileNotFoundError:
                return "unborn:" + ref
            for line in packed.splitlines():
                sha, _, name = line.partition(" ")
                if name == ref:
                    return "packed:" + ref + ":" + sha
            return "unborn:" + ref
        except (OSError, UnicodeDecodeError):
            return None

    def files(self, *patterns: str) -> list[str]:
        """The vault's files (tracked, or untracked and not ignored) matching the
        pathspec patterns, e.g. "*.md"."""
        out = self.git("ls-files", "-z", "--cached", "--others", "--exclude-standard",
                       "--", *patterns, check=False)
        return [p for p in out.split("\0") if p and not _is_state(p)]

    def date_stamp(self, text: str) -> int | None:
        """A date as `git log --since` reads it ("2 weeks ago", "yesterday", "2025-03-01"),
        as a Unix time; None when git does not understand it (it reads unknown words as
        now, or as 1970)."""
        out = self.git("rev-parse", f"--since={text}", check=False).strip()
        try:
            stamp = int(out.rpartition("=")[2])
        except ValueError:
            return None
        if not stamp or (abs(stamp - time.time()) < 5 and text.strip().lower() not in ("now", "today")):
            return None
        return stamp

    def dirty_paths(self) -> list[str]:
        """Paths with uncommitted changes (modified, added, deleted, untracked)."""
        return self._status()[0]

    def _status(self) -> tuple[list[str], list[str]]:
        """(dirty paths as `dirty_paths` gives them, conflicted paths), from one `git
        status`."""
        # Untracked files in the "normal" mode: it is the mode git's untracked cache
        # serves fastest; a new folder shows as `dir/` and is listed only then.
        # Outside the vault lock, status must not take git's index lock to refresh its
        # stat cache: that would make a concurrent agent commit fail.
        optional = () if self._lock_depth else ("--no-optional-locks",)
        out = self.git(*optional, "status", "--porcelain=v1", "-z", "--no-renames")
        paths, new_dirs, unmerged = [], [], []
        for item in out.split("\0"):
            if not item:
                continue
            path = item[3:]
            if item[:2] in _UNMERGED:
                unmerged.append(path)
            if _is_state(path):
                continue
            (new_dirs if item.startswith("??") and path.endswith("/") else paths).append(path)
        if new_dirs:
            listed = self.git("ls-files", "-z", "--others", "--exclude-standard", "--", *new_dirs)
            paths.extend(p for p in listed.split("\0") if p and not _is_state(p))
        return paths, unmerged

    def line_authors(self, rel: str) -> list[str] | None:
        """The author email of each line of `rel` as it is in the work tree (git blame;
        a line not committed yet reads `not.committed.yet`), or None when git cannot say."""
        p = _run(["blame", "--line-porcelain", "--", rel], cwd=self.root)
        if p.returncode:
            return None
        return [line[len("author-mail "):].strip().strip("<>")
                for line in p.stdout.splitlines() if line.startswith("author-mail ")]

    def check_committable(self) -> None:
        """UnfinishedGit when the repository is mid-merge, mid-rebase, detached, ...

        (see `unfinished_operation`); called before anything is written or committed.
        """
        problem = unfinished_operation(self.root)
        if problem:
            raise UnfinishedGit(problem)

    def _commit_paths(self, paths: list[str] | None, change: Change) -> str | None:
        """Stage `paths` (all changes when None) and commit them; None if nothing changed.

        Plumbing rather than `git commit`: it stages only the named paths and never
        re-scans the work tree, so the cost stays flat as the vault grows (with the
        split index, each write touches a small file, not the whole index).
        """
        # Under the lock it was checked as the lock was taken (one `git ls-files` fewer).
        if not self._lock_depth:
            self.check_committable()
        self.last_commit = None          # until a commit is made (none when nothing changed)
        if paths is None:
            self.git("add", "-A", "--", ".", f":(exclude){STATE_DIR}")
        else:
            paths = [p for p in paths if not _is_state(p)]
            if not paths:
                return None
            self.git("update-index", "--add", "--remove", "--", *sorted(set(paths)))
        tree = self.git("write-tree").strip()
        p = _run(["rev-parse", "HEAD", "HEAD^{tree}"], cwd=self.root)
        head, head_tree = (p.stdout.split() + [None, None])[:2] if p.returncode == 0 else (None, None)
        if tree == head_tree:
            return None
        message, who = self._message(change)
        sha = self.git("commit-tree", tree, *(["-p", head] if head else []), "-F", "-",
                       env=who.env(), input=message).strip()
        subject = message.splitlines()[0] if message else ""
        self.git("update-ref", "-m", f"commit: {subject}", "HEAD", sha, head or "0" * 40)
        # What this commit changed, for the search index's refresh right after it (two
        # git commands fewer per turn); None when `git add -A` chose the paths.
        self.last_commit = (head, sha, sorted(set(paths))) if paths is not None else None
        self._maybe_gc()
        return sha

    def _maybe_gc(self) -> None:
        """Start git's own housekeeping in the background when loose objects pile up.

        Plumbing commits never trigger `gc --auto` the way `git commit` does; the check
        is git's own estimate (one fan-out folder of 256), so it costs a directory read.
        """
        fanout = self.git_dir / "objects" / "17"
        try:
            loose = len(os.listdir(fanout))
        except FileNotFoundError:
            return
        if loose * 256 > 6700:
            subprocess.Popen(["git", *_GIT_BASE, "gc", "--auto", "--quiet"], cwd=self.root,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)

    def git_background(self, *args: str) -> None:
        """Start a git command that maintains derived data (gc, commit-graph) and do not
        wait for it; its output is dropped."""
        subprocess.Popen(["git", *_GIT_BASE, *args], cwd=self.root, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)

    def _message(self, change: Change) -> tuple[str, Identity]:
        return change.message(), change.author or self.agent_identity()

    def commit(self, change: Change, paths: list[str] | None = None) -> str | None:
        """Commit what this process wrote (or `paths`): the sha, or None if nothing changed.

        `change` says what changed (its author is the agent unless it names one).
        """
        if not isinstance(change, Change):
            # Commit text is made in one place, Change.message: never a string.
            raise TypeError(f"a commit is a Change, not {type(change).__name__}")
        targets = list(paths) if paths is not None else list(self._touched)
        sha = self._commit_paths(targets, change)
        self._touched = [] if paths is None else [p for p in self._touched if p not in targets]
        if not self._touched:
            self._clear_pending()
        return sha

    def revert(self, sha: str, change: Change) -> str | None:
        """Revert commit `sha` as a new commit; GitError if it would conflict.

        Used by agent.vault.history.undo, which says what `change` is.
        """
        self.check_committable()
        # An undo must not settle a clash by keeping both versions (that is for syncs
        # between machines): a fact the person changed since makes the revert refuse.
        p = _run(["-c", "merge.agent-facts.driver=false", "revert", "--no-commit", sha],
                 cwd=self.root)
        if p.returncode:
            _run(["revert", "--abort"], cwd=self.root)
            _run(["reset", "--merge"], cwd=self.root)
            raise GitError(["revert", sha], p.returncode, p.stderr + p.stdout)
        message, who = self._message(change)
        p = _run(["commit", "-q", "--no-verify", "-F", "-"], cwd=self.root,
                 env={**os.environ, **who.env()}, input=message)
        if p.returncode:
            _run(["revert", "--abort"], cwd=self.root)
            if "nothing to commit" in p.stdout + p.stderr:
                return None
            raise GitError(["commit"], p.returncode, p.stderr + p.stdout)
        return self.head()

    def checkout_commit(self, new: str, reflog: str) -> None:
        """Move HEAD and the work tree from HEAD to commit `new` (a sync's merge or
        fast-forward), so that a kill at any instant is finished by the next command.

        The work tree is clean here (hand edits were committed first, under the lock),
        so the two-tree `read-tree -m -u` only writes what differs between the commits.
        """
        old = self.head()
        journal = self.state / CHECKOUT_JOURNAL
        atomic.write_json(journal, {"old": old, "new": new, "reflog": reflog})
        try:
            self.git("read-tree", "-m", "-u", old, new)
        except GitError:
            # Git refuses that commit (a path it will not write, ...): a replay would
            # too, so it is given up at once and the vault stays as it was.
            self.abandon_checkout()
            raise
        self.git("update-ref", "-m", reflog, "HEAD", new, old)
        journal.unlink()

    def _checkout_journal(self) -> tuple[str, str, str] | None:
        """(old, new, reflog) of a checkout journal that still has work to do: HEAD is
        at `old` and `new` is a commit. None otherwise (a stale or unreadable journal is
        removed)."""
        journal = self.state / CHECKOUT_JOURNAL
        j = atomic.read_json(journal)
        try:
            old, new, reflog = j["old"], j["new"], j["reflog"]
        except (KeyError, TypeError):
            journal.unlink(missing_ok=True)
            return None
        if not (isinstance(old, str) and isinstance(new, str) and isinstance(reflog, str)) \
                or self.head() != old \
                or self.git("cat-file", "-t", new, check=False).strip() != "commit":
            journal.unlink(missing_ok=True)
            return None
        return old, new, reflog

    def _finish_checkout(self) -> None:
        """Finish a checkout a kill interrupted (see `checkout_commit`); CheckoutStuck
        when git refuses it, saying what to run."""
        todo = self._checkout_journal()
        if todo is None:
            return
        old, new, reflog = todo
        try:
            # Forward: git writes the index last, so --reset rewrites every path the
            # interrupted checkout may have left half-done, and nothing else.
            self.git("read-tree", "--reset", "-u", new)
            self.git("update-ref", "-m", reflog, "HEAD", new, old)
        except GitError as e:
            raise CheckoutStuck(self._stuck(old, new, e.stderr)) from None
        self.recovered.append(f"an interrupted sync was finished ({reflog})")
        (self.state / CHECKOUT_JOURNAL).unlink()

    def _stuck(self, old: str, new: str, why: str, short: bool = False) -> str:
        why = " ".join((why.strip().splitlines() or ["git refused it"])[-1].split())
        what = f"moving the vault to commit {new[:7]} fails ({why.removeprefix('error: ')})"
        if short:
            return (f"an interrupted sync cannot be finished: {what}; its journal is "
                    f"{STATE_DIR}/{CHECKOUT_JOURNAL}")
        return (f"The vault {self.root} is stuck in an interrupted sync: {what}, and its "
                f"journal {self.state / CHECKOUT_JOURNAL} cannot be replayed. Run "
                f"`{FIX_CHECKOUT}` to go back to {old[:7]}, the commit before that sync "
                f"(your files and edits are kept).")

    def checkout_problem(self) -> str | None:
        """What stops the next command finishing an interrupted sync's checkout (a short
        form of CheckoutStuck's message), or None: there is none, or git will take it.
        Writes nothing: the commit is tried in a throwaway index."""
        journal = self.state / CHECKOUT_JOURNAL
        j = atomic.read_json(journal) if journal.exists() else None
        if not isinstance(j, dict) or self.head() != j.get("old"):
            return None
        new = j.get("new")
        if not isinstance(new, str) or \
                self.git("cat-file", "-t", new, check=False).strip() != "commit":
            return None
        import tempfile
        with tempfile.TemporaryDirectory(dir=self.state) as tmp:
            p = _run(["read-tree", new], cwd=self.root,
                     env={**os.environ, "GIT_INDEX_FILE": os.path.join(tmp, "index")})
        return self._stuck(j["old"], new, p.stderr, short=True) if p.returncode else None

    def repair_checkout(self) -> list[str]:
        """`agent doctor --fix`: finish an interrupted sync's checkout, or, when git
        refuses the commit it moves to, give it up (abandon_checkout). What was done,
        one line each (nothing: there was nothing to do)."""
        with self.locked(repair=False):
            self._clear_stale_git_locks()
            try:
                self._finish_checkout()
            except CheckoutStuck:
                return self.abandon_checkout()
            done, self.recovered = self.recovered, []
            return done

    def abandon_checkout(self) -> list[str]:
        """Give up the journalled checkout (call locked): HEAD stays at the commit before
        it, each file the checkout had already written is put back as it was there, and
        every other change in the work tree (a person's edits since) is kept, to be
        committed as theirs by the next command. Nothing is lost: a file put back held
        exactly the refused commit's version."""
        journal = self.state / CHECKOUT_JOURNAL
        todo = self._checkout_journal()
        if todo is None:
            return []
        old, new, _ = todo
        # The index back to HEAD's tree; the work tree is not touched by this.
        self.git("read-tree", old)
        moved = {p for p in self.git("diff-tree", "-r", "-z", "--no-renames", "--name-only",
                                     old, new).split("\0") if p}
        written = [p for p in self.dirty_paths() if p in moved and self._holds(p, new)]
        restore = []
        for rel in written:
            if self.git("ls-tree", "--name-only", old, "--", rel).strip():
                restore.append(rel)
            else:
                # A file only the refused commit has: not a person's (it is that
                # commit's own bytes), so it goes.
                (self.root / rel).unlink(missing_ok=True)
                parent = (self.root / rel).parent
                while parent != self.root and not any(parent.iterdir()):
                    parent.rmdir()
                    parent = parent.parent
        if restore:
            self.git("checkout-index", "-f", "-q", "--", *restore)
        journal.unlink(missing_ok=True)
        kept = [p for p in self.dirty_paths() if p not in written]
        lines = [f"gave up the interrupted sync to {new[:7]}, which git refuses to check "
                 f"out: the vault stays at {old[:7]}"]
        if written:
            lines.append(f"{len(written)} file{'s' * (len(written) != 1)} that sync had "
                         f"written put back: {', '.join(sorted(written)[:5])}"
                         f"{', ...' if len(written) > 5 else ''}")
        if kept:
            lines.append(f"{len(kept)} changed file{'s' * (len(kept) != 1)} kept, to be "
                         f"committed as your edits: {', '.join(sorted(kept)[:5])}"
                         f"{', ...' if len(kept) > 5 else ''}")
        return lines

    def _holds(self, rel: str, commit: str) -> bool:
        """Whether the work tree's `rel` is exactly `commit`'s version (both absent counts)."""
        entry = self.git("ls-tree", "-z", commit, "--", rel).split("\0")[0]
        path = self.root / rel
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return not entry
        if not entry:
            return False
        mode, _, oid = entry.split("\t", 1)[0].split()
        if stat.S_ISLNK(st.st_mode):
            data = os.readlink(path).encode("utf-8", "surrogateescape")
            return mode == "120000" and self.git(
                "hash-object", "--stdin", input=data.decode("utf-8", "surrogateescape")
            ).strip() == oid
        if not stat.S_ISREG(st.st_mode) or mode == "120000":
            return False
        return self.git("hash-object", "--no-filters", "--", rel).strip() == oid

    # ---- the lock and repairs ------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, repair: bool = True):
        """Hold the vault lock (re-entrant); on first entry, repair and commit hand edits
        (not with `repair=False`: to save what must not be lost when repairing fails).

        The lock is an flock on .agent/lock, so a killed holder never leaves it stale.
        """
        with self._thread_lock:
            if self._lock_depth == 0:
                self.state.mkdir(exist_ok=True)
                fd = os.open(self.state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._lock_fd = fd
            self._lock_depth += 1
            try:
                if self._lock_depth == 1 and repair:
                    problem = unfinished_operation(self.root, unmerged=False)
                    if problem:
                        raise UnfinishedGit(problem)
                    self.prepare()
                yield self
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    fd, self._lock_fd = self._lock_fd, None
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)

    def prepare(self) -> None:
        """Make the work tree consistent and commit what is not the agent's next change."""
        self.agent_identity()  # a broken agent.toml stops us before anything is written
        self._clear_stale_git_locks()
        self._finish_checkout()
        dirty, unmerged = self._status()
        if unmerged:
            raise UnfinishedGit(conflicted(self.root, unmerged))
        held = self.broken_hand_edit(dirty)
        if held:                  # left uncommitted and named, never committed (nor synced)
            self.too_big.append(held)
            dirty = [p for p in dirty if p != "cron.json"]
        pending = self._read_pending()
        if dirty:
            held = self.held_back(dirty)
            dirty = [p for p in dirty if p not in held]
        if not dirty:
            if pending:
                self._clear_pending()
            return
        torn = self._repair_torn(p for p in dirty if p.endswith(".jsonl"))
        self.recovered.extend(torn)
        if torn:
            dirty = self.dirty_paths()
        live, dead = self._claims()

        def under(p, prefixes):
            return any(p == x or p.startswith(x + "/") for x in prefixes)
        dirty = [p for p in dirty if not under(p, live)]
        pending |= {p for p in dirty if under(p, dead)}
        leftovers = [p for p in dirty if p in pending]
        # What a killed turn's commands wrote is held to the turn's own rule (its quota,
        # no links leading out), as its commit would have been.
        out: dict[str, str] = {}
        for prefix, quota in dead.items():
            out.update(self.uncommittable([p for p in leftovers if under(p, [prefix])], quota))
        out.update(self.uncommittable([p for p in dirty if p not in out]))
        if out:
            self.hold_back(out)
            self.too_big.extend(f"{p}: {why}; not committed" for p, why in out.items())
            dirty = [p for p in dirty if p not in out]
            leftovers = [p for p in leftovers if p not in out]
        if leftovers:
            intended = self._intended()
            if intended is not None:
                # The interrupted change itself, as it would have been committed, marked.
                self._commit_paths(leftovers, dataclasses.replace(intended, trailers={
                    **intended.trailers, "Recovered": "interrupted before its commit"}))
            else:
                self._commit_paths(leftovers, recovered(leftovers))
        edits = [p for p in dirty if p not in pending and not self._too_big(p)]
        if edits:
            self._commit_paths(edits, by_hand(edits, self.user_identity()))
        self._clear_pending()

    def broken_hand_edit(self, dirty: list[str]) -> str | None:
        """Why a hand edit in `dirty` cannot be committed (a cron.json that does not
        parse), or None. Committed, a broken cron.json would stop every job and sync
        would spread it: it is left uncommitted, and said so, until it parses."""
        if "cron.json" not in dirty:
            return None
        from agent.stores import cron   # local: the vault knows the format only here
        try:
            cron.read(self.root)
        except UserError as e:
            return f"{e} It is not committed until it is fixed (agent edit cron.json)."
        return None

    def _too_big(self, rel: str) -> bool:
        """A hand-added file over COMMIT_BYTES: left uncommitted, and said so (once)."""
        from agent.vault.safe import COMMIT_BYTES, _size
        try:
            st = os.lstat(self.root / rel)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size <= COMMIT_BYTES:
            return False
        if self.git("ls-files", "--", rel).strip():
            return False        # already tracked: a change to it is the person's to commit
        self.too_big.append(f"{rel} is {_size(st.st_size)}, over the {_size(COMMIT_BYTES)} "
                            f"limit for a hand-added file: not committed (commit it with git "
                            f"yourself, or list it in .gitignore)")
        self.hold_back({rel: f"{_size(st.st_size)}, over the {_size(COMMIT_BYTES)} limit "
                             f"for a hand-added file"})
        return True

    # ---- files left uncommitted on purpose ------------------------------------------

    def uncommittable(self, paths, quota: int | None = None) -> dict[str, str]:
        """Of the changed files `paths`, those no commit may take, each with why: a
        symlink leading out of the vault (see offlimits.link_problem), and with `quota`
        (bytes one turn's commands may add), the files past it, taken in name order (a
        file bigger than the quota on its own is always past it)."""
        from agent.config import show_size
        out: dict[str, str] = {}
        used = 0
        for rel in sorted(paths):
            try:
                st = os.lstat(self.root / rel)
            except OSError:
                continue                       # deleted: nothing to hold back
            if stat.S_ISLNK(st.st_mode):
                problem = link_problem(rel, os.readlink(self.root / rel))
                if problem:
                    out[rel] = problem
                continue
            if quota is not None and stat.S_ISREG(st.st_mode):
                if used + st.st_size > quota:
                    out[rel] = (f"{show_size(st.st_size)}, past the {show_size(quota)} one "
                                f"turn may add to the vault ([exec] workspace_quota)")
                else:
                    used += st.st_size
        return out

    def _signature(self, rel: str) -> list | None:
        try:
            st = os.lstat(self.root / rel)
        except OSError:
            return None
        return [st.st_mode, st.st_size, st.st_mtime_ns]

    def held_back(self, dirty=None) -> dict[str, str]:
        """The files left uncommitted on purpose (hold_back) that are as they were then,
        with why; no command commits them. One that changed since is judged again, and
        with `dirty` (the changed files now) one no longer among them is forgotten."""
        path = self.state / HELD_FILE
        data = atomic.read_json(path) if path.exists() else None
        if not isinstance(data, dict):
            return {}
        changed = set(dirty) if dirty is not None else None
        keep = {rel: e for rel, e in data.items() if isinstance(e, dict)
                and (changed is None or rel in changed) and e.get("sig") == self._signature(rel)}
        if dirty is not None and len(keep) != len(data):
            with contextlib.suppress(OSError):
                if keep:
                    atomic.write_json(path, keep)
                else:
                    path.unlink()
        return {rel: str(e.get("why", "")) for rel, e in keep.items()}

    def hold_back(self, why: dict[str, str]) -> None:
        """Leave the files `why` names uncommitted (call locked): kept on disk as they
        are, listed in .agent/, skipped by every commit until they change."""
        if not why:
            return
        path = self.state / HELD_FILE
        data = atomic.read_json(path) if path.exists() else None
        data = data if isinstance(data, dict) else {}
        for rel, reason in why.items():
            data[rel] = {"why": reason, "sig": self._signature(rel)}
        self.state.mkdir(exist_ok=True)
        atomic.write_json(path, data)

    def _clear_stale_git_locks(self, wait: float = 2.0) -> None:
        """Remove lock files left by a git process killed mid-commit.

        We hold the vault lock, so no agent process is running git; a person's own git
        command finishes well within `wait`, so a lock still there after it is stale.
        """
        git_dir = self.git_dir

        def locks():
            found = [git_dir / n for n in ("index.lock", "HEAD.lock", "packed-refs.lock")]
            found += list((git_dir / "refs" / "heads").glob("**/*.lock"))
            return [p for p in found if p.exists()]

        deadline = time.monotonic() + wait
        while stale := locks():
            if time.monotonic() > deadline:
                pid = _git_process_in(self.root, lambda argv: True)
                if pid:
                    raise UnfinishedGit(
                        f"A git command (process {pid}) holds {stale[0].name} in the vault "
                        f"{self.root}: let it finish, then run again. Nothing was changed.")
                for lock in stale:
                    with contextlib.suppress(FileNotFoundError):
                        lock.unlink()
                    self.recovered.append(f".git/{lock.relative_to(git_dir)} (left by a killed git) removed")
                return
            time.sleep(0.05)

    def _repair_torn(self, paths) -> list[str]:
        """Set aside a torn last line of each JSONL file into .agent/recovered/."""
        moved = []
        for rel in paths:
            path = self.root / rel
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue      # only a plain file is repaired: never a link's target
            except OSError:
                continue
            with open(path, "rb+") as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    continue
                f.seek(size - 1)
                if f.read(1) == b"\n":
                    continue
                # Find the start of the torn line: the byte after the last newline.
                pos, chunk = size, 65536
                start = 0
                while pos > 0:
                    pos = max(0, pos - chunk)
                    f.seek(pos)
                    data = f.read(min(chunk, size - pos))
                    nl = data.rfind(b"\n")
                    if nl >= 0:
                        start = pos + nl + 1
                        break
                f.seek(start)
                torn = f.read()
                dest_dir = self.state / "recovered"
                dest_dir.mkdir(parents=True, exist_ok=True)
                stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
                dest = dest_dir / f"{rel.replace('/', '__')}.{stamp}.torn"
                dest.write_bytes(torn)
                f.truncate(start)
                f.flush()
                os.fsync(f.fileno())
            moved.append(f"{rel} -> {dest.relative_to(self.root)}")
        return moved

    # ---- claims: files a running sandboxed command writes --------------------------

    def claim(self, prefix: str, quota: int | None = None) -> Path:
        """Mark `prefix/` as being written by a command this process runs (call locked).

        Until the claim is released, no process's repair treats changes under it as hand
        edits: they belong to the turn that ran the command and go in its commit
        (`include`). A claim whose process died is dropped and its changes recovered as
        the agent's.
        """
        folder = self.state / "claims"
        folder.mkdir(parents=True, exist_ok=True)
        import secrets
        path = folder / f"{os.getpid()}-{secrets.token_hex(4)}.json"
        path.write_text(json.dumps({"pid": os.getpid(), "prefix": prefix.strip("/"),
                                    "quota": quota}))
        return path

    def release(self, claim: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            claim.unlink()

    def _claims(self) -> tuple[list[str], dict[str, int | None]]:
        """(prefixes claimed by live processes, {prefix whose claimant died: its quota});
        dead ones removed."""
        live, dead = [], {}
        for path in (self.state / "claims").glob("*.json"):
            try:
                data = json.loads(path.read_text())
                pid, prefix = int(data["pid"]), str(data["prefix"])
                quota = data.get("quota")
                quota = int(quota) if quota is not None else None
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue
            try:
                os.kill(pid, 0)
                alive = True
            except ProcessLookupError:
                alive = False
            except PermissionError:
                alive = True
            if alive:
                live.append(prefix)
            else:
                dead[prefix] = quota
                self.release(path)
        return live, dead

    def include(self, paths: list[str]) -> None:
        """Count `paths` (changed on disk by a command this turn ran) as this process's writes."""
        redact.guard_files(self, [self.rel(rel) for rel in paths])   # keys stay out (issue 26)
        for rel in paths:
            # As git lists it, not resolved: a symlink is the link, never its target.
            rel = os.path.normpath(rel).replace(os.sep, "/")
            if rel.startswith(("/", "../")) or rel == ".." or is_off_limits(rel):
                raise VaultError(f"{rel} is not a path the vault commits.")
            self._note_pending(rel)

    def _pending_file(self) -> Path:
        return self.state / "pending.json"

    def _read_journal(self) -> dict:
        try:
            data = json.loads(self._pending_file().read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return {}
        if isinstance(data, list):                  # the journal's first form: paths only
            data = {"paths": data}
        return data if isinstance(data, dict) else {}

    def _read_pending(self) -> set[str]:
        paths = self._read_journal().get("paths")
        return {p for p in paths if isinstance(p, str)} if isinstance(paths, list) else set()

    def _intended(self) -> Change | None:
        """The change an interrupted command was making (see intend), or None."""
        c = self._read_journal().get("change")
        if not isinstance(c, dict) or not isinstance(c.get("kind"), str) \
                or not isinstance(c.get("subject"), str):
            return None
        trailers = c.get("trailers") if isinstance(c.get("trailers"), dict) else {}
        return Change(c["kind"], c["subject"], scope=c.get("scope") if isinstance(
            c.get("scope"), str) else None, body=str(c.get("body") or ""),
            trailers={str(k): str(v) for k, v in trailers.items()})

    def intend(self, change: Change) -> None:
        """Journal the agent change about to be written, so that a kill before its commit
        is recovered as that change (its kind, scope and trailers, which undo reads)."""
        self._intent = change
        self._write_journal()

    def _write_journal(self) -> None:
        self.state.mkdir(exist_ok=True)
        data: dict = {"paths": self._touched}
        change = getattr(self, "_intent", None)
        if change is not None and change.author is None:
            data["change"] = {"kind": change.kind, "subject": change.subject,
                              "scope": change.scope, "body": change.body,
                              "trailers": dict(change.trailers)}
        atomic.write_text(self._pending_file(), json.dumps(data))

    def _note_pending(self, rel: str) -> None:
        """Journal a path before writing it, so a crash's leftovers are known as ours."""
        if rel in self._touched:
            return
        self._touched.append(rel)
        self.state.mkdir(exist_ok=True)
        self._write_journal()

    def _clear_pending(self) -> None:
        self._intent = None
        with contextlib.suppress(FileNotFoundError):
            self._pending_file().unlink()

    # ---- writes --------------------------------------------------------------------

    def check_writable(self, rel: str) -> str:
        """The vault path the agent would write for `rel`, or VaultError saying why not
        (outside the vault, .git/ or .agent/, not a regular file). A command checks its
        target this way before taking the lock, so a refusal commits nothing."""
        rel = self.rel(rel)
        if is_off_limits(rel):
            raise VaultError(refusal(rel))
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            if not stat.S_ISREG(os.stat(self.root / rel).st_mode):
                raise VaultError(f"{rel} is not a regular file (a FIFO, device or folder); "
                                 f"the agent does not write to it.")
        return rel

    def _writable(self, rel: str) -> Path:
        rel = self.rel(rel)
        if is_off_limits(rel):
            raise VaultError(refusal(rel))
        path = self.root / rel
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise VaultError(f"{rel} is not a regular file (a FIFO, device or folder); "
                                 f"the agent does not write to it.")
        self._note_pending(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def append_lines(self, rel: str, lines: list[str], header: str | None = None) -> None:
        """Append whole lines, flushed and fsynced; `header` starts a new file."""
        path = self._writable(rel)
        lines = redact.guard_lines(self, rel, lines)                 # keys stay out (issue 26)
        new = not path.exists() or path.stat().st_size == 0
        data = "".join(line.rstrip("\n") + "\n" for line in lines)
        if new and header:
            data = header + data
        elif not new:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    data = "\n" + data
        with open(path, "a", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if new:
            atomic.fsync_dir(path.parent)

    def append_line(self, rel: str, line: str, header: str | None = None) -> None:
        self.append_lines(rel, [line], header)

    def write_text(self, rel: str, text: str) -> None:
        """Replace a file atomically: a temporary file, fsync, then os.replace."""
        text = redact.guard(self, rel, text)                         # keys stay out (issue 26)
        atomic.write_text(self._writable(rel), text, sync_dir=True)

    def delete(self, rel: str) -> None:
        path = self._writable(rel)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def read_text(self, rel: str, errors: str = "strict") -> str:
        """A vault file's text through the one safe read (agent.vault.safe)."""
        from agent.vault import safe
        text = safe.read_text(self.root, rel, errors=errors)
        if text is None:
            raise FileNotFoundError(f"{rel}: no such file in the vault")
        return text


def _is_state(rel: str) -> bool:
    return rel == STATE_DIR or rel.startswith(f"{STATE_DIR}/")


def _union_lines() -> list[str]:
    from agent.vault import mergedriver

    return list(mergedriver.ATTRIBUTES)


HOST_KEY = "agent.host"
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def check_host(name: str) -> str:
    """A machine name as jobs and heartbeats store it; VaultError says what is allowed."""
    name = str(name).strip()
    if not _HOST.match(name):
        raise VaultError(f"{name!r} is not a machine name: use letters, digits, '.', '_' "
                         f"and '-' (as in laptop or home-server)")
    return name


def default_host() -> str:
    """The hostname's first label, as a machine name ("machine" if it has none)."""
    import socket
    label = (socket.gethostname() or "").split(".")[0]
    label = re.sub(r"[^A-Za-z0-9._-]", "-", label).strip("-._")[:63]
    return label or "machine"


def now() -> datetime:
    """The local time with its offset (the edge where commands take the time)."""
    return datetime.now().astimezone()

