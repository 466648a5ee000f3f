"""The tools the model can call: plain functions registered with `@tool`.

Writing a tool module
---------------------
Put a module in the `agent.chat.tools` package (`agent/tools/<family>.py`) and decorate plain
functions with `@tool`. `load_all()` imports every module of the package (with
`pkgutil`), so a new module registers its tools without any list to edit::

    from agent.chat.tools.registry import ToolError, current_context, tool

    @tool
    def cron_remove(id: str) -> str:
        \"\"\"Remove a scheduled job.

        Args:
            id: The job's id, as cron_list shows it.
        \"\"\"
        ctx = current_context()
        ...
        return "Removed job 3"

- The JSON schema comes from the type hints (`str`, `int`, `float`, `bool`,
  `list[str]`, `X | None`, `Literal[...]`, `dict`, or anything pydantic describes) and
  defaults, through a pydantic model made from the signature (agent/schemas.py), which
  also checks the model's input (strictly: "5" is no whole number); each parameter's
  description from the docstring's `Args:` section; the tool's description from the
  docstring's text before it. The decorator returns the function unchanged, so it can
  be called and tested directly (with `use_context(...)`).
- Per-call context (vault, session, now, settings, depth, provider) comes from
  `current_context()`, a `ContextVar`, never from the signature.
- Return a string (other values are sent as JSON). Raise `ToolError` (or any
  `agent.errors.UserError`) with a message for the model when the call cannot be done;
  any other exception is also sent back as an error result (and logged with its
  traceback to `.agent/logs/tools.log`), and the turn goes on.
- Several calls of one reply run at once, each in its own thread.
- Files: `ctx.vault` is the turn's `StagedVault` (agent/vault/staged.py). Use its vault
  methods as usual (`read_text`, `write_text`, `append_lines`, `delete`, `with
  locked():`, `commit()`): writes are staged and applied under the real vault lock when
  the turn is saved, in the turn's one commit (`commit()` is a no-op there). For a
  read-modify-write of a file another process may also change (cron.json), stage the
  change as a function with `ctx.vault.update(rel, fn)`: `fn(old_text_or_None) -> new
  text` runs again on the file as it is under the lock when the turn is saved.
- Nothing here may import the Anthropic SDK at module level (commands that need no
  model import this package).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import inspect
import json
import pkgutil
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from agent import schemas
from agent.errors import UserError
from agent.llm.records import Tool as Definition
from agent.vault.staged import StagedVault


class ToolError(UserError):
    """A tool call that cannot be done; the message goes back to the model."""


class ToolInputError(ToolError):
    """The model's input does not match the tool's schema."""


@dataclass
class ToolContext:
    """What a tool call may use besides its arguments."""
    vault: StagedVault               # the turn's staged view of the vault
    session: str
    now: datetime
    settings: Any = None
    depth: int = 0
    provider: Any = None             # agent.llm.Provider: the model, for tools that call one
    cancel: Any = None               # agent.chat.subagents.Cancel: set when the turn is stopped
    readonly: bool = False           # a read-only sub-agent: no writing tools
    messages: list | None = None     # the conversation so far (for spawn_agent context=full)
    runs: list = field(default_factory=list)   # sub-agent run ids this turn started
    parent: str | None = None        # "session turn N" of the turn running these tools
    used: Any = None                 # agent.stores.used.Used: what memory the turn showed
    asked: str = ""                  # what the person typed this turn ("": a job's,
                                     # a heartbeat's or a sub-agent's turn)


@dataclass
class Tool:
    name: str
    fn: Callable
    writes: bool = False             # changes the vault: not offered to read-only sub-agents
    # available(settings) -> None when the tool can be offered, else why not (one line)
    available: Callable | None = None

    def unavailable(self, settings) -> str | None:
        return self.available(settings) if self.available is not None else None

    @functools.cached_property
    def _doc(self) -> tuple[str, dict[str, str]]:
        return schemas.description(self.fn)

    @property
    def description(self) -> str:
        """The docstring's text before its `Args:` section."""
        return self._doc[0]

    @functools.cached_property
    def model(self) -> Any:
        """The pydantic model of the input, from the type hints (made at the first use:
        a command that offers no tool does not load pydantic)."""
        return schemas.arguments_model(self.fn, self.name, docs=self._doc[1])

    @functools.cached_property
    def schema(self) -> dict:
        """The JSON schema of the input, as the model is sent it."""
        return schemas.json_schema(self.model)

    def definition(self) -> Definition:
        return Definition(self.name, self.description, self.schema)


