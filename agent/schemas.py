"""Arguments and records checked by pydantic: a model made from a function's signature (its
JSON schema is what a model or an MCP client is sent, as simonw/llm and Anthropic's
`@beta_tool` do) and pydantic's first error said in one line naming the field.

    model = arguments_model(remember, "remember")
    schema = json_schema(model)                  # the tool's input_schema
    kwargs = check(model, data, "remember")      # or ArgumentError: "text must be a string, got 3"

pydantic costs tens of milliseconds to import, so it is imported inside these functions
only: a command that checks nothing never loads it.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent.errors import UserError

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError


class ArgumentError(UserError):
    """Input that does not fit a schema; the message names the field and the problem."""


def _described(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) of a Google-style docstring."""
    import docstring_parser

    parsed = docstring_parser.parse(doc)
    return (parsed.description or "").strip(), {p.arg_name: " ".join((p.description or "").split()) for p in parsed.params}


def description(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """What `fn`'s docstring says of it and of each parameter (its `Args:` section)."""
    return _described(inspect.getdoc(fn) or "")


def _whole(value: object) -> object:
    """JSON has one kind of number: 5.0 is the whole number 5."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _loosened(hint: Any) -> Any:
    """`hint` with an int (alone, optional or annotated) also taking a whole float (5.0)."""
    from pydantic import BeforeValidator

    base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
    parts = set(typing.get_args(base)) - {type(None)}
    if base is int or (typing.get_origin(base) in (typing.Union, types.UnionType)
                       and parts == {int}):
        return typing.Annotated[hint, BeforeValidator(_whole)]
    return hint


def arguments_model(fn: Callable[..., Any], name: str, *, skip: Sequence[str] = (),
                    docs: Mapping[str, str] | None = None) -> type[BaseModel]:
    """The pydantic model of `fn`'s keyword arguments, from its type hints and defaults:
    strict (no "5" for 5, no 1 for true), no unknown key, each parameter described by
    `docs` unless its hint says already (`Annotated[str, Field(description=...)]`).
    ValueError names a parameter that cannot be described to a model."""
    from pydantic import ConfigDict, Field, create_model

    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for pname, p in inspect.signature(fn).parameters.items():
        if pname == "self" or pname in skip:
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"tool {name!r}: *args/**kwargs cannot be described to the model")
        if pname not in hints:
            raise ValueError(f"tool {name!r}: parameter {pname!r} needs a type hint")
        default = ... if p.default is inspect.Parameter.empty else p.default
        said = (docs or {}).get(pname)
        info = Field(default, description=said) if said else Field(default)
        fields[pname] = (_loosened(hints[pname]), info)
    config = ConfigDict(extra="forbid", strict=True)
    return create_model(f"{name}_arguments", __config__=config, **fields)


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A tool's input schema: `inlined_schema`, with `required` always present (an empty
    list for a tool whose parameters all have defaults)."""
    cleaned = inlined_schema(model)
    cleaned.setdefault("required", [])
    return cleaned


def inlined_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema as the APIs take it: references inlined, no titles."""
    full = model.model_json_schema()
    defs = full.pop("$defs", {})

    def clean(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return clean(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: clean(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node
    cleaned: dict[str, Any] = clean(full)
    return cleaned


def check(model: type[BaseModel], data: object, who: str, *, noun: str = "parameter",
          named: bool = False) -> dict[str, Any]:
    """The arguments `data` holds (the function's defaults fill in the rest), or
    ArgumentError in one line:
    `who` (the tool) and the field, as `remember needs text`, `limit must be a whole
    number, got "ten"`; `noun` names what a field is to the reader (parameter, argument);
    `named` puts `who: ` before a wrong field's problem too."""
    from pydantic import ValidationError

    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ArgumentError(f"{who}: the input must be a JSON object, got {shown(data)}")
    try:
        checked = model.model_validate(data)
    except ValidationError as e:
        problem = said(e, who, model, noun=noun)
        if named and not problem.startswith(f"{who} "):
            problem = f"{who}: {problem}"
        raise ArgumentError(problem) from None
    return {k: getattr(checked, k) for k in checked.model_fields_set}


def shown(value: object, limit: int = 80) -> str:
    """A value as JSON, cut to `limit` characters."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)[:limit]
    except (ValueError, TypeError):
        return repr(value)[:limit]


def place(loc: Sequence[str | int]) -> str:
    """`schedule.every_seconds`, `tags[2]` for pydantic's location of an error."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_KINDS = {"string_type": "a string", "int_type": "a whole number", "int_parsing": "a whole number",
          "int_from_float": "a whole number", "float_type": "a number",
          "float_parsing": "a number", "bool_type": "true or false",
          "bool_parsing": "true or false", "list_type": "a list", "dict_type": "an object",
          "model_type": "an object", "model_attributes_type": "an object"}
_KIND_WORDS = {kind: f"{{at}} must be {what}, got {{shown}}" for kind, what in _KINDS.items()}


def in_words(err: Mapping[str, Any], words: Mapping[str, str], value: Any = None, *,
             otherwise: str = "{said}, not {value!r}", **fields: Any) -> str:
    """One pydantic error in a reader's words: the one function every caller (agent.toml's
    checks, a tool's arguments, a model's structured reply, cron.json's jobs) says them by.

    `words` maps an error's type to a sentence; a check of our own (a `value_error`) not
    in it says its own sentence, and `otherwise` says any other error. In a sentence: {value} is
    the value checked (`value`, else the error's input) and {shown} the same as JSON
    (null for None); {name} the last part of the error's location; {expected} a
    literal's choices; {msg} pydantic's message and {said} the same with a small first
    letter; `fields` adds the caller's own (where the error is, in its notation)."""
    kind = err["type"]
    if value is None:
        value = err.get("input")
    template = words.get(kind)
    if template is None and kind == "value_error":
        return str(err["ctx"]["error"])
    msg = str(err["msg"])
    loc = tuple(err.get("loc") or ())
    template = otherwise if template is None else template
    return template.format(value=value, shown="null" if value is None else shown(value),
                           name=loc[-1] if loc else "",
                           expected=(err.get("ctx") or {}).get("expected"), msg=msg,
                           said=f"{msg[:1].lower()}{msg[1:]}", **fields)


def said(e: ValidationError, who: str, model: type[BaseModel] | None = None, *,
         noun: str = "parameter") -> str:
    """pydantic's errors in one line: every missing or unknown field at once, else the
    first wrong one with what it must be and what it was."""
    errors = e.errors()
    unknown = [str(x["loc"][-1]) for x in errors if x["type"] == "extra_forbidden"]
    if unknown:
        takes = ", ".join(model.model_fields) if model is not None else ""
        return (f"{who} has no {noun} {', '.join(unknown)}"
                + (f" (it takes {takes or 'none'})" if model is not None else ""))
    missing = [place(x["loc"]) for x in errors if x["type"] == "missing"]
    if missing:
        return f"{who} needs {', '.join(missing)}"
    return field_problem(errors[0], model)


def field_problem(err: Mapping[str, Any], model: type[BaseModel] | None = None) -> str:
    """One pydantic error as `field must be ..., got ...`."""
    kind, at, value = err["type"], place(err["loc"]), err.get("input")
    ctx = err.get("ctx") or {}
    if kind in _KINDS:
        return in_words(err, _KIND_WORDS, at=at)
    if kind == "literal_error":
        choices = ", ".join(shown(c) for c in typing.get_args(_hint(model, err["loc"])))
        return f"{at} must be one of {choices or ctx.get('expected')}, got {shown(value)}"
    if kind == "string_too_long":
        return (f"{at} is {len(str(value))} characters long; at most {ctx['max_length']} "
                f"are accepted")
    if kind == "string_too_short" or (kind == "string_pattern_mismatch"
                                      and ctx.get("pattern") == r"\S"):
        return f"{at} is empty"             # `pattern: \S`: a text that is not blank
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        lo, hi = _bounds(model, err["loc"])
        if lo is not None and hi is not None:
            return f"{at} must be between {lo} and {hi}, got {shown(value)}"
        return f"{at} must be {err['msg'].removeprefix('Input should be ')}, got {shown(value)}"
    return f"{at}: {err['msg']}"


def _hint(model: type[BaseModel] | None, loc: Sequence[str | int]) -> Any:
    """The type hint of a model's top-level field, without Annotated and None."""
    if model is None or not loc or loc[0] not in model.model_fields:
        return None
    hint = model.model_fields[str(loc[0])].annotation
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        hint = args[0]
    return hint


def _bounds(model: type[BaseModel] | None, loc: Sequence[str | int]) -> tuple[Any, Any]:
    """The (minimum, maximum) a top-level field's schema names."""
    if model is None or not loc:
        return None, None
    prop = json_schema(model)["properties"].get(str(loc[0]), {})
    return prop.get("minimum"), prop.get("maximum")
