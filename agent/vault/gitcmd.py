"""What git is asked about a vault beyond its files and commits: whether the repository
is sound (fsck), who wrote each line (blame), a date as `git log --since` reads it,
whether there is a remote; and git run with the terminal attached (`agent git`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.vault import git

if TYPE_CHECKING:
    from agent.vault.repo import Vault


def has_remote(vault: Vault) -> bool:
    """Whether the vault has a git remote (it is kept on several machines)."""
    return bool(vault.git("remote", check=False).strip())


def fsck(vault: Vault) -> str | None:
    """The first problem `git fsck` finds in the repository, None when it is sound."""
    p = git.run(["fsck", "--no-progress", "--no-dangling"], vault.root)
    if p.returncode == 0:
        return None
    lines = (p.stderr.strip() + "\n" + p.stdout.strip()).strip().splitlines()
    named = [line for line in lines if any(w in line for w in ("corrupt", "missing", "broken"))]
    return (named or lines or ["git fsck failed"])[0].removeprefix("error: ")


def passthrough(vault: Vault, *args: str) -> int:
    """Run git in the vault with the terminal attached (for `agent git`); its exit code."""
    return git.call(list(args), vault.root)


def date_stamp(vault: Vault, text: str, now: float) -> int | None:
    """A date as `git log --since` reads it ("2 weeks ago", "yesterday", "2025-03-01"),
    counted back from the Unix time `now`, as a Unix time; None when git does not
    understand it (it reads unknown words as now, or as 1970)."""
    # git's date parser takes "now" from GIT_TEST_DATE_NOW (whole seconds) when set:
    # "yesterday" is then the day before the clock the command runs at (AGENT_NOW).
    whole = int(now)
    stamp = _since(vault, text, whole)
    if not stamp:
        return None
    if abs(stamp - whole) < 5 and text.strip().lower() not in ("now", "today"):
        # Read as now: a word git did not understand, or a moment that is just now (a
        # precise time a few seconds ago). Asked again with now a minute later, the first
        # moves with it; a date stays where it is.
        if _since(vault, text, whole + 60) != stamp:
            return None
    return stamp


def _since(vault: Vault, text: str, now: int) -> int | None:
    out = vault.git("rev-parse", f"--since={text}", check=False,
                    env={"GIT_TEST_DATE_NOW": str(now)}).strip()
    try:
        return int(out.rpartition("=")[2])
    except ValueError:
        return None


def line_authors(vault: Vault, rel: str) -> list[str] | None:
    """The author email of each line of `rel` as it is in the work tree (git blame;
    a line not committed yet reads `not.committed.yet`), or None when git cannot say."""
    p = git.run(["blame", "--line-porcelain", "--", rel], vault.root)
    if p.returncode:
        return None
    return [line[len("author-mail "):].strip().strip("<>")
            for line in p.stdout.splitlines() if line.startswith("author-mail ")]
