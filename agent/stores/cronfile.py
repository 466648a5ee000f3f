"""`cron.json`: the cron jobs of a vault, parsed into records and written back.

Pure apart from `read`: nothing here reads the clock, runs git or calls a model; the
schedule arithmetic is agent/schedule.py.

`cron.json` is `{"version": 1, "jobs": [...]}`; a job is

    {"id": "3f9a1c2e", "name": "daily", "enabled": true,
     "schedule": {"kind": "cron", "at": null, "every_seconds": null,
                  "expr": "0 9 * * *", "tz": "Europe/Paris"},
     "message": "...", "session": "cron/3f9a1c2e", "host": "laptop",
     "deliver": "telegram/123" (optional), "delete_after_run": false,
     "misfire": "run_once",
     "state": {"next_run": "...", "last_run": null, "last_status": null, "last_error": null}}

`created_by` says who made the job: "person" (`agent cron add`) or "model" (the
`cron_add` tool). A job the model made, and one with a `deliver` target, also says
`"approved": true|false`: one the model made is held (`false`) until the person runs
`agent cron approve ID`, and never runs meanwhile, unless the person asked for that
schedule in the turn that made it (and it delivers nowhere). A model's job without the
field (an older version's) is held too. A job with neither field (written by hand, or
by an older version) is the person's. Whatever this file says, `agent serve` sends only to chats
the person allowed (agent/serve/delivery.py).

`host` names the one machine that runs the job (the vault's `agent.host`, see
agent/vault/repo.py): a vault synced between machines never runs a job twice. A job
without one is given this machine's name the first time `agent serve` or `agent sync`
sees it.

It is written with `json.dumps(indent=2)` and its keys in this order, so a rewrite changes
only the lines whose values changed; keys a person added to a job are kept.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from agent.errors import UserError
from agent.schedule import (HOST_NAME, MAX_SECONDS, Schedule, ScheduleError, check_cron,
                            first_run, iso,
                            make_schedule, zone)
from agent.schedule import parse_iso as _parse_iso
from agent.stores.delivery import DeliveryError, check_target
from agent.stores.sessions import SessionError, check_key
from agent.fs import boundedjson

CRON_FILE = "cron.json"
VERSION = 1
MISFIRE = ("run_once", "skip")

_JOB_KEYS = ("id", "name", "enabled", "schedule", "message", "session", "host", "deliver",
             "created_by", "approved", "delete_after_run", "misfire", "state")
CREATORS = ("person", "model")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$")


class CronFileError(UserError):
    """cron.json cannot be read; the message names the file, the place and the fix."""


def parse_iso(value, where: str) -> datetime | None:
    """A time stored in cron.json (ISO 8601 with offset); None stays None."""
    try:
        return _parse_iso(value, where)
    except ScheduleError as e:
        raise CronFileError(str(e)) from None


@dataclass
class State:
    next_run: datetime | None = None
    last_run: datetime | None = None
    last_status: str | None = None
    last_error: str | None = None
    delivery: dict | None = None     # a reply still to deliver (agent.stores.delivery)

    def to_json(self) -> dict:
        out = {"next_run": iso(self.next_run), "last_run": iso(self.last_run),
               "last_status": self.last_status, "last_error": self.last_error}
        if self.delivery is not None:
            out["delivery"] = self.delivery
        return out


@dataclass
class Job:
    id: str
    name: str
    schedule: Schedule
    message: str
    session: str
    enabled: bool = True
    delete_after_run: bool = False
    misfire: str = "run_once"
    state: State = field(default_factory=State)
    extra: dict = field(default_factory=dict)   # keys a person added; kept as they are
    host: str | None = None                     # the machine that runs it (None: not yet said)
    deliver: str | None = None                  # where its reply is sent: telegram/<chat>
    created_by: str | None = None               # person | model (None: the person, by hand)
    approved: bool | None = None                # False: held until `agent cron approve`

    @property
    def held(self) -> bool:
        """Whether the job waits for the person's approval (and does not run)."""
        if self.approved is not None:
            return not self.approved
        return self.created_by == "model"

    def to_json(self) -> dict:
        out = {"id": self.id, "name": self.name, "enabled": self.enabled,
               "schedule": self.schedule.to_json(), "message": self.message,
               "session": self.session}
        if self.host is not None:
            out["host"] = self.host
        if self.deliver is not None:            # written only when set: older files keep
            out["deliver"] = self.deliver       # their bytes
        if self.created_by is not None:
            out["created_by"] = self.created_by
        if self.approved is not None:
            out["approved"] = self.approved
        out.update({"delete_after_run": self.delete_after_run, "misfire": self.misfire,
                    "state": self.state.to_json()})
        out.update(self.extra)
        return out

    def runs_on(self, host: str) -> bool:
        """Whether the machine named `host` runs this job (a job without a host is
        about to be given this machine's name)."""
        return self.host is None or self.host == host

    def label(self) -> str:
        return f'"{self.name}"'


