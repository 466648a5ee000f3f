"""The dream: archive entries written since `.dream_cursor` consolidated into facts in
`MEMORY.md` and `USER.md`, in two phases (an analyst, then an editor) submitted as
Message Batches with prompt caching, and committed together with the new cursor.

- `prompts`: what is sent (entries, chunks, the shared cached prefix, the schemas) and
  the checks on what comes back;
- `ops`: the editor's operations applied to the memory files (pure);
- `run`: the state machine of a run (start, then phase by phase), over
  `context` (what the phases share: options, clock, outcome), `submit` (requests out,
  as a batch or plain calls), `collect` (a batch's results into the record) and `apply`
  (the edits committed with the cursor);
- `state`: the typed record of a dream in flight (`.agent/dream.json`), which makes a
  run resumable;
- `cost`: estimated prices.

The model is reached through an `agent.llm.Provider` only.
"""

from agent.dream.run import (DreamError, DreamOutcome, cancel_dream, dream_status, load_state,
                             run_dream)

__all__ = ["DreamError", "DreamOutcome", "cancel_dream", "dream_status", "load_state", "run_dream"]
