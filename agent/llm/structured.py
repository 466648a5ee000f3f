"""Structured replies: a pydantic model is both the JSON schema a request asks for
(`Request.schema`, which each provider sends in its own way) and the check of the reply
that comes back.

    request.schema = schema_of(Summary)
    reply = provider.create(models, request, parse=Summary)    # one retry if it misfits
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from agent.schemas import in_words, inlined_schema


def schema_of(model: Any) -> dict[str, Any]:
    """The model's JSON schema as the APIs take it: references inlined, no titles."""
    return inlined_schema(model)


def where(loc: tuple[Any, ...]) -> str:
    """`$.findings[0].kind` for pydantic's location ("findings", 0, "kind")."""
    out = "$"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


# A model's reply misfit, said to it (and in the dream's record) at a JSON path.
_WORDS = {"missing": "{parent}: missing {name!r}", "extra_forbidden": "{parent}: unexpected {name!r}",
          "literal_error": "{at}: {value!r} is not one of {expected}",
          "string_type": "{at}: expected a string", "list_type": "{at}: expected an array",
          "model_type": "{at}: expected an object", "dict_type": "{at}: expected an object",
          "float_type": "{at}: expected a number", "float_parsing": "{at}: expected a number",
          "value_error": "{at}: {msg}"}


def said(err: Mapping[str, Any]) -> str:
    """One pydantic error in plain words: `$.findings[0].kind: 'guess' is not one of [...]`."""
    loc = tuple(err["loc"])
    return in_words(err, _WORDS, otherwise="{at}: {msg}", at=where(loc), parent=where(loc[:-1]))


def misfit(parse: Any, text: str) -> str | None:
    """Why `text` is no valid `parse` (a pydantic model) as JSON, or None."""
    from pydantic import ValidationError

    try:
        parse.model_validate_json(text.strip() or "null")
    except ValidationError as e:
        return said(e.errors()[0])
    return None