@dataclass
class Broken:
    """A job of cron.json that cannot be used: reported and skipped, kept as it is."""
    index: int              # its place in the file's job list (0-based)
    raw: object             # the JSON as the person wrote it, written back unchanged
    problem: str            # `cron.json: job 2 (name): why`


@dataclass
class CronFile:
    jobs: list[Job] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    broken: list[Broken] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [b.problem for b in self.broken]

    def find(self, ref: str) -> Job:
        """The job with id `ref` (or, when unambiguous, the name `ref`)."""
        for job in self.jobs:
            if job.id == ref:
                return job
        named = [j for j in self.jobs if j.name == ref]
        if len(named) == 1:
            return named[0]
        if named:
            raise ScheduleError(f"{len(named)} jobs are named {ref!r} "
                                f"({', '.join(j.id for j in named)}); give the id")
        known = ", ".join(f"{j.id} ({j.name})" for j in self.jobs[:10]) or "none"
        raise ScheduleError(f"no cron job {ref!r} in {CRON_FILE}; jobs: {known}")

    def get(self, job_id: str) -> Job | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    def remove(self, job_id: str) -> None:
        self.jobs = [j for j in self.jobs if j.id != job_id]

    def new_id(self) -> str:
        import secrets      # here: `agent status` and `agent note` load this module

        taken = {j.id for j in self.jobs}
        while True:
            candidate = secrets.token_hex(4)
            if candidate not in taken:
                return candidate


def new_job(cron: CronFile, name: str, message: str, schedule: Schedule, now: datetime, *,
            session: str | None = None, misfire: str = "run_once",
            delete_after_run: bool | None = None, job_id: str | None = None,
            deliver: str | None = None, host: str | None = None,
            created_by: str = "person", asked: bool = False) -> Job:
    """A validated job with its first due time; not yet in `cron`. One the model made
    (`created_by="model"`) is held for the person's approval, unless the person asked
    for its schedule in that turn (`asked`) and it delivers nowhere."""
    name = str(name).strip()
    if not name:
        raise ScheduleError("a cron job needs a name")
    if not str(message).strip():
        raise ScheduleError(f'cron job "{name}" needs a message: what the agent is asked '
                            f"when it runs")
    if misfire not in MISFIRE:
        raise ScheduleError(f"misfire must be run_once or skip, not {misfire!r}")
    same = next((j for j in cron.jobs if j.name == name), None)
    if same is not None:
        raise ScheduleError(f'a cron job is already named "{name}" ({same.id}); choose another '
                            f"name, or remove that one first")
    if job_id is None or cron.get(job_id) is not None:
        job_id = cron.new_id()
    key = session or f"cron/{job_id}"
    try:
        check_key(key)
    except SessionError as e:
        raise ScheduleError(str(e)) from None
    if deliver is not None:
        try:
            deliver = check_target(deliver)
        except DeliveryError as e:
            raise ScheduleError(str(e)) from None
    if delete_after_run is None:
        delete_after_run = schedule.kind == "at"   # a one-off is done once it ran
    return Job(id=job_id, name=name, schedule=schedule, message=str(message), session=key,
               delete_after_run=bool(delete_after_run), misfire=misfire,
               state=State(next_run=first_run(schedule, now)), deliver=deliver,
               host=host,
               # said when it matters (a job that sends, or the model's): a plain job of the
               # person's keeps the format it always had
               created_by=created_by if deliver is not None or created_by != "person" else None,
               approved=(None if deliver is None else True) if created_by == "person" else
               (asked and deliver is None))


def add(cron: CronFile, name: str, message: str, now: datetime, *, at=None, every=None,
        expr=None, tz=None, **options) -> Job:
    """A job made from a person's or the model's words (`at`, `every` or a cron `expr`,
    validated as `new_job` validates the rest) and added to `cron`: the one way a job
    comes to be, for `agent cron add`, the MCP server and the model's cron_add tool."""
    schedule = make_schedule(at=at, every=every, cron=expr, tz=tz, now=now)
    job = new_job(cron, name, message, schedule, now, **options)
    cron.jobs.append(job)
    return job


