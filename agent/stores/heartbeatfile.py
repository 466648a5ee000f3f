"""Heartbeats: `heartbeat/<name>.md`, a prompt the agent runs every interval.

Frontmatter: `name`, `every` (`30m`, `2h`) or `cron` (`"0 8 * * *"`), `enabled`,
optional `active_hours` (`08:00-22:00`, may wrap past midnight), `tz`, `deliver`
(`telegram/<chat id>`: where a reply other than HEARTBEAT_OK is sent) and `host` (the
one machine that runs it, for a vault synced between machines: `agent.host` in the
vault's git config; see agent/serve/heartbeats.py); the body is the prompt. A reply of
exactly HEARTBEAT_OK with no other change leaves no trace.

When each heartbeat last ran and is next due lives in `.agent/heartbeat-state.json`:
derived, git-ignored state. Keeping it in the vault would make a commit of every quiet
heartbeat, which is the trace a quiet heartbeat must not leave; losing the file costs at
most one early run of each heartbeat.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from pathlib import Path

from agent import schedule as sched
from agent.errors import UserError
from agent.stores.delivery import DeliveryError, check_target

FOLDER = "heartbeat"
OK = "HEARTBEAT_OK"
STATE_FILE = "heartbeat-state.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$")
_HOURS = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")


class HeartbeatError(UserError):
    """A heartbeat file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Heartbeat:
    name: str
    path: str                                   # vault-relative
    schedule: sched.Schedule                    # kind every or cron
    prompt: str
    enabled: bool = True
    active_hours: tuple[time, time] | None = None
    tz: str | None = None
    deliver: str | None = None                  # where a reply goes: telegram/<chat id>
    host: str | None = None                     # the machine that runs it (None: not yet said)

    def runs_on(self, host: str) -> bool:
        return self.host is None or self.host == host

    @property
    def session(self) -> str:
        return f"heartbeat/{self.name}"

    def signature(self) -> str:
        """Changes when the timing changes, so an edited heartbeat is scheduled afresh."""
        return json.dumps([self.schedule.to_json()], sort_keys=True)

    def describe(self) -> str:
        return self.schedule.describe()

    def hours(self) -> str:
        if not self.active_hours:
            return "always"
        a, b = self.active_hours
        end = "24:00" if b == time(0) and a != time(0) else f"{b:%H:%M}"
        return f"{a:%H:%M}-{end}"

    def message(self) -> str:
        """The text the agent is given: the prompt, with the quiet reply spelled out."""
        body = self.prompt.strip()
        if OK not in body:
            body += (f"\n\nIf nothing needs attention, reply exactly {OK} and change nothing.")
        return body


def parse_hours(text: str, where: str) -> tuple[time, time]:
    m = _HOURS.match(str(text))
    if not m:
        raise HeartbeatError(f"{where}: active_hours {text!r} is not of the form HH:MM-HH:MM "
                             f"(such as 08:00-22:00)")
    h1, m1, h2, m2 = (int(x) for x in m.groups())
    if h1 > 23 or m1 > 59 or h2 > 24 or m2 > 59 or (h2 == 24 and m2):
        raise HeartbeatError(f"{where}: active_hours {text!r} has an impossible time")
    start, end = time(h1, m1), time(0) if h2 == 24 else time(h2, m2)
    if start == end and h2 != 24:
        raise HeartbeatError(f"{where}: active_hours {text!r} is empty; leave it out to run "
                             f"at any hour")
    return start, end


