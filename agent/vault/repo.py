"""The vault: a Git repository of plain files; `Vault` is the face of agent/vault.

Everything that changes the vault goes through a `Vault`:

    with vault.locked():                      # serialise with other processes
        vault.append_lines("memory/2026-11-20.md", ["- 14:05 bought milk"])
        vault.commit(Change("note", "add 1 line to memory/2026-11-20.md"))

`locked()` first repairs what a crash may have left (a torn JSONL line, files written
but not committed) and commits uncommitted hand edits on their own, authored by the
user, so that every agent commit holds only the agent's own changes. A commit's message
is made from a `Change` record (agent.vault.change); reading history back is
agent.vault.history.

A Vault is made of parts, one idea each:

    agent.vault.git       the one git runner (hooks, filters and fsmonitor always off)
    agent.vault.gitstate  what git's own files say: unfinished merges, a running git
    agent.vault.lock      the lock, the repairs made as it is taken, claims
    agent.vault.journal   the write journal and a sync's checkout journal
    agent.vault.writes    appends and atomic rewrites of vault files
    agent.vault.identity  the agent's and the person's identities, this machine's name
    agent.vault.gitcmd    git asked about the vault: fsck, blame, dates, remotes
    this module           opening and making a vault, identities, status and commits
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from agent.fs import atomic
from agent.package import package_data
from agent.vault import git
from agent.vault.change import Change, Identity
from agent.vault.git import GitError as GitError, VaultError as VaultError
from agent.vault.gitstate import _UNMERGED, check_committable, git_dir_of, head_from_files
from agent.vault.identity import VaultIdentity
from agent.vault.journal import Journal
from agent.vault.layout import GIT_ONLY, Layout
from agent.vault.lock import VaultLock
from agent.fs.offlimits import STATE_DIR
from agent.vault.turnvault import TurnVault
from agent.vault.writes import Writes

MARKER = "agent.toml"
DEFAULT_VAULT = Path("~/.agent/vault")

git_version = git.version              # for `agent doctor`
# Files the agent itself writes and reads back: never committed, whatever .gitignore says.
CONTROL_FILES = (".gitignore", ".gitattributes", MARKER, "AGENTS.md")


class NotAVault(VaultError):
    pass


def find_vault_above(start: str | os.PathLike[str]) -> Path | None:
    """The vault containing the folder `start` (itself or a parent), as git finds its repo."""
    here = Path(start).absolute()
    for d in (here, *here.parents):
        if (d / MARKER).is_file() and (d / ".git").exists():
            return d
    return None


def resolve_path(explicit: str | os.PathLike[str] | None) -> tuple[Path, str]:
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


def _git_toplevel(path: Path) -> Path | None:
    p = git.run(["rev-parse", "--show-toplevel"], path)
    return Path(p.stdout.strip()) if p.returncode == 0 else None


class Vault(TurnVault):
    """A vault: its files, its git repository, and the parts it owns, one module each:
    `lock` (the lock and the repairs made as it is taken, held-back files, claims),
    `journal` (the write and checkout journals) and `writes` (the file writes). The
    methods here are the verbs the rest of the agent uses (see the module's docstring)."""

    def __init__(self, root: Path, layout: Layout = GIT_ONLY):
        self.root = Path(root)
        # What the vault is told about the product's files (agent.vault.layout): which
        # hand edits are broken, what no commit may take, a new vault's merge rules, the
        # state derived from the files; the formats are known above the vault.
        self.layout = layout
        self.state = self.root / STATE_DIR
        self.last_commit: tuple[str | None, str, list[str]] | None = None  # (parent, sha, paths)
        self.recovered: list[str] = []  # what the last repair set aside, for the CLI to report
        self.git_dir = git_dir_of(self.root)
        self.too_big: list[str] = []    # files left uncommitted, with why, for the CLI to report
        self.lock = VaultLock(self)
        self.journal = Journal(self)
        self.writes = Writes(self.root, self.rel, self.journal.note)
        self.identity = VaultIdentity(self)

    # ---- the parts' verbs ------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, repair: bool = True) -> Iterator[Vault]:
        """Hold the vault lock (see VaultLock.locked)."""
        with self.lock.locked(repair):
            yield self

    def read_text(self, rel: str, errors: str = "strict") -> str:
        return self.writes.read_text(rel, errors)

    def write_text(self, rel: str, text: str) -> list[str]:
        """Replace a file atomically; the kinds of secret kept out of it."""
        return self.writes.write_text(rel, text)

    def append_lines(self, rel: str, lines: list[str], header: str | None = None) -> list[str]:
        """Append whole lines; the kinds of secret kept out of them."""
        return self.writes.append_lines(rel, lines, header)

    def delete(self, rel: str) -> None:
        self.writes.delete(rel)

    def intend(self, change: Change, *, with_next_path: bool = False) -> None:
        """Journal the agent change about to be written (see Journal.intend)."""
        self.journal.intend(change, with_next_path=with_next_path)

    # ---- opening -------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], layout: Layout = GIT_ONLY) -> Vault:
        """The vault at `path`, or a NotAVault error saying how to make one.

        `layout`: what the vault is told about the product's files (agent.vault.layout;
        the product's is agent.ops.vaults.LAYOUT); without one, a plain repository."""
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
        return cls(root, layout)

    @classmethod
    def init(cls, path: str | os.PathLike[str],
             layout: Layout = GIT_ONLY) -> tuple[Vault, str]:
        """Make a vault at `path` (new, or adopting a folder of notes), with the merge
        rules and settings of `layout` (see `open`).

        Returns the vault and what happened: "created", "adopted" or "exists".
        Never overwrites a file and never nests a repository inside another.
        """
        root = Path(path).expanduser().absolute()
        if root.exists() and not root.is_dir():
            raise VaultError(f"{root} is a file; give `agent init` a folder.")
        if root.is_dir() and (root / MARKER).is_file() and (root / ".git").exists():
            return cls(root, layout), "exists"
        adopting = root.is_dir() and any(p.name != ".git" for p in root.iterdir())
        root.mkdir(parents=True, exist_ok=True)
        top = _git_toplevel(root)
        if top is not None and top.resolve() != root.resolve():
            raise VaultError(
                f"{root} is inside the git repository {top}; a vault is a repository of "
                f"its own and is never nested in another. Choose a folder outside it, "
                f"or run `agent init {top}` to make the whole repository the vault.")
        if top is None:
            p = git.run(["init", "-q", "-b", "main"], root)
            if p.returncode:
                raise GitError(["init"], p.returncode, p.stderr)
        vault = cls(root, layout)
        vault._configure_repo()
        if adopting and vault.dirty_paths():
            # The user's own notes go in first, as their commit, so the init commit
            # holds only what the agent added.
            vault.commit_paths(None, Change("edit", "adopt existing notes as a vault",
                                             author=vault.identity.user()))
        existed = {n for n in (".gitignore", ".gitattributes") if (root / n).exists()}
        vault._copy_template()
        for rel, lines in init_lines(layout).items():
            for line in lines:
                vault._ensure_line(rel, line)
        committed = vault.dirty_paths()           # what the init commit holds
        added = [p for p in committed if p not in existed]
        changed = [p for p in committed if p in existed]
        what = f"{len(added)} file{'s' * (len(added) != 1)} added" + (
            f", {' and '.join(changed)} changed" if changed else "")
        vault.commit_paths(None, Change("init", "new vault" if not adopting else
                                         f"adopt this folder as a vault ({what})"))
        return vault, "adopted" if adopting else "created"

    def _configure_repo(self) -> None:
        # Status scans and index writes stay cheap as the vault grows.
        self.git("config", "core.untrackedCache", "true")
        self.git("config", "core.splitIndex", "true")
        self._exclude_state()
        from agent.vault import attributes

        attributes.configure(self, self.layout.git_config())
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

    def _copy_template(self) -> list[str]:
        from shutil import copyfile
        copied = []
        template = package_data("vault")
        for src in sorted(template.rglob("*")):
            if src.is_dir():
                (self.root / src.relative_to(template)).mkdir(parents=True, exist_ok=True)
        for rel, src in template_files():
            dst = self.root / rel
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                copyfile(src, dst)
                copied.append(rel)
        return copied

    def _ensure_line(self, rel: str, line: str) -> None:
        from agent.fs import safe
        path = self.root / rel
        text = safe.read_text(self.root, rel, errors="replace") or ""
        if line in text.splitlines():
            return
        sep = "" if not text or text.endswith("\n") else "\n"
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{sep}{line}\n")

    # ---- paths ---------------------------------------------------------------------

    def rel(self, path: str | os.PathLike[str]) -> str:
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

    # ---- identities (the part vault.identity) ------------------------------------------

    def agent_identity(self) -> Identity:
        """The agent's name and email from agent.toml (see VaultIdentity.agent)."""
        return self.identity.agent()

    def host(self, known: str | None = None) -> str:
        """This machine's name for the vault (see VaultIdentity.host)."""
        return self.identity.host(known)

    # ---- git -----------------------------------------------------------------------

    def git(self, *args: str, check: bool = True, env: dict[str, str] | None = None,
            input: str | None = None) -> str:
        full_env = None
        if env:
            full_env = os.environ.copy()
            full_env.update(env)
        # A git command a person runs meanwhile (or their editor's git integration) may
        # hold the index lock for a moment: wait for it rather than fail the change.
        p = git.run(list(args), self.root, env=full_env, input=input, wait_lock=True)
        if check and p.returncode:
            raise GitError(list(args), p.returncode, p.stderr)
        return p.stdout

    def head(self) -> str | None:
        """The commit HEAD is at (None: none yet), read from the .git folder when it is
        a plain one (no process), else asked of git."""
        sig = head_from_files(self.root)
        if sig is not None:
            if sig.startswith("unborn:"):
                return None
            sha = sig.rpartition(":")[2]
            if len(sha) in (40, 64) and all(c in "0123456789abcdef" for c in sha):
                return sha
        p = git.run(["rev-parse", "--verify", "-q", "HEAD"], self.root)
        return p.stdout.strip() or None

    def files(self, *patterns: str) -> list[str]:
        """The vault's files (tracked, or untracked and not ignored) matching the
        pathspec patterns, e.g. "*.md"."""
        out = self.git("ls-files", "-z", "--cached", "--others", "--exclude-standard",
                       "--", *patterns, check=False)
        return [p for p in out.split("\0") if p and not _is_state(p)]

    def dirty_paths(self) -> list[str]:
        """Paths with uncommitted changes (modified, added, deleted, untracked)."""
        return self.status()[0]

    def status(self) -> tuple[list[str], list[str]]:
        """(dirty paths as `dirty_paths` gives them, conflicted paths), from one `git
        status`."""
        # Untracked files in the "normal" mode: it is the mode git's untracked cache
        # serves fastest; a new folder shows as `dir/` and is listed only then.
        # Outside the vault lock, status must not take git's index lock to refresh its
        # stat cache: that would make a concurrent agent commit fail.
        optional = () if self.lock.depth else ("--no-optional-locks",)
        out = self.git(*optional, "status", "--porcelain=v1", "-z", "--no-renames")
        paths: list[str] = []
        new_dirs: list[str] = []
        unmerged: list[str] = []
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

    def commit_paths(self, paths: list[str] | None, change: Change) -> str | None:
        """Stage `paths` (all changes when None) and commit them; None if nothing changed.

        Plumbing rather than `git commit`: it stages only the named paths and never
        re-scans the work tree, so the cost stays flat as the vault grows (with the
        split index, each write touches a small file, not the whole index).
        """
        # Under the lock it was checked as the lock was taken (one `git ls-files` fewer).
        if not self.lock.depth:
            check_committable(self.root)
        self.last_commit = None          # until a commit is made (none when nothing changed)
        if paths is None:
            self.git("add", "-A", "--", ".", f":(exclude){STATE_DIR}",
                     ":(exclude,glob)**/.*.[0-9]*.tmp")     # atomic.is_temporary
        else:
            paths = [p for p in paths if not _is_state(p)]
            if not paths:
                return None
            self.git("update-index", "--add", "--remove", "--", *sorted(set(paths)))
        tree = self.git("write-tree").strip()
        p = git.run(["rev-parse", "HEAD", "HEAD^{tree}"], self.root)
        head, head_tree = (p.stdout.split() + [None, None])[:2] if p.returncode == 0 else (None, None)
        if tree == head_tree:
            return None
        message, who = self._message(change)
        sha = self.git("commit-tree", tree, *(["-p", head] if head else []), "-F", "-",
                       env=who.env(), input=message).strip()
        subject = message.splitlines()[0] if message else ""
        # "" for no old value: HEAD must not exist yet (in either object format).
        self.git("update-ref", "-m", f"commit: {subject}", "HEAD", sha, head or "")
        # What this commit changed, for the search index's refresh right after it (two
        # git commands fewer per turn); None when `git add -A` chose the paths.
        self.last_commit = (head, sha, sorted(set(paths))) if paths is not None else None
        self.maybe_gc()
        return sha

    def maybe_gc(self) -> None:
        """Start git's own housekeeping in the background when loose objects or packs
        pile up.

        Plumbing commits never trigger `gc --auto` the way `git commit` does, and a
        sync's fetch is told not to start `git maintenance` (a process a sync with
        nothing to do need not pay for). The check is git's own estimate (one fan-out
        folder of 256, and the packs against gc.autoPackLimit's default of 50), so it
        costs two directory reads.
        """
        objects = self.git_dir / "objects"
        try:
            loose = len(os.listdir(objects / "17"))
        except FileNotFoundError:
            loose = 0
        try:
            packs = sum(1 for f in os.listdir(objects / "pack") if f.endswith(".pack"))
        except FileNotFoundError:
            packs = 0
        if loose * 256 > 6700 or packs > 50:
            git.background(["gc", "--auto", "--quiet"], self.root)

    def _message(self, change: Change) -> tuple[str, Identity]:
        return change.message(), change.author or self.agent_identity()

    def commit(self, change: Change, paths: list[str] | None = None) -> str | None:
        """Commit what this process wrote (or `paths`): the sha, or None if nothing changed.

        `change` says what changed (its author is the agent unless it names one).
        """
        if not isinstance(change, Change):
            # Commit text is made in one place, Change.message: never a string.
            raise TypeError(f"a commit is a Change, not {type(change).__name__}")
        journal = self.journal
        targets = list(paths) if paths is not None else list(journal.touched)
        sha = self.commit_paths(targets, change)
        journal.touched = [] if paths is None else [p for p in journal.touched if p not in targets]
        if not journal.touched:
            journal.clear()
        return sha

    def revert(self, sha: str, change: Change) -> str | None:
        """Revert commit `sha` as a new commit; GitError if it would conflict.

        Used by agent.vault.history.undo, which says what `change` is.
        """
        check_committable(self.root)
        # An undo must not settle a clash by keeping both versions (that is for syncs
        # between machines): a fact the person changed since makes the revert refuse.
        off = [a for name in self.layout.keeps_both()
               for a in ("-c", f"merge.{name}.driver=false")]
        p = git.run([*off, "revert", "--no-commit", sha], self.root)
        if p.returncode:
            git.run(["revert", "--abort"], self.root)
            git.run(["reset", "--merge"], self.root)
            raise GitError(["revert", sha], p.returncode, p.stderr + p.stdout)
        message, who = self._message(change)
        p = git.run(["commit", "-q", "--no-verify", "-F", "-"], self.root,
                    env={**os.environ, **who.env()}, input=message)
        if p.returncode:
            git.run(["revert", "--abort"], self.root)
            if "nothing to commit" in p.stdout + p.stderr:
                return None
            raise GitError(["commit"], p.returncode, p.stderr + p.stdout)
        return self.head()


def _is_state(rel: str) -> bool:
    return rel == STATE_DIR or rel.startswith(f"{STATE_DIR}/") or atomic.is_temporary(rel)


def template_files() -> list[tuple[str, Path]]:
    """(vault path, file shipped with the package) of every file `agent init` copies into
    a new vault: the template and the built-in heartbeats (besides these, it writes
    .gitignore and .gitattributes: `init_lines`)."""
    template = package_data("vault")
    out = [(src.relative_to(template).as_posix(), src) for src in sorted(template.rglob("*"))
           if not src.is_dir()]
    out += [(f"heartbeat/{src.name}", src) for src in sorted(package_data("heartbeat").glob("*.md"))]
    return out


def init_lines(layout: Layout = GIT_ONLY) -> dict[str, list[str]]:
    """The lines `agent init` makes sure .gitignore and .gitattributes hold (the latter:
    the merge rules of `layout`)."""
    return {".gitignore": [f"{STATE_DIR}/"], ".gitattributes": list(layout.attributes)}
