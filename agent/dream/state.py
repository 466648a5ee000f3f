"""The dream in flight: a typed record saved as JSON in `.agent/dream.json`.

A run moves through

    analyst --ended--> analyst_done --editor submitted--> editor --ended--> editor_done --> commit

and the record is saved before every wait, so an interrupted dream (Ctrl-C, kill -9, a
reboot) picks up the same batch instead of paying for another. The file is local state,
not part of the vault's history; it goes once the dream is committed, fails or is
canceled. Its JSON layout (version 1) is the one earlier versions wrote, so a dream left
in flight by them is picked up; a file this version cannot read is named with the fix
(`agent dream --cancel` discards it).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.fs import atomic
from agent.llm.base import usage_dict
from agent.llm.records import BatchRequest, Message, Reply, Request, Text, Usage
from agent.stores import sessions
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

FILE = "dream.json"           # under .agent/
VERSION = 1
PHASES = ("analyst", "editor")
ALL_PHASES = ("analyst", "analyst_done", "editor", "editor_done")


class DreamError(UserError):
    pass


_KINDS = {int: "a whole number", str: "text", list: "a list", dict: "an object",
          bool: "true or false"}


@dataclass
class Step:
    """One phase's requests: their custom ids and, when sent as a batch, its id and when
    it was submitted (ISO 8601)."""
    requests: list[str]
    batch: str | None = None
    submitted: str | None = None
    # Sent as plain calls (a provider without batches): each request's parameters, to
    # send again after a kill, and each reply as it came (custom_id -> message record),
    # so a resumed run sends only the rest.
    params: dict[str, dict] = field(default_factory=dict)
    done: dict[str, dict] = field(default_factory=dict)

    def to_json(self) -> dict:
        d: dict[str, Any] = {}
        if self.batch is not None:
            d["batch"] = self.batch
        d["requests"] = list(self.requests)
        if self.submitted is not None:
            d["submitted"] = self.submitted
        if self.params:
            d["params"] = self.params
        if self.done:
            d["done"] = self.done
        return d


# A plain call in flight is kept as the Messages API parameters it was sent with, and its
# reply as a message record, the layout earlier versions wrote (their blocks in the
# stored form of agent.stores.sessions, cache hints included), so a dream left in
# flight by them is sent on.


def request_json(r: BatchRequest) -> dict[str, Any]:
    req = r.request
    out: dict[str, Any] = {"model": r.model, "max_tokens": req.max_tokens}
    if req.system:
        out["system"] = sessions.stored(req.system)
    out["messages"] = [{"role": m.role, "content": sessions.stored(m.content)}
                       for m in req.messages]
    if req.schema is not None:
        out["output_config"] = {"format": {"type": "json_schema", "schema": req.schema}}
    return out


def request_of(params: dict[str, Any]) -> tuple[str, Request]:
    """(model, request) of what request_json saved."""
    system = params.get("system") or ""
    messages = [Message(m["role"], m["content"] if isinstance(m["content"], str)
                        else sessions.blocks(m["content"]))
                for m in params.get("messages") or []]
    schema = ((params.get("output_config") or {}).get("format") or {}).get("schema")
    return str(params.get("model", "")), Request(
        messages, int(params.get("max_tokens") or 0),
        system=system if isinstance(system, str) else
        [b for b in sessions.blocks(system) if isinstance(b, Text)], schema=schema)


def reply_json(reply: Reply) -> dict[str, Any]:
    return {"content": sessions.stored(reply.content), "usage": reply.usage.as_dict(),
            "model": reply.model, "stop_reason": reply.stop_reason}


def reply_of(record: dict[str, Any]) -> Reply:
    return Reply(sessions.blocks(record.get("content") or []),
                 Usage(**usage_dict(record.get("usage"))), str(record.get("model") or ""),
                 record.get("stop_reason"))


@dataclass
class RunState:
    """What a dream in flight needs to go on.

    The memory texts are the prefix both phases share, kept so that the editor sends the
    same bytes as the analyst (and hits the prompt cache)."""
    phase: str                    # one of ALL_PHASES
    cursor: int                   # the cursor the run started from
    through: int                  # the last archive id it covers
    model: str
    started: str = ""             # ISO 8601
    today: str = ""               # YYYY-MM-DD, as the prompts say it
    max_tokens: int = 0
    entries: list[int] = field(default_factory=list)      # archive ids sent to the model
    skipped: list[int] = field(default_factory=list)      # heartbeat/dream entries set aside
    passed: list[int] = field(default_factory=list)       # explicit learning: nothing asked
    asks: list[str] | None = None         # explicit learning: what the person asked to keep
    memory_text: str = ""
    user_text: str = ""
    mode: str = "batch"           # "batch" or "sync"
    usage: dict[str, dict[str, int]] = field(default_factory=dict)   # phase -> token counts
    analyst: Step | None = None
    editor: Step | None = None
    findings: list[dict] | None = None    # the analyst's, once it is done
    ops: list[dict] | None = None         # the editor's, once it is done
    previewed: bool = False               # shown by --dry-run, not yet applied

    @property
    def ids(self) -> list[int]:
        """Every archive id the run consolidates (sent or set aside)."""
        return sorted([*self.entries, *self.skipped, *self.passed])

    @property
    def first(self) -> int:
        return self.ids[0] if self.ids else self.cursor + 1

    @property
    def run(self) -> str:
        """The run's id, `4..9`: its first and last archive id. The same text names the
        run in its progress lines, its commit's subject and `Run:` trailer, the ledger,
        its proposal branch (`dream/4-9`) and `agent why`."""
        return f"{self.first}..{self.through}"

    @property
    def span(self) -> str:
        """`archive 4..9`"""
        return f"archive {self.run}"

    def step(self, phase: str) -> Step | None:
        return self.analyst if phase == "analyst" else self.editor if phase == "editor" else None

    def set_step(self, phase: str, step: Step) -> None:
        setattr(self, phase, step)

    @property
    def current(self) -> Step | None:
        """The step of the phase in flight (None between phases)."""
        return self.step(self.phase)

    def batch_ids(self) -> list[str]:
        return [s.batch for s in (self.analyst, self.editor) if s is not None and s.batch]

    # -- JSON

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "version": VERSION, "phase": self.phase, "started": self.started,
            "today": self.today, "model": self.model, "max_tokens": self.max_tokens,
            "cursor": self.cursor, "through": self.through, "entries": list(self.entries),
            "skipped": list(self.skipped), "memory_text": self.memory_text,
            "user_text": self.user_text, "mode": self.mode, "usage": self.usage}
        for phase in PHASES:
            s = self.step(phase)
            if s is not None:
                d[phase] = s.to_json()
        if self.findings is not None:
            d["findings"] = self.findings
        if self.ops is not None:
            d["ops"] = self.ops
        if self.previewed:
            d["previewed"] = True
        if self.passed:
            d["passed"] = list(self.passed)
        if self.asks is not None:
            d["asks"] = list(self.asks)
        return d

    @classmethod
    def from_json(cls, data: Any) -> "RunState":
        """The record in `data`; ValueError saying what is wrong with it."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("version", VERSION) != VERSION:
            raise ValueError(f"version {data.get('version')!r}")
        if data.get("phase") not in ALL_PHASES:
            raise ValueError(f"phase {data.get('phase')!r}")

        def typed(key: str, kind, default=None, *, required: bool = False):
            if key not in data or data[key] is None:
                if required:
                    raise ValueError(f"no {key}")
                return default
            value = data[key]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ValueError(f"{key} should be {_KINDS[kind]}, not {json.dumps(value)[:40]}")
            return value

        def step(key: str) -> Step | None:
            raw = typed(key, dict)
            if raw is None:
                return None
            reqs = raw.get("requests", [])
            if not isinstance(reqs, list) or not all(isinstance(r, str) for r in reqs):
                raise ValueError(f"{key}.requests")
            batch, submitted = raw.get("batch"), raw.get("submitted")
            if batch is not None and not isinstance(batch, str):
                raise ValueError(f"{key}.batch")
            if submitted is not None and not isinstance(submitted, str):
                raise ValueError(f"{key}.submitted")
            params, done = raw.get("params", {}), raw.get("done", {})
            if not isinstance(params, dict) or not isinstance(done, dict):
                raise ValueError(f"{key}.params")
            return Step(list(reqs), batch, submitted, params, done)

        state = cls(
            phase=data["phase"], cursor=typed("cursor", int, required=True),
            through=typed("through", int, required=True), model=typed("model", str, ""),
            started=typed("started", str, ""), today=typed("today", str, ""),
            max_tokens=typed("max_tokens", int, 0), entries=list(typed("entries", list, [])),
            skipped=list(typed("skipped", list, [])), memory_text=typed("memory_text", str, ""),
            user_text=typed("user_text", str, ""), mode=typed("mode", str, "batch"),
            usage=dict(typed("usage", dict, {})), analyst=step("analyst"), editor=step("editor"),
            findings=typed("findings", list), ops=typed("ops", list),
            previewed=bool(typed("previewed", bool, False)),
            passed=list(typed("passed", list, [])), asks=typed("asks", list))
        if state.phase in PHASES and state.current is None:
            raise ValueError(f"phase {state.phase} without its requests")
        if state.phase in PHASES and state.mode == "batch" and not state.current.batch:
            raise ValueError(f"phase {state.phase} without its batch")
        if state.phase in PHASES and state.mode == "sync" and \
                set(state.current.requests) - set(state.current.params) - set(state.current.done):
            raise ValueError(f"phase {state.phase} without its requests' parameters")
        if state.phase == "analyst_done" and state.findings is None:
            raise ValueError("analyst_done without findings")
        if state.phase == "editor_done" and state.ops is None:
            raise ValueError("editor_done without ops")
        return state


# ---- the file -------------------------------------------------------------------------


def path_of(vault: Vault) -> Path:
    return vault.state / FILE


def load(vault: Vault) -> RunState | None:
    """The dream in flight, or None; DreamError naming the file and the fix when it
    cannot be read."""
    path = path_of(vault)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        raise DreamError(f"{path} is not valid JSON (the record of a dream in flight): "
                         f"run `agent dream --cancel` to discard it.") from None
    try:
        return RunState.from_json(data)
    except ValueError as e:
        raise DreamError(f"{path} is not a dream record this version understands ({e}): "
                         f"run `agent dream --cancel` to discard it.") from None


def save(vault: Vault, state: RunState) -> None:
    atomic.write_json(path_of(vault), state.to_json())


def clear(vault: Vault) -> None:
    with contextlib.suppress(FileNotFoundError):
        path_of(vault).unlink()