def parse(meta: dict, body: str, rel: str) -> Heartbeat:
    """A heartbeat from its frontmatter and body; HeartbeatError names file and problem."""
    stem = Path(rel).stem
    name = meta.get("name", stem)
    if not isinstance(name, str) or not _NAME.match(name):
        raise HeartbeatError(f"{rel}: name must be letters, digits, . _ - (got {name!r})")
    enabled = meta.get("enabled", True)
    if not isinstance(enabled, bool):
        raise HeartbeatError(f"{rel}: enabled must be true or false (got {enabled!r})")
    tz = meta.get("tz")
    if tz is not None and not isinstance(tz, str):
        raise HeartbeatError(f"{rel}: tz must be a time zone name such as Europe/Paris")
    every, cron = meta.get("every"), meta.get("cron")
    if (every is None) == (cron is None):
        raise HeartbeatError(f"{rel}: give exactly one of every (such as 30m or 2h) or "
                             f"cron (such as \"0 8 * * *\")")
    try:
        if tz:
            sched.zone(tz)
        if every is not None:
            if not isinstance(every, str):
                raise HeartbeatError(f"{rel}: every {every!r} needs a unit: write 30m, 2h or 1d")
            schedule = sched.Schedule("every", every_seconds=sched.parse_duration(every), tz=tz)
        else:
            if not isinstance(cron, str):
                raise HeartbeatError(f"{rel}: cron must be a quoted expression such as \"0 8 * * *\"")
            schedule = sched.Schedule("cron", expr=sched.check_cron(cron), tz=tz)
    except sched.ScheduleError as e:
        raise HeartbeatError(f"{rel}: {e}") from None
    host = meta.get("host")
    if host is not None and (not isinstance(host, str) or not sched.HOST_NAME.match(host)):
        raise HeartbeatError(f"{rel}: host must be a machine name (letters, digits, . _ -), "
                             f"got {host!r}")
    hours = meta.get("active_hours")
    active = parse_hours(hours, rel) if hours not in (None, "") else None
    if not body.strip():
        raise HeartbeatError(f"{rel}: the body (the prompt) is empty")
    deliver = meta.get("deliver")
    if deliver not in (None, ""):
        try:
            deliver = check_target(deliver)
        except DeliveryError as e:
            raise HeartbeatError(f"{rel}: {e}") from None
    else:
        deliver = None
    return Heartbeat(name=name, path=rel, schedule=schedule, prompt=body, enabled=enabled,
                     active_hours=active, tz=tz, deliver=deliver, host=host)


def with_enabled(text: str, enabled: bool, rel: str) -> str:
    """The text of a heartbeat file with `enabled:` set, every other byte as it was."""
    return with_field(text, "enabled", "true" if enabled else "false", rel)


