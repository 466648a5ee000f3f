"""`spawn_agent` and `agent_output`: hand a task to a sub-agent (agent/chat/subagents.py)."""

from __future__ import annotations

import time
from typing import Literal

from agent.chat import subagents
from agent.chat.tools.registry import ToolError, current_context, tool

WAIT_STEP = 0.05


@tool
def spawn_agent(prompt: str, context: Literal["none", "summary", "full"] = "none",
                readonly: bool = False, background: bool = False, timeout: float = 0) -> str:
    """Hand a task to a sub-agent: a helper with the same tools and its own conversation.

    It answers with the sub-agent's final reply. Several spawn_agent calls in one reply
    run at the same time. What the sub-agent does is saved in its own session and commit.

    Args:
        prompt: The task, complete in itself: what to do, what to answer with.
        context: What it knows of this conversation: none (only the prompt), summary (a short summary), full (the whole conversation so far).
        readonly: True to keep it from changing files (its writing tools are removed).
        background: True to return its run id at once; agent_output gives the result later.
        timeout: Seconds to wait for it (0 = until it ends); a sub-agent still running then moves to the background, it is not stopped.
    """
    ctx = current_context()
    settings = ctx.settings
    most = settings.agents_max_depth if settings else 3
    if ctx.depth + 1 > most:
        raise ToolError(f"Sub-agents may nest at most {most} levels deep and this one is at "
                        f"level {ctx.depth}: do the task yourself ([agents] max_depth in agent.toml).")
    if not prompt.strip():
        raise ToolError("prompt is empty: say what the sub-agent should do.")
    if timeout < 0:
        raise ToolError(f"timeout must be 0 (wait until it ends) or more seconds, got {timeout:g}.")
    running = len(subagents.running_here())
    if settings and running >= settings.agents_max_running:
        raise ToolError(f"{running} sub-agents are running already (the most at once is "
                        f"{settings.agents_max_running}, [agents] max_running); wait for some "
                        f"with agent_output.")
    if ctx.provider is None:
        raise ToolError("no model to run a sub-agent with here.")
    prefix: list = []
    if context == "full":
        prefix = subagents.full_prefix(ctx.messages)
    elif context == "summary":
        summary = subagents.summarize(_provider(ctx), ctx.messages, settings)
        if summary:
            prefix = subagents.summary_prefix(summary)
    run = subagents.start(ctx.vault.vault,        # the real vault: the run stages its own writes
                          ctx.provider, settings, prompt=prompt, parent_ctx=ctx, context=context,
                          readonly=readonly or ctx.readonly, background=background,
                          timeout=timeout, prefix=prefix, now=ctx.now)
    ctx.runs.append(run.id)
    if background:
        return (f"Started sub-agent run {run.id} in the background. agent_output(run_id="
                f"{run.id!r}) gives its result when it is done.")
    started = time.monotonic()
    cancel = ctx.cancel
    while not run.done.wait(WAIT_STEP):
        if cancel is not None and cancel.is_set():
            raise subagents.Cancelled()
        if timeout and time.monotonic() - started >= timeout:
            run.background = True
            return (f"Sub-agent run {run.id} is still running after {timeout:g} s; it goes on "
                    f"in the background (not stopped). agent_output(run_id={run.id!r}) gives "
                    f"its result when it is done, or its progress so far.")
    return run.answer()


def _provider(ctx):
    if isinstance(ctx.cancel, subagents.Cancel):
        return subagents.CancellableProvider(ctx.provider, ctx.cancel)
    return ctx.provider


@tool
def agent_output(run_id: str) -> str:
    """The result of a sub-agent run (from spawn_agent), or its progress while it runs.

    Args:
        run_id: The run id spawn_agent answered with.
    """
    ctx = current_context()
    run = subagents.RUNS.get(run_id.strip())
    if run is not None:
        return run.answer()
    vault = ctx.vault.vault
    info = subagents.find_run(vault, run_id.strip())
    if info is None:
        raise ToolError(f"There is no sub-agent run {run_id!r}; `agent agents` lists them.")
    if info.status == "running":
        return f"Run {info.id} is still running (in another process)."
    text = f"Run {info.id} " + {"done": "finished", "failed": "failed",
                               "interrupted": "was interrupted"}[info.status] + "."
    if info.error:
        text += f"\nError: {info.error}"
    return text + "\n\n" + (info.reply or "(no reply)")
