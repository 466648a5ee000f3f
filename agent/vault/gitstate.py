"""What git's own files say about the vault's repository, read without starting git
where it can be: where the repository is, whether an operation (a merge, a rebase, a
person's `git commit`) is unfinished in it, and whether a git process runs there.
Anything about to commit asks `unfinished_operation` first."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from agent.vault import git
from agent.vault.git import VaultError


class UnfinishedGit(VaultError):
    """The vault's repository is mid-operation (merge, rebase, ...): the agent commits nothing."""


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


def check_committable(root: Path) -> None:
    """UnfinishedGit when the repository at `root` is mid-merge, mid-rebase, detached, ...

    (see `unfinished_operation`); called before anything is written or committed.
    """
    problem = unfinished_operation(root)
    if problem:
        raise UnfinishedGit(problem)


def head_from_files(root: Path) -> str | None:
    """Where HEAD points, read from the .git folder with no process ("ref:<name>:<sha>",
    "packed:...", "unborn:...", "detached:<sha>"): a signature to compare, not a
    commit to use. None when .git is not a plain folder of loose and packed refs (a
    linked work tree, a reftable): then ask git."""
    dotgit = Path(root) / ".git"
    try:
        if (dotgit / "reftable").exists():
            return None
        head = (dotgit / "HEAD").read_text("ascii").strip()
        if not head.startswith("ref: "):
            return "detached:" + head
        ref = head[5:]
        if not ref.startswith("refs/") or ".." in ref:
            return None
        try:
            return "ref:" + ref + ":" + (dotgit / ref).read_text("ascii").strip()
        except FileNotFoundError:
            pass
        try:
            packed = (dotgit / "packed-refs").read_text("ascii")
        except FileNotFoundError:
            return "unborn:" + ref
        for line in packed.splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return "packed:" + ref + ":" + sha
        return "unborn:" + ref
    except (OSError, UnicodeDecodeError):
        return None


_FORMATS: dict[str, str] = {}      # root -> its object format, asked once a process


def object_format(root: Path) -> str:
    """The object format of the repository at `root`, as git's extensions.objectFormat
    says: "sha1" or "sha256". Told by the length of HEAD's commit id where .git's
    files give it (no process), else asked of git once."""
    sig = head_from_files(root)
    sha = (sig or "").rsplit(":", 1)[-1]
    if sig and not sig.startswith("unborn:") and len(sha) in (40, 64):
        return "sha1" if len(sha) == 40 else "sha256"
    key = str(root)
    if key not in _FORMATS:
        p = git.run(["rev-parse", "--show-object-format"], root)
        _FORMATS[key] = p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "sha1"
    return _FORMATS[key]


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
        p = git.run(["ls-files", "-u", "-z"], root)
        if p.returncode == 0 and p.stdout:
            return conflicted(root, {item.split("\t", 1)[-1]
                                     for item in p.stdout.split("\0") if item})
    busy = _git_commit_running(root, g)
    if busy:
        return (f"A `git commit` is waiting for its message in the vault {root} (process "
                f"{busy}): finish or abandon it" + finish)
    return None


def conflicted(root: Path, files: Iterable[str]) -> str:
    """The sentence for a vault with conflicted (unmerged) files."""
    files = sorted(files)
    return (f"The vault {root} has conflicted files ({', '.join(files[:3])}"
            f"{', ...' if len(files) > 3 else ''}): resolve them and `git add` them; then "
            f"run the command again. Nothing was changed.")


# The two-letter codes `git status --porcelain` gives a path with a conflict.
_UNMERGED = frozenset({"DD", "AU", "UD", "UA", "DU", "AA", "UU"})


def _git_commit_running(root: Path, g: Path) -> int | None:
    """The pid of a person's `git commit` running in the vault, or None.

    Checked only when COMMIT_EDITMSG is newer than the last ref update, that is when a
    commit started and has not ended with one. Git leaves no lock while a commit waits
    for its message (it holds index.lock only as it writes the index), so only the
    process itself says whether the commit is still open or was abandoned.
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
    return git_process_in(root, lambda argv: "commit" in argv[1:])


def git_process_in(root: Path, match: Callable[[list[str]], bool]) -> int | None:
    """The pid of a git process (its arguments passing `match`) working in the vault at
    `root` (its current folder, or the one its `-C` names, inside it), or None.

    psutil reads the process table on Linux, macOS, Windows and the BSDs alike (a scan
    of Linux's /proc found none anywhere else); a process of another user it may not
    read is not ours to wait for, and is passed over."""
    import psutil       # here: only a stale lock or an open `git commit` asks

    real = os.path.realpath(root)
    me = os.getpid()
    for proc in psutil.process_iter(["name", "cmdline", "cwd"]):
        info = proc.info
        argv, cwd = info.get("cmdline"), info.get("cwd")
        if proc.pid == me or not argv or not cwd:
            continue
        if os.path.basename(argv[0]).lower() not in ("git", "git.exe"):
            continue
        if not match(list(argv)):
            continue
        cwd = os.path.realpath(cwd)
        for i, a in enumerate(argv):
            if a == "-C" and i + 1 < len(argv):
                cwd = os.path.realpath(os.path.join(cwd, argv[i + 1]))
        if cwd == real or cwd.startswith(real + os.sep):
            return int(proc.pid)
    return None
