"""Schedules: durations, times and time zones, `next_run`, misfire, for cron jobs,
heartbeats and the dream alike.

Pure: nothing here reads the clock, reads a file, runs git or calls a model. Time is
passed in as an aware `datetime`; the caller (a command, a tool, `agent serve`) takes it
at the edge. The file that stores cron jobs is agent/stores/cronfile.py; this module is the
arithmetic they share with heartbeats (agent/stores/heartbeatfile.py) and serve's dream
timing, which is why it is neither a store nor a part of serve.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

from agent.errors import UserError

KINDS = ("at", "every", "cron")
# The name of the machine a job or heartbeat runs on (as the vault's config stores it too).
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# A due time this much older than the moment the scheduler (re)started watching was
# missed while nothing ran: its misfire policy decides. Anything younger just runs.
MISFIRE_GRACE = timedelta(seconds=60)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_SECONDS = 10 * 366 * 86400     # the longest interval: ten years
_DURATION = re.compile(r"(\d+)\s*([smhdw])")
_HHMM = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


class ScheduleError(UserError):
    """A schedule, a time or a duration that cannot be used; the message says why."""


# ---- durations and times --------------------------------------------------------------


def parse_duration(text: str) -> int:
    """Seconds in a duration written as people write it: 90s, 30m, 2h, 1d, 1h30m, 1w."""
    s = str(text).strip().lower().replace(" ", "")
    if not s or _DURATION.sub("", s):
        raise ScheduleError(f"{text!r} is not a duration: write a number and a unit, "
                            f"as in 90s, 30m, 2h, 1d or 1h30m")
    if len(s) > 64:
        raise ScheduleError(f"{str(text)[:40]!r}...: too long to be a duration")
    seconds = sum(int(n) * _UNITS[u] for n, u in _DURATION.findall(s))
    if seconds <= 0:
        raise ScheduleError(f"{text!r}: a duration must be longer than zero")
    if seconds > MAX_SECONDS:
        raise ScheduleError(f"{text!r}: longer than ten years; give a shorter interval")
    return seconds


def _utc(t: datetime) -> datetime:
    """`t` as UTC: comparisons and arithmetic between two times of one ZoneInfo zone go
    by wall clock and ignore `fold` (01:10 EST would compare before 01:30 EDT), so
    every comparison and sum here is made in UTC."""
    return t.astimezone(timezone.utc)


def format_duration(seconds: int) -> str:
    """The shortest way to write `seconds`: 90 -> 1m30s, 7200 -> 2h, 86400 -> 1d."""
    if seconds <= 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def zone(name: str | None) -> tzinfo:
    """The time zone called `name` (IANA, e.g. Europe/Paris), or the local one for None."""
    if not name:
        return local_zone()
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"unknown time zone {name!r}: use an IANA name such as "
                            f"Europe/Paris, America/New_York or UTC") from None


_LOCAL: tzinfo | None = None


def local_zone() -> tzinfo:
    """This machine's time zone with its DST rules (not just today's offset)."""
    global _LOCAL
    if _LOCAL is not None:
        return _LOCAL
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    found: tzinfo | None = None
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        try:
            found = ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            found = None
    if found is None:
        try:
            with open("/etc/localtime", "rb") as f:
                found = ZoneInfo.from_file(f, key="localtime")
        except (OSError, ValueError):
            found = None
    if found is None and not tz:
        found = datetime.now().astimezone().tzinfo
    _LOCAL = found or timezone.utc
    return _LOCAL


def parse_time(text: str, now: datetime, tz: str | None = None) -> datetime:
    """An aware time from ISO 8601 (`2026-11-21T09:00`, `...+01:00`, `...Z`) or `HH:MM`
    (today); a time without an offset is read in `tz` (or local time)."""
    s = str(text).strip()
    where = zone(tz)
    m = _HHMM.match(s)
    if m:
        today = now.astimezone(where)
        naive = datetime(today.year, today.month, today.day, int(m[1]), int(m[2]))
        return resolve_local(naive, where)
    try:
        t = datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ScheduleError(f"{text!r} is not a time: write HH:MM (today) or an ISO 8601 "
                            f"time such as 2026-11-21T09:00 or 2026-11-21T09:00+01:00") from None
    return t if t.tzinfo else resolve_local(t, where)


def resolve_local(naive: datetime, tz: tzinfo) -> datetime:
    """The instant a wall-clock time in `tz` names.

    A time that occurs twice (autumn) is its first occurrence; a time that does not
    exist (skipped in spring) becomes the first valid time after the gap, so a job
    scheduled inside the gap fires once, when the clock jumps.
    """
    first = naive.replace(tzinfo=tz, fold=0)
    if _wall(first, tz) == naive:
        return first
    # In the gap: fold=1 reads the time with the offset after the jump (an instant
    # before the gap), fold=0 with the offset before it (an instant after). The jump
    # lies between; find the first instant whose wall time is past `naive`.
    lo = naive.replace(tzinfo=tz, fold=1).astimezone(timezone.utc)
    hi = first.astimezone(timezone.utc)
    if lo > hi:
        lo, hi = hi, lo
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if _wall(mid, tz) > naive:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0).astimezone(tz)


def _wall(t: datetime, tz: tzinfo) -> datetime:
    return t.astimezone(timezone.utc).astimezone(tz).replace(tzinfo=None)


def iso(t: datetime | None) -> str | None:
    return t.isoformat(timespec="seconds") if t is not None else None


def parse_iso(value, where: str) -> datetime | None:
    """A stored time (ISO 8601 with offset); None stays None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ScheduleError(f"{where} must be an ISO 8601 time or null, got {value!r}")
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ScheduleError(f"{where}: {value!r} is not an ISO 8601 time "
                            f"(such as 2026-11-21T09:00:00+01:00)") from None
    return t if t.tzinfo else t.astimezone()