def claim(cron: CronFile, host: str) -> list[Job]:
    """Give `host` every job that names no machine; the jobs it was given."""
    claimed = [j for j in cron.jobs if j.host is None]
    for job in claimed:
        job.host = host
    return claimed


def loads(text: str, rel: str = CRON_FILE) -> CronFile:
    """Parse and validate cron.json; CronFileError names the file, line and column."""
    if not text.strip():
        return CronFile()
    try:
        data = boundedjson.loads(text, parse_constant=_no_constant)
    except boundedjson.TooDeep:
        raise CronFileError(f"{rel}: nested too deeply to be a cron file. It was left as "
                            f"it is.") from None
    except json.JSONDecodeError as e:
        raise CronFileError(f"{rel}:{e.lineno}:{e.colno}: not valid JSON ({e.msg}); "
                            f"fix the file by hand (`agent git diff {rel}` shows uncommitted "
                            f"edits). It was left as it is.") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs", []), list):
        raise CronFileError(f'{rel}: expected {{"version": 1, "jobs": [...]}}')
    version = data.get("version", VERSION)
    if version != VERSION:
        raise CronFileError(f"{rel}: version {version!r} is not one this agent reads "
                            f"(it reads version {VERSION})")
    out = CronFile(extra={k: v for k, v in data.items() if k not in ("version", "jobs")})
    seen: set[str] = set()
    for n, raw in enumerate(data.get("jobs", []), 1):
        # One bad job is reported and skipped (kept in the file as it is); the rest run.
        try:
            job = _job(raw, f"{rel}: job {n}")
            if job.id in seen:
                raise CronFileError(f"{rel}: job {n}: id {job.id!r} is used twice; "
                                    f"give each job its own id")
        except CronFileError as e:
            out.broken.append(Broken(n - 1, raw, str(e)))
            continue
        seen.add(job.id)
        out.jobs.append(job)
    return out


def _no_constant(name: str):
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def _job(raw, where: str) -> Job:
    """One job of cron.json checked by its pydantic model (`_models`), as a `Job`;
    CronFileError names the file, the job and the field."""
    from pydantic import ValidationError

    if not isinstance(raw, dict):
        raise CronFileError(f"{where}: a job must be a JSON object")
    name = raw.get("name", raw.get("id"))
    where = f"{where} ({name})" if isinstance(name, str) else where
    job_record, _, _ = _models()
    try:
        rec = job_record.model_validate(raw)
    except ValidationError as e:
        raise CronFileError(f"{where}: {_problem(e.errors()[0])}") from None
    sched, st = rec.schedule, rec.state
    try:
        if sched.kind == "at":
            if sched.at is None:
                raise CronFileError(f"{where}: schedule.at is missing")
            schedule = Schedule("at", at=sched.at, tz=sched.tz)
        elif sched.kind == "every":
            if sched.every_seconds is None:
                raise CronFileError(f"{where}: schedule.every_seconds is missing")
            schedule = Schedule("every", every_seconds=sched.every_seconds, tz=sched.tz)
        else:
            if sched.expr is None:
                raise CronFileError(f"{where}: schedule.expr is missing")
            schedule = Schedule("cron", expr=sched.expr, tz=sched.tz)
    except ScheduleError as e:
        raise CronFileError(f"{where}: {e}") from None
    state = State(next_run=st.next_run, last_run=st.last_run, last_status=st.last_status,
                  last_error=None if st.last_error is None else str(st.last_error),
                  delivery=st.delivery)
    extra = {k: v for k, v in raw.items() if k not in _JOB_KEYS}
    return Job(id=rec.id, name=rec.name or rec.id, schedule=schedule, message=rec.message,
               session=rec.session or f"cron/{rec.id}", enabled=rec.enabled,
               delete_after_run=rec.delete_after_run, misfire=rec.misfire, state=state,
               extra=extra, deliver=rec.deliver, host=rec.host, created_by=rec.created_by,
               approved=rec.approved)


def _problem(err) -> str:
    """A pydantic error of a job in one line: a check of ours says its own words."""
    from agent.schemas import field_problem, place

    if err["type"] == "value_error":
        return str(err["ctx"]["error"])
    if err["type"] == "missing":
        return f"{place(err['loc'])} is missing"
    if err["type"] == "literal_error":       # `misfire must be run_once or skip, not 'later'`
        expected = err["ctx"]["expected"].replace("'", "")
        return f"{place(err['loc'])} must be {expected}, not {err['input']!r}"
    return field_problem(err)


