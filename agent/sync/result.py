"""What one sync did (SyncResult, filled in as it goes), and the error a sync that
could not be done raises (SyncError)."""

from __future__ import annotations

from typing import Any

from agent.vault.repo import VaultError


class SyncError(VaultError):
    """A sync that could not be done; the message says why and what to do."""


class SyncResult:
    """What one sync did, filled in as it goes (a plain class: every sync builds this
    one, and a dataclass's generated methods cost its start a millisecond)."""

    def __init__(self, remote: str, branch: str) -> None:
        self.remote, self.branch = remote, branch
        self.commits_in = self.commits_out = 0
        self.pushed = False
        self.facts_added = self.facts_removed = 0
        self.kept_both: list[str] = []
        self.merge_commit: str | None = None
        self.head: str | None = None
        self.claimed: list[str] = []           # jobs given to this machine
        self.held: list[str] = []              # incoming changes held (labels)
        self.refused: dict[str, str] = {}      # proposal branches not taken
        self.forgotten: list[str] = []         # what the tombstones did (lines)
        self.waiting = False       # a forget made elsewhere waits: nothing merged or pushed
        # HEAD's move, when every path it changed is known: (from, to, the paths), for
        # the search index's refresh (agent.search.update), so it need not ask git.
        self.moved: tuple[str, str, list[str]] | None = None

    def line(self) -> str:
        """`sync: 3 commits in (memory: +2 facts), 5 out`"""
        inc = f"{self.commits_in} commit{'s' if self.commits_in != 1 else ''} in"
        if self.facts_added or self.facts_removed:
            parts = []
            if self.facts_added:
                parts.append(f"+{self.facts_added} fact{'s' if self.facts_added != 1 else ''}")
            if self.facts_removed:
                parts.append(f"-{self.facts_removed}")
            inc += f" (memory: {', '.join(parts)})"
        out = f"{self.commits_out} out" if self.pushed or not self.commits_out else \
            f"{self.commits_out} not pushed"
        return f"sync: {inc}, {out}"

    def refused_lines(self) -> list[str]:
        """A line for each proposal branch the remote offered and this vault did not take."""
        return [f"refused: proposal branch {b} from {self.remote}: {why}. It is not taken "
                f"here; `agent review` lists what waits from the ledger."
                for b, why in sorted(self.refused.items())]

    def held_line(self) -> str | None:
        """The one line saying what came in and was not taken, or None."""
        if not self.held:
            return None
        return (f"held: {', '.join(self.held)} from {self.remote} (this machine keeps its "
                f"own version until you decide: `agent sync held`)")

    def as_dict(self) -> dict[str, Any]:
        return {"remote": self.remote, "branch": self.branch, "in": self.commits_in,
                "out": self.commits_out, "pushed": self.pushed,
                "facts_added": self.facts_added, "facts_removed": self.facts_removed,
                "kept_both": self.kept_both, "merge": self.merge_commit, "head": self.head,
                "claimed": self.claimed, "held": self.held, "refused": self.refused,
                "forgotten": self.forgotten, "waiting": self.waiting}


def first_error(stderr: str) -> str:
    """The first line of git's error output, without git's `fatal: `/`error: `."""
    for line in stderr.splitlines():
        line = line.strip().removeprefix("fatal: ").removeprefix("error: ")
        if line:
            return line.rstrip(".")
    return "git failed"
