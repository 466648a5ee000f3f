"""A dream phase's results collected: its batch polled until it ended (or checked once,
when the run does not wait), and the replies parsed into the record of the run."""

from __future__ import annotations

import time
from datetime import datetime

import agent.dream.state as runstate
from agent.dream import learning, prompts
from agent.dream.context import DreamOutcome, RunContext
from agent.dream.state import DreamError, RunState
from agent.llm import Batching, BatchResult, NotFound, ProviderError, add_usage, zero_usage


def collect(run: RunContext, state: RunState,
            phase: str) -> dict[str, BatchResult] | None | DreamOutcome:
    """The results of the phase's batch once it ended (polling while `wait`), else None."""
    step = state.sent(phase)
    batch_id = step.batch
    if batch_id is None:
        return run.fail(state, f"the {phase} requests were not sent as a batch")
    submitted = datetime.fromisoformat(step.submitted) if step.submitted else run.now
    while True:
        try:
            batches = batching(run, state)
            batch = batches.batch_retrieve(batch_id)
        except NotFound:
            return run.fail(state, f"the {phase} batch {batch_id} is not known to the API "
                                   f"(deleted, or made with another key)")
        except ProviderError as e:
            return unreachable(run, state, phase, e.problem())
        elapsed = str(run.clock() - submitted).split(".")[0]
        run.say(f"{phase} batch {batch_id}: {batch.describe().replace(':', ';', 1)} "
                f"[{elapsed} elapsed]")
        if batch.ended:
            break
        if not run.wait:
            return None
        time.sleep(run.poll_interval)
        run.waited += run.poll_interval
    try:
        return batches.batch_results(batch_id)
    except ProviderError as e:
        return unreachable(run, state, phase, e.problem())


def batching(run: RunContext, state: RunState) -> Batching:
    """The batch API the run's batch went to (NotFound when the model's provider
    has none now)."""
    batches = run.provider.batching(state.model)
    if batches is None:
        raise NotFound(f"No batch API for {state.model}")
    return batches


def unreachable(run: RunContext, state: RunState, phase: str, problem: str) -> DreamOutcome:
    """The batch could not be checked this time; it stays saved for the next run."""
    batch_id = state.sent(phase).batch
    if not run.wait:
        return run.outcome("waiting", f"Could not check the {phase} batch {batch_id} "
                           f"({problem}); it is saved and will be checked again.", state)
    raise DreamError(f"Could not check the {phase} batch {batch_id} ({problem}). It is "
                     f"saved: run `agent dream` again to pick it up.")


def take_results(run: RunContext, state: RunState, phase: str,
                 results: dict[str, BatchResult]) -> str | None:
    """Record a phase's parsed results in the state (saved), or say what went wrong."""
    reply_model = prompts.REPLIES[phase]
    usage = zero_usage()
    parsed, problems = [], []
    step = state.sent(phase)
    for cid in step.requests:
        result = results.get(cid)
        if result is None or result.type != "succeeded" or result.message is None:
            kind = result.type if result is not None else "missing"
            detail = {"missing": "no result came back", "expired": "expired before it ran "
                      "(a batch has 24 hours)", "canceled": "was canceled"}.get(kind)
            if detail is None:
                detail = f"errored: {result.error if result is not None else ''}"
            problems.append(f"{cid} {detail}")
            continue
        message = result.message
        add_usage(usage, message.usage)
        try:
            parsed.append(prompts.parse_reply(message, reply_model))
        except prompts.ReplyError as e:
            problems.append(f"{cid}: {e}")
    state.usage[phase] = usage
    if problems:
        return "; ".join(problems)
    step.params, step.done = {}, {}      # taken: the file need not carry them on
    if phase == "analyst":
        state.findings = prompts.clean_findings([f for obj in parsed for f in obj["findings"]])
        if state.asks is not None:
            # Explicit-only learning: what the asks do not state never reaches the editor.
            state.findings, _ = learning.keep_findings(state.findings, state.asks)
        state.phase = "analyst_done"
    else:
        state.ops = parsed[0]["ops"]
        state.phase = "editor_done"
    runstate.save(run.vault, state)
    return None
