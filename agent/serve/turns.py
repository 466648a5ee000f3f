"""What every kind of serve work shares: a turn run without ever failing the loop and its
outcome (agent.ops.runs), the log, and how times and errors are shown in it."""

from __future__ import annotations

import logging
from datetime import datetime

from agent.ops.runs import Outcome
from agent.stores.heartbeatfile import OK

log = logging.getLogger("agent.serve")


def local(t: datetime | None) -> str:
    return t.astimezone().strftime("%Y-%m-%d %H:%M") if t else "-"


def log_outcome(what: str, outcome: Outcome) -> None:
    if outcome.status == "quiet":
        log.info("%s: %s, nothing to do (no trace left)", what, OK)
    elif outcome.status == "ok":
        log.info("%s: ok (%s)", what, (outcome.sha or "no change")[:7])
    else:
        log.error("%s: %s: %s", what, outcome.status, outcome.error)