def with_field(text: str, key: str, value: str, rel: str) -> str:
    """The text of a heartbeat file with the frontmatter line `key: value` set (added
    before the closing --- when missing), every other byte as it was."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n") != "---":
        raise HeartbeatError(f"{rel}: no frontmatter (a first line ---)")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip("\r\n") == "---"), None)
    if end is None:
        raise HeartbeatError(f"{rel}: the frontmatter has no closing ---")
    for i in range(1, end):
        if re.match(rf"^{re.escape(key)}\s*:", lines[i]):
            newline = lines[i][len(lines[i].rstrip("\r\n")):] or "\n"
            lines[i] = f"{key}: {value}{newline}"
            return "".join(lines)
    lines.insert(end, f"{key}: {value}\n")
    return "".join(lines)


def new_file(name: str, prompt: str, *, every: str | None = None, cron: str | None = None,
             active_hours: str | None = None, tz: str | None = None,
             enabled: bool = True, deliver: str | None = None,
             host: str | None = None) -> str:
    """The text of a new heartbeat file (checked by `parse`, so a bad one is refused)."""
    from agent.stores.frontmatter_io import dump

    meta: dict = {"name": name}
    if every is not None:
        meta["every"] = every
    if cron is not None:
        meta["cron"] = cron
    meta["enabled"] = enabled
    if active_hours:
        meta["active_hours"] = active_hours
    if tz:
        meta["tz"] = tz
    if deliver:
        meta["deliver"] = deliver
    if host:
        meta["host"] = host
    text = dump(meta, prompt)
    parse(meta, prompt, f"{FOLDER}/{name}.md")
    return text


def load_all(root: Path) -> tuple[list[Heartbeat], list[str]]:
    """Every heartbeat of the vault, by name, and the problems of those that cannot be read
    (each `file: problem`); a broken file never stops the others."""
    from agent.stores.frontmatter_io import FrontmatterError, load

    folder = Path(root) / FOLDER
    beats: list[Heartbeat] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    for path in sorted(folder.glob("*.md")) if folder.is_dir() else []:
        rel = f"{FOLDER}/{path.name}"
        try:
            meta, body = load(path, rel, root=root)
            hb = parse(meta, body, rel)
        except (FrontmatterError, HeartbeatError) as e:
            problems.append(str(e))
            continue
        if hb.name in seen:
            problems.append(f"{rel}: name {hb.name!r} is already used by {seen[hb.name]}; "
                            f"give it another name")
            continue
        seen[hb.name] = rel
        beats.append(hb)
    return beats, problems


def fingerprint(root: Path) -> tuple:
    """What changes when a heartbeat file is added, removed or edited (cheap: stats only)."""
    folder = Path(root) / FOLDER
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except FileNotFoundError:
        return ()
    out = []
    for e in entries:
        if e.name.endswith(".md"):
            with contextlib.suppress(FileNotFoundError):
                st = e.stat()
                out.append((e.name, st.st_mtime_ns, st.st_size))
    return tuple(out)


# ---- when a heartbeat is due (pure) ------------------------------------------------------


def in_active_hours(hb: Heartbeat, now: datetime) -> bool:
    if not hb.active_hours:
        return True
    start, end = hb.active_hours
    t = now.astimezone(sched.zone(hb.tz)).time().replace(tzinfo=None)
    if start < end:
        return start <= t < end
    return t >= start or t < end       # wraps past midnight (or ends at 24:00)


def first_due(hb: Heartbeat, now: datetime) -> datetime | None:
    """When a heartbeat seen for the first time is due: now for `every` (it has never
    run), the next time its expression names for `cron`."""
    if hb.schedule.kind == "every":
        return now
    return sched.next_run(hb.schedule, now)


def after_run(hb: Heartbeat, ran_at: datetime) -> datetime | None:
    """The next due time of a heartbeat that ran at `ran_at` (missed times are not
    made up: one run covers them)."""
    return sched.next_run(hb.schedule, ran_at)


def is_due(hb: Heartbeat, due: datetime | None, now: datetime) -> bool:
    return hb.enabled and due is not None and due <= now and in_active_hours(hb, now)


# ---- the state file (derived, in .agent/) -------------------------------------------------


def read_state(state_dir: Path) -> dict:
    """The state file's entries by heartbeat name (written with vault.atomic.write_json);
    a lost or torn file only means heartbeats start afresh."""
    try:
        data = json.loads((Path(state_dir) / STATE_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def entry(state: dict, hb: Heartbeat, now: datetime) -> dict:
    """The state entry of `hb`, started afresh when it is new or its timing changed."""
    e = state.get(hb.name)
    if not isinstance(e, dict) or e.get("sig") != hb.signature():
        e = {"sig": hb.signature(), "next_run": sched.iso(first_due(hb, now)),
             "last_run": (e or {}).get("last_run") if isinstance(e, dict) else None,
             "last_status": (e or {}).get("last_status") if isinstance(e, dict) else None,
             "last_error": None}
        state[hb.name] = e
    return e


def due_time(e: dict) -> datetime | None:
    try:
        return sched.parse_iso(e.get("next_run"), "next_run")
    except sched.ScheduleError:
        return None


def next_active(hb: Heartbeat, now: datetime) -> datetime:
    """The next moment inside the active hours (now when inside them)."""
    if in_active_hours(hb, now):
        return now
    assert hb.active_hours is not None      # none: always inside them (above)
    start = hb.active_hours[0]
    tz = sched.zone(hb.tz)
    local = now.astimezone(tz)
    day = local.date()
    for add in (0, 1):
        d = day + timedelta(days=add)
        t = sched.resolve_local(datetime(d.year, d.month, d.day, start.hour, start.minute), tz)
        if t > now:
            return t
    return now + timedelta(days=1)
