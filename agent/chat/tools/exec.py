"""`exec`: run a shell command in the bubblewrap sandbox (agent/sandbox.py).

The command sees the vault read-only at /vault and may write only /vault/workspace/
(its working folder and HOME). What it writes there is committed with the turn, so
every change a command made can be reviewed with git. Offered only where bwrap works
and `[exec] enabled` is not false; it never runs a command unsandboxed.
"""

from __future__ import annotations

from agent import sandbox
from agent.chat.tools.registry import ToolError, current_context, tool


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
    at /vault, the system read-only, /tmp private and empty. There is no network unless
    the vault's settings allow it. Long output keeps its start and end.

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
    if writable:
        ctx.vault.claim(sandbox.WORKSPACE)
    cancel = getattr(ctx.cancel, "event", ctx.cancel)
    spec = sandbox.SandboxSpec(ctx.vault.root, command, timeout=limit,
                               network=bool(settings and settings.exec_network),
                               writable=writable, cancel=cancel)
    result = sandbox.run(spec)
    return result.render(limit)