REGISTRY: dict[str, Tool] = {}
_context: contextvars.ContextVar[ToolContext] = contextvars.ContextVar("agent_tool_context")


def current_context() -> ToolContext:
    """The context of the tool call running now (RuntimeError outside a call)."""
    try:
        return _context.get()
    except LookupError:
        raise RuntimeError("no tool context: tools run inside use_context(...)") from None


@contextlib.contextmanager
def use_context(ctx: ToolContext):
    token = _context.set(ctx)
    try:
        yield ctx
    finally:
        _context.reset(token)


# ---- the decorator ------------------------------------------------------------------


def tool(fn: Callable | None = None, *, name: str | None = None, writes: bool = False,
         available: Callable | None = None):
    """Register `fn` as a tool (usable bare, `@tool`, or as `@tool(name=...)`).

    `writes=True` marks a tool that changes the vault (kept from read-only sub-agents);
    `available(settings)` returns None when the tool may be offered, else the reason it
    is not (bwrap missing, turned off in agent.toml).
    """
    def register(f: Callable) -> Callable:
        t = _build(f, name or f.__name__)
        t.writes, t.available = writes, available
        if t.name in REGISTRY and REGISTRY[t.name].fn is not f:
            existing = REGISTRY[t.name].fn
            raise ValueError(f"tool {t.name!r} is defined twice: {existing.__module__} "
                             f"and {f.__module__}")
        REGISTRY[t.name] = t
        return f
    return register(fn) if fn is not None else register


def _build(fn: Callable, name: str) -> Tool:
    """The tool `fn`, refused (ValueError) when it cannot be described to the model; its
    schema is made at the first use."""
    if not (inspect.getdoc(fn) or "").strip():
        raise ValueError(f"tool {name!r} ({fn.__module__}) needs a docstring saying what it does")
    hints = typing.get_type_hints(fn)
    for pname, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"tool {name!r}: *args/**kwargs cannot be described to the model")
        if pname not in hints:
            raise ValueError(f"tool {name!r}: parameter {pname!r} needs a type hint")
    return Tool(name, fn)


def check_input(t: Tool, data) -> dict:
    """The keyword arguments for a call of `t`, or ToolInputError saying what is wrong."""
    try:
        return schemas.check(t.model, data, t.name)
    except schemas.ArgumentError as e:
        raise ToolInputError(str(e)) from None


# ---- the registry -------------------------------------------------------------------

_loaded = False


def load_all() -> dict[str, Tool]:
    """Every tool: imports each module of the `agent.chat.tools` package once."""
    global _loaded
    if not _loaded:
        import agent.chat.tools as package
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if info.name != "registry" and not info.name.startswith("_"):
                importlib.import_module(f"{package.__name__}.{info.name}")
        _loaded = True
    return REGISTRY


def offered(settings=None, *, readonly: bool = False) -> list[str]:
    """The names of the tools to offer: available with these settings, sorted."""
    tools = load_all()
    return [n for n in sorted(tools)
            if not (readonly and tools[n].writes) and tools[n].unavailable(settings) is None]


def definitions(names: list[str] | None = None, *, settings=None,
                readonly: bool = False) -> list[Definition]:
    """The tools a request offers, sorted by name so the prompt prefix is stable."""
    tools = load_all()
    allowed = set(offered(settings, readonly=readonly))
    picked = sorted(tools) if names is None else [n for n in names if n in tools]
    return [tools[n].definition() for n in picked if n in allowed]


def result_text(value) -> str:
    if value is None:
        return "done"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def call(name: str, data, log=None) -> tuple[str, bool]:
    """Run one tool call in the current context: (result text, is_error).

    A wrong name or input and a raising tool come back as an error result for the
    model; `log(name, exc)` is told of unexpected exceptions (bugs), which are not hidden.
    """
    tools = load_all()
    t = tools.get(name)
    if t is None:
        return f"There is no tool {name!r}; the tools are: {', '.join(sorted(tools))}.", True
    ctx = _context.get(None)
    if ctx is not None:
        why = t.unavailable(ctx.settings)
        if why:
            return f"{name} is not available: {why}", True
        if ctx.readonly and t.writes:
            return f"{name} changes the vault and this sub-agent is read-only.", True
    try:
        kwargs = check_input(t, data)
        return result_text(t.fn(**kwargs)), False
    except UserError as e:
        return str(e) or type(e).__name__, True
    except Exception as e:  # noqa: BLE001 - a bug in a tool: the model is told, the traceback is logged
        if log is not None:
            log(name, e)
        return f"{name} failed: {type(e).__name__}: {e}", True