def _said(check, what: str = "", *, before: bool = False):
    """A check of ours (raising ScheduleError, SessionError or DeliveryError) as a pydantic
    validator of a value that may be null, run on what the file holds when `before`
    (it makes the value: a time from its text); `what` names the field in its message."""
    from pydantic import AfterValidator, BeforeValidator

    def run(value):
        if value is None:
            return None
        try:
            return check(value)
        except (ScheduleError, SessionError, DeliveryError) as e:
            raise ValueError(f"{what}: {e}" if what else str(e)) from None
    return BeforeValidator(run) if before else AfterValidator(run)


def _one_id(value: str) -> str:
    if not _ID.match(value):
        raise ScheduleError(f"id must be a short name of letters, digits, . _ - (such as "
                            f"3f9a1c2e), got {value!r}")
    return value


def _host(value: str) -> str:
    if not HOST_NAME.match(value):
        raise ScheduleError(f"host must be a machine name (letters, digits, . _ -), "
                            f"got {value!r}")
    return value


def _seconds(value: int) -> int:
    if value <= 0 or value > MAX_SECONDS:
        raise ScheduleError(f"schedule.every_seconds must be a whole number of seconds above "
                            f"zero and at most ten years, got {value!r}")
    return value


def _tz(value: str) -> str:
    if value:
        zone(value)
    return value


def _when(field: str):
    """The validator of a stored time: ISO 8601 text made a datetime."""
    return _said(lambda v: _parse_iso(v, field), before=True)


@functools.cache
def _models():
    """The pydantic models of a job, its schedule and its state (made at the first read
    of a cron.json: `agent status` and `agent note` load this module, not pydantic).
    Strict, as JSON is: "true" is no boolean; null means "not given"."""
    from typing import Annotated, Any, Literal

    from pydantic import BaseModel, ConfigDict, model_validator

    class Record(BaseModel):
        model_config = ConfigDict(strict=True, extra="ignore")

        @model_validator(mode="before")
        @classmethod
        def _nulls(cls, data: Any) -> Any:
            return {k: v for k, v in data.items() if v is not None} \
                if isinstance(data, dict) else data

    class ScheduleRecord(Record):
        kind: Literal["at", "every", "cron"]
        at: Annotated[datetime | None, _when("schedule.at")] = None
        every_seconds: Annotated[int | None, _said(_seconds)] = None
        expr: Annotated[str | None, _said(check_cron)] = None
        tz: Annotated[str | None, _said(_tz)] = None

    class StateRecord(Record):
        next_run: Annotated[datetime | None, _when("state.next_run")] = None
        last_run: Annotated[datetime | None, _when("state.last_run")] = None
        last_status: str | None = None
        last_error: Any = None
        delivery: dict | None = None

    class JobRecord(Record):
        model_config = ConfigDict(strict=True, extra="allow")   # a person's keys are kept
        id: Annotated[str, _said(_one_id)]
        name: str | None = None
        message: str
        enabled: bool = True
        delete_after_run: bool = False
        misfire: Literal["run_once", "skip"] = "run_once"
        host: Annotated[str | None, _said(_host)] = None
        session: Annotated[str | None, _said(check_key)] = None
        created_by: Literal["person", "model"] | None = None
        approved: bool | None = None
        deliver: Annotated[str | None, _said(check_target)] = None
        schedule: ScheduleRecord
        state: StateRecord = StateRecord()

    return JobRecord, ScheduleRecord, StateRecord


def dumps(cron: CronFile) -> str:
    """cron.json's text: two-space indents, keys in a fixed order, a final newline."""
    jobs: list = [j.to_json() for j in cron.jobs]
    for b in sorted(cron.broken, key=lambda b: b.index):
        jobs.insert(min(b.index, len(jobs)), b.raw)
    data = {"version": VERSION, "jobs": jobs}
    data.update(cron.extra)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def hand_edit_problem(root: Path) -> str | None:
    """Why a hand-edited cron.json cannot be committed (it does not parse), or None."""
    try:
        read(root)
    except UserError as e:
        return f"{e} It is not committed until it is fixed (agent edit cron.json)."
    return None


def read(root: Path) -> CronFile:
    """The vault's cron.json (an empty one when the file does not exist)."""
    text = read_text(root)
    return CronFile() if text is None else loads(text)


def read_text(root: Path) -> str | None:
    """cron.json's text through the vault's one safe read (None when missing)."""
    from agent.fs import safe

    try:
        return safe.read_text(root, CRON_FILE)
    except UserError as e:
        raise CronFileError(f"{e} It was left as it is.") from None
