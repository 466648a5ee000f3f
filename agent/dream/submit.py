"""A dream phase's requests sent: as one batch where the model's provider has a batch
API (the record saved at once, so a kill picks the same batch up), else as plain calls,
a few at a time, each reply saved as it arrives."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import agent.dream.state as runstate
from agent import redact
from agent.dream import prompts
from agent.dream.collect import take_results
from agent.dream.context import DreamOutcome, RunContext
from agent.dream.state import RunState, Step
from agent.llm import BatchRequest, BatchResult, NotFound, ProviderError

REPLIES_OF = prompts.REPLIES


def submit(run: RunContext, state: RunState, phase: str,
           requests: list[BatchRequest]) -> RunState | DreamOutcome:
    """Send a phase's requests: a batch (state saved at once) where the model's
    provider has a batch API, else plain calls."""
    if redact.enabled(run.vault.root):
        # What the agent wrote passed the filter then; what a person typed into
        # MEMORY.md or a sync brought (a transcript, an entry) did not: it does here.
        requests = [dataclasses.replace(r, request=redact.scrub_value(r.request, run.scrubbed))
                    for r in requests]
    ids = [r.custom_id for r in requests]
    if state.mode == "batch" and not run.sync:
        batch = None
        try:
            batches = run.provider.batching(state.model)
            if batches is None:
                from agent.llm.spec import split
                run.say(f"The provider {split(state.model)[0]} has no Batches API. "
                        f"Sending the requests as plain calls, "
                        f"{run.settings.dream_concurrency} at a time.")
            else:
                batch = batches.batch_create(requests)
        except NotFound:
            run.say("This endpoint has no Message Batches; using plain Messages "
                    "calls (full price).")
        except ProviderError as e:
            return run.not_sent(state, phase, e.problem())
        if batch is not None:
            state.set_step(phase, Step(ids, batch.id, run.clock().isoformat()))
            state.phase = phase
            runstate.save(run.vault, state)
            run.say(f"Submitted the {phase} batch {batch.id} ({len(requests)} "
                    f"request{'s' * (len(requests) != 1)}).")
            return state
    state.mode = "sync"
    state.set_step(phase, Step(ids, params={r.custom_id: runstate.request_json(r)
                                           for r in requests}))
    state.phase = phase
    runstate.save(run.vault, state)      # a kill from here on resumes with what is left
    return send_sync(run, state, phase)


def send_sync(run: RunContext, state: RunState, phase: str) -> RunState | DreamOutcome:
    """The phase's requests not answered yet, as plain calls ([dream] concurrency at
    once), each reply saved as it comes; then the phase's results are taken."""
    step = state.sent(phase)
    todo = [cid for cid in step.requests if cid not in step.done]
    if todo:
        run.say(f"Sending the {phase} request{'s' * (len(todo) != 1)} ({len(todo)}"
                f"{f' of {len(step.requests)}' if len(todo) != len(step.requests) else ''})"
                f" as plain calls.")
    unsent = call_sync(run, state, step, todo, REPLIES_OF[phase])
    if unsent and not step.done:
        # Nothing came back: the record is what it was before this phase was sent.
        if phase == "analyst":
            runstate.clear(run.vault)
        else:
            state.phase, state.editor = "analyst_done", None
            runstate.save(run.vault, state)
    if unsent:
        return run.not_sent(state, phase, "; ".join(f"{cid}: {problem}"
                                                    for cid, problem in unsent.items()))
    results = {cid: BatchResult("succeeded", message=runstate.reply_of(m))
               for cid, m in step.done.items()}
    failure = take_results(run, state, phase, results)
    if failure:
        return run.fail(state, failure)
    return state


def call_sync(run: RunContext, state: RunState, step: Step, todo: list[str],
              parse: Any) -> dict[str, str]:
    """Send `todo` (custom ids of the step), a few at a time; each reply is saved in
    the state as it arrives. Returns custom_id -> why the API refused it (a refused
    call did nothing, so it is sent again by the next run)."""
    lock = threading.Lock()

    def one(cid: str) -> tuple[str, str | None]:
        model, request = runstate.request_of(step.params[cid])
        try:
            msg = run.provider.create(model, request, parse=parse)
        except ProviderError as e:
            return cid, e.problem()
        with lock:
            step.done[cid] = runstate.reply_json(msg)
            runstate.save(run.vault, state)
        return cid, None

    workers = max(1, min(run.settings.dream_concurrency, len(todo)))
    if workers == 1:
        answers = [one(cid) for cid in todo]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            answers = list(pool.map(one, todo))
    return {cid: problem for cid, problem in answers if problem is not None}
