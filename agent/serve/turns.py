"""What every kind of serve work shares: a turn run without ever failing the loop, its
outcome, the log, and how times and errors are shown in it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from agent.errors import UserError
from agent.llm import Provider, ProviderError
from agent.stores.heartbeat import OK
from agent.vault.repo import Vault

log = logging.getLogger("agent.serve")


@dataclass
class Outcome:
    status: str                 # ok | quiet | error | interrupted | skipped
    sha: str | None = None
    error: str | None = None
    reply: str = ""


def run_turn(vault: Vault, provider: Provider, session: str, text: str, now: datetime,
             **options):
    """run_turn (agent.chat.turn, with its keyword `options`), with failures as (None,
    message): a failed run is recorded, never fatal."""
    from agent.chat.turn import run_turn

    try:
        return run_turn(vault, provider, session, text, now, **options), None
    except UserError as e:
        return None, str(e) or type(e).__name__
    except ProviderError as e:           # the loop records API errors itself; this is a
        return None, f"{type(e).__name__}: {e}"   # failure outside its model calls
    except KeyboardInterrupt:
        return None, "interrupted"


def short(text: str | None, n: int = 72) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 3] + "..."


def local(t: datetime | None) -> str:
    return t.astimezone().strftime("%Y-%m-%d %H:%M") if t else "-"


def log_outcome(what: str, outcome: Outcome) -> None:
    if outcome.status == "quiet":
        log.info("%s: %s, nothing to do (no trace left)", what, OK)
    elif outcome.status == "ok":
        log.info("%s: ok (%s)", what, (outcome.sha or "no change")[:7])
    else:
        log.error("%s: %s: %s", what, outcome.status, outcome.error)
