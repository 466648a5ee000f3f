"""Structured replies: a pydantic model is both the JSON schema a request asks for
(`Request.schema`, which each provider sends in its own way) and the check of the reply
that comes back.

    request.schema = schema_of(Summary)
    reply = provider.create(models, request, parse=Summary)    # one retry if it misfits
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from agent.schemas import inlined_schema


def schema_of(model: Any) -> dict[str, Any]:
    """The model's JSON schema as the APIs take it: references inlined, no titles."""
    return inlined_schema(model)


def where(loc: tuple[Any, ...]) -> str:
    """`$.findings[0].kind` for pydantic's location ("findings", 0, "kind")."""
    out = "$"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def said(err: Mapping[str, Any]) -> str:
    """One pydantic error in plain words: `$.findings[0].kind: 'guess' is not one of [...]`."""
    kind, loc = err["type"], tuple(err["loc"])
    at = where(loc[:-1] if kind in ("missing", "extra_forbidden") else loc)
    if kind == "missing":
        return f"{at}: missing {loc[-1]!r}"
    if kind == "extra_forbidden":
        return f"{at}: unexpected {loc[-1]!r}"
    if kind == "literal_error":
        return f"{at}: {err.get('input')!r} is not one of {err['ctx']['expected']}"
    words = {"string_type": "expected a string", "list_type": "expected an array",
             "model_type": "expected an object", "dict_type": "expected an object",
             "float_type": "expected a number", "float_parsing": "expected a number"}
    return f"{at}: {words.get(kind, err['msg'])}"


def misfit(parse: Any, text: str) -> str | None:
    """Why `text` is no valid `parse` (a pydantic model) as JSON, or None."""
    from pydantic import ValidationError

    try:
        parse.model_validate_json(text.strip() or "null")
    except ValidationError as e:
        return said(e.errors()[0])
    return None