# ---- schedules ------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    kind: str                        # at | every | cron
    at: datetime | None = None
    every_seconds: int | None = None
    expr: str | None = None
    tz: str | None = None

    def describe(self) -> str:
        """How a person reads it: `0 9 * * * Europe/Paris`, `every 30m`, `at 2026-11-21 09:00`."""
        if self.kind == "every":
            text = f"every {format_duration(self.every_seconds or 0)}"
        elif self.kind == "at":
            assert self.at is not None          # an "at" schedule has its time
            shown = self.at.astimezone(zone(self.tz)) if self.tz else self.at
            text = f"at {shown:%Y-%m-%d %H:%M}"
        else:
            text = str(self.expr)
        return f"{text} {self.tz}" if self.tz and self.kind != "every" else text

    def to_json(self) -> dict:
        return {"kind": self.kind, "at": iso(self.at), "every_seconds": self.every_seconds,
                "expr": self.expr, "tz": self.tz}


def check_cron(expr: str) -> str:
    """A cron expression of five fields (or @daily, @hourly...), or ScheduleError saying why."""
    from croniter import croniter  # imported here: croniter costs start-up time

    e = " ".join(str(expr).split())
    fields = e.split(" ")
    if not e.startswith("@") and len(fields) != 5:
        raise ScheduleError(
            f"cron expression {expr!r} has {len(fields)} field{'s' * (len(fields) != 1)}; "
            f"it needs five: minute hour day-of-month month day-of-week, as in \"0 9 * * *\"")
    try:
        croniter(e, datetime(2000, 1, 1)).get_next(datetime)
    except (ValueError, KeyError, OverflowError) as err:  # croniter's errors subclass ValueError
        raise ScheduleError(f"invalid cron expression {expr!r}: {err}") from None
    return e


