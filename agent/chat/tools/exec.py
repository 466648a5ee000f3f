"""`exec`: run a shell command in the bubblewrap sandbox (agent/sandbox.py).

The command sees the vault read-only at /vault and may write only /vault/workspace/
(its working folder and HOME). What it writes there is committed with the turn, so
every change a command made can be reviewed with git, up to `[exec] workspace_quota`
a turn and never a symlink leading out of the vault: those stay on disk uncommitted,
and the tool's answer lists them (Vault.uncommittable). Its memory and /tmp are
bounded too (`[exec] memory`, `[exec] tmp_size`), and the answer names the setting a
command ran into. Offered only where bwrap works and `[exec] enabled` is not false; it
never runs a command unsandboxed.
"""

from __future__ import annotations

import re
import signal

from agent import sandbox
from agent.chat.tools.registry import ToolError, current_context, tool
from agent.config import show_size
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.staged import StagedVault

# What a program prints when an allocation fails (Python, libc's strerror, C++, glibc's
# obstack, node, Go, Rust): the command hit [exec] memory, not a bug to hunt.
_NO_MEMORY = re.compile(r"MemoryError|Cannot allocate memory|[Oo]ut of memory|bad_alloc|"
                        r"memory exhausted|allocation failed|memory allocation of \d+ bytes failed")
_NO_SPACE = "No space left on device"


def exec_unavailable(settings) -> str | None:
    if settings is not None and not settings.exec_enabled:
        return "commands are turned off ([exec] enabled = false in agent.toml)"
    status = sandbox.sandbox_status()
    if not status.ok:
        return status.message
    return None


@tool(name="exec", available=exec_unavailable)
def exec_(command: str, timeout: float | None = None) -> str:
    """Run a shell command (sh -c) in a sandbox and return its exit status, stdout and stderr.

    The command runs in /vault/workspace/, a scratch folder of the vault that it may
    write (what it writes is saved with this turn); the rest of the vault is read-only
    at /vault, the system read-only, /tmp private and empty. Each process's memory and
    /tmp's size are limited, and what one turn may add to /vault/workspace/ (more is
    left there, not saved). There is no network unless the vault's settings allow it.
    Long output keeps its start and end.

    Args:
        command: The shell command line, e.g. "ls -la" or "python3 script.py > out.txt".
        timeout: Seconds before the command and every process it started are killed (default 60).
    """
    ctx = current_context()
    settings = ctx.settings
    limit = float(timeout) if timeout is not None else float(
        settings.exec_timeout if settings else sandbox.DEFAULT_TIMEOUT)
    most = settings.exec_max_timeout if settings else sandbox.MAX_TIMEOUT
    if limit <= 0 or limit > most:
        raise ToolError(f"timeout must be more than 0 and at most {most} seconds, got {limit:g}.")
    if not command.strip():
        raise ToolError("command is empty; give a shell command line, e.g. ls -la.")
    writable = not ctx.readonly
    quota = settings.exec_workspace_quota if settings else None
    if writable:
        ctx.vault.claim(sandbox.WORKSPACE, quota)
    cancel = getattr(ctx.cancel, "event", ctx.cancel)
    spec = sandbox.SandboxSpec(ctx.vault.root, command, timeout=limit,
                               network=bool(settings and settings.exec_network),
                               writable=writable, cancel=cancel,
                               memory=settings.exec_memory if settings else sandbox.MEMORY,
                               tmp_size=settings.exec_tmp_size if settings else sandbox.TMP_SIZE)
    result = sandbox.run(spec)
    return "\n".join([result.render(limit), *_limits_hit(result, spec),
                      *(_left_out(ctx.vault) if writable else [])])


def _left_out(vault: StagedVault) -> list[str]:
    """What this turn's commit will not take of workspace/, for the model to know."""
    out = vault.left_out()
    if not out:
        return []
    return ["note: not saved with this turn (left in workspace/, uncommitted):",
            *(f"- {rel}: {why}" for rel, why in sorted(out.items()))]


def _limits_hit(result: sandbox.ExecResult, spec: sandbox.SandboxSpec) -> list[str]:
    """A line for each limit the command ran into, naming the setting that sets it (the
    person's to raise in agent.toml; the model cannot)."""
    said = result.stdout + result.stderr
    out = []
    if _NO_MEMORY.search(said) or result.oom_kills:
        killed = (f"; {result.oom_kills} of its processes killed for it"
                  if result.oom_kills else "")
        out.append(f"note: the command ran out of memory: [exec] memory is "
                   f"{show_size(spec.memory)}{killed} (agent.toml; the person may raise it)")
    if "File size limit exceeded" in said or result.exit_code == -signal.SIGXFSZ:
        out.append(f"note: a file the command writes may hold at most "
                   f"{show_size(sandbox.FSIZE)} (the sandbox's own limit)")
    if _NO_SPACE in said:
        out.append(f"note: no space left: /tmp and /dev/shm hold at most "
                   f"{show_size(spec.tmp_size)} each ([exec] tmp_size in agent.toml); "
                   f"workspace/ is on the vault's own disk")
    return out
