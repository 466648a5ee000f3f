"""Where a scheduled job's reply goes (`deliver = "telegram/<chat id>"`) and the record
of a delivery still to make: plain data, pure functions (time is passed in).

A delivery record (in a cron job's `state.delivery`, or a heartbeat's entry in
`.agent/heartbeat-state.json`) is

    {"target": "telegram/123", "status": "pending" | "retrying" | "failed",
     "attempts": 0, "next_try": "<iso>", "error": null, "text": "...", "run": "<iso>"}

A delivery that succeeds leaves no record (the message is in the chat's transcript); one
that fails is tried again after 1 min, 5 min, 30 min and 2 h, then given up as `failed`,
and stays shown by `agent cron list` / `agent heartbeat list` until the next run.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from agent.errors import UserError
from agent.schedule import ScheduleError, iso, parse_iso

CHANNELS = ("telegram",)
_TARGET = re.compile(r"^telegram/-?[0-9]{1,20}$")
BACKOFF = (60, 300, 1800, 7200)          # seconds before the 2nd, 3rd, 4th and 5th tries
MAX_TRIES = len(BACKOFF) + 1
WAITING = ("pending", "retrying")


class DeliveryError(UserError):
    """A `deliver` target that is not one; the message says what one looks like."""


def check_target(target) -> str:
    """`telegram/<chat id>` (the chat id a whole number, negative for a group)."""
    text = str(target).strip() if isinstance(target, str) else target
    if not isinstance(text, str) or not _TARGET.match(text):
        raise DeliveryError(
            f"deliver {target!r} is not a place to deliver to: write telegram/<chat id>, "
            f"such as telegram/123456789 (a group's id starts with -; the bot's refusal "
            f"line and .agent/telegram-refused.log show ids)")
    return text


def split_target(target: str) -> tuple[str, int]:
    channel, chat = check_target(target).split("/", 1)
    return channel, int(chat)


def pending(target: str, now: datetime, text: str | None = None) -> dict:
    """A fresh record: to be tried now."""
    return {"target": target, "status": "pending", "attempts": 0, "next_try": iso(now),
            "error": None, "text": text, "run": iso(now)}


def failed_attempt(record: dict, now: datetime, error: str, *, final: bool = False) -> dict:
    """The record after a try that failed: retried with backoff, or given up."""
    out = dict(record)
    out["attempts"] = int(record.get("attempts") or 0) + 1
    out["error"] = " ".join(str(error).split())[:300]
    if final or out["attempts"] >= MAX_TRIES:
        out["status"] = "failed"
        out["next_try"] = None
    else:
        out["status"] = "retrying"
        out["next_try"] = iso(now + timedelta(seconds=BACKOFF[out["attempts"] - 1]))
    return out


def due(record, now: datetime) -> bool:
    if not isinstance(record, dict) or record.get("status") not in WAITING:
        return False
    t = next_try(record)
    return t is None or t <= now


def next_try(record) -> datetime | None:
    try:
        return parse_iso(record.get("next_try"), "next_try")
    except (ScheduleError, AttributeError):
        return None


def describe(record, local) -> str | None:
    """One line for `agent cron list`: a delivery waiting or given up, else None."""
    if not isinstance(record, dict) or record.get("status") not in (*WAITING, "failed"):
        return None
    target = record.get("target", "?")
    n = int(record.get("attempts") or 0)
    tries = f"{n} attempt{'s' * (n != 1)}"
    why = f": {record['error']}" if record.get("error") else ""
    if record["status"] == "failed":
        return f"delivery to {target} FAILED after {tries}{why}; it is given up"
    if n == 0:
        return f"delivery to {target} pending"
    return f"delivery to {target} failing ({tries}{why}); next try {local(next_try(record))}"