def make_schedule(*, at: str | None = None, every: str | None = None, cron: str | None = None,
                  tz: str | None = None, now: datetime) -> Schedule:
    """The schedule the `cron add` options (or a tool's arguments) describe, validated."""
    given = [k for k, v in (("at", at), ("every", every), ("cron", cron)) if v not in (None, "")]
    if len(given) != 1:
        raise ScheduleError("give exactly one of at (a time), every (a duration such as 30m) "
                            "or cron (an expression such as \"0 9 * * *\")"
                            + (f"; got {', '.join(given)}" if given else ""))
    if tz:
        zone(tz)
    if at not in (None, ""):
        when = parse_time(at, now, tz)
        if when <= now:
            raise ScheduleError(f"{at!r} ({when:%Y-%m-%d %H:%M %z}) is in the past; give a "
                                f"later time, or a date too, as in "
                                f"{(now + timedelta(days=1)):%Y-%m-%d}T{when:%H:%M}")
        return Schedule("at", at=when, tz=tz or None)
    if every not in (None, ""):
        return Schedule("every", every_seconds=parse_duration(every), tz=tz or None)
    return Schedule("cron", expr=check_cron(cron or ""), tz=tz or None)   # given (checked above)


def next_run(schedule: Schedule, now: datetime, anchor: datetime | None = None) -> datetime | None:
    """The first time strictly after `now` the schedule fires, or None when it never will.

    `at` fires once at its time. `every` fires at `anchor` + k intervals (anchor: the
    last due time, so the cadence holds; `now` when there is none). `cron` fires at the
    expression's wall-clock times in the schedule's time zone: a time that occurs twice
    in autumn fires once, a time skipped in spring fires once at the end of the gap.
    """
    shown = now.tzinfo
    now = _utc(now)
    if schedule.kind == "at":
        return schedule.at if schedule.at is not None and _utc(schedule.at) > now else None
    if schedule.kind == "every":
        try:
            step = timedelta(seconds=int(schedule.every_seconds or 0))
            if step <= timedelta(0):
                return None
            base = _utc(anchor) if anchor is not None else now
            if base > now:
                return anchor
            k = (now - base) // step + 1
            return (base + k * step).astimezone((anchor or now).tzinfo or shown)
        except OverflowError:
            return None          # an interval beyond the calendar: it never fires
    if schedule.kind == "cron":
        return _cron_next(schedule.expr or "", zone(schedule.tz), now)
    raise ScheduleError(f"unknown schedule kind {schedule.kind!r}")


def _cron_next(expr: str, tz: tzinfo, now: datetime) -> datetime | None:
    from croniter import croniter

    # Iterate over naive wall-clock times (croniter's own DST handling has varied between
    # versions) and map each onto an instant ourselves.
    now = _utc(now)
    start = _wall(now, tz)
    try:
        it = croniter(expr, start)
        for _ in range(2000):
            candidate = resolve_local(it.get_next(datetime), tz)
            if _utc(candidate) > now:
                return candidate
    except (ValueError, KeyError, OverflowError):   # CroniterBadDateError: never fires
        return None
    return None


def first_run(schedule: Schedule, now: datetime) -> datetime | None:
    """When a new job first fires: its time (`at`), one interval from now, or the next
    time its expression names."""
    if schedule.kind == "at":
        return schedule.at
    return next_run(schedule, now)


def settle(schedule: Schedule, due: datetime | None, misfire: str, now: datetime,
           missed: bool) -> tuple[bool, datetime | None]:
    """For a job due at `due`: whether to run it now, and its next due time.

    However many occurrences passed, the answer is one run at most; a job whose time
    was `missed` (nothing was running then) runs once only if its policy is run_once.
    """
    if due is None or _utc(due) > _utc(now):
        return False, due
    following = next_run(schedule, now, anchor=due)
    if missed and misfire == "skip":
        return False, following
    return True, following


def is_missed(due: datetime, watching_since: datetime) -> bool:
    """Whether `due` passed before the scheduler was there to see it."""
    return _utc(due) < _utc(watching_since) - MISFIRE_GRACE
