"""Structured replies: a pydantic model is both the JSON schema a request asks for
(`Request.schema`, which each provider sends in its own way) and the check of the reply
that comes back.

    request.schema = schema_of(Summary)
    reply = provider.create(models, request, parse=Summary)    # one retry if it misfits

The schemas carry bounds (`maxLength` on strings, `maxItems` on arrays: `bound`,
`capped`). A local server turns a schema into a grammar (llama.cpp, Ollama, vLLM), and
a grammar without them lets a small model's string or list go on to max_tokens: with
them the grammar itself closes the JSON. The bounds are no check of the reply (a longer
one from a model that was not held to them is taken), and the APIs whose strict mode
refuses them (OpenAI's own, Anthropic's) are sent the schema without them: `plain`. A
reply whose text runs away inside its bounds (one phrase over and over) misfits:
`runaway`.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping

from agent.schemas import in_words, inlined_schema
from agent.llm.repeats import repeating

# The keywords that bound a reply's size: honoured by the grammars of local servers,
# refused by the strict modes of OpenAI's and Anthropic's APIs.
BOUNDS = ("maxLength", "minLength", "maxItems", "minItems")
# A string of a structured reply that ends in one unit repeated over this many
# characters (and at least RUNAWAY_COPIES times) ran away: no summary or finding does.
RUNAWAY_SPAN = 150
RUNAWAY_COPIES = 4


def schema_of(model: Any) -> dict[str, Any]:
    """The model's JSON schema as the APIs take it: references inlined, no titles."""
    return inlined_schema(model)


def bound(chars: int) -> dict[str, Any]:
    """A string field's bound, for pydantic's `Field(json_schema_extra=bound(300))`: in
    the schema sent, not in the check of the reply."""
    return {"maxLength": chars}


def capped(schema: dict[str, Any], field: str, items: int) -> dict[str, Any]:
    """`schema` with its top-level array `field` holding at most `items` items."""
    props = dict(schema["properties"])
    props[field] = {**props[field], "maxItems": max(1, items)}
    return {**schema, "properties": props}


def plain(schema: Any) -> Any:
    """`schema` without its bounds (BOUNDS), for an API whose strict mode refuses them."""
    if isinstance(schema, dict):
        return {k: plain(v) for k, v in schema.items()
                if not (k in BOUNDS and isinstance(v, int))}
    if isinstance(schema, list):
        return [plain(v) for v in schema]
    return schema


def bounded(schema: Any) -> bool:
    """Whether `schema` carries any bound."""
    if isinstance(schema, dict):
        return any((k in BOUNDS and isinstance(v, int)) or bounded(v) for k, v in schema.items())
    if isinstance(schema, list):
        return any(bounded(v) for v in schema)
    return False


def runaway(data: Any, at: str = "$") -> str | None:
    """Where a parsed reply's string ran away (`$.summary kept repeating the same
    18-character text`), or None."""
    if isinstance(data, str):
        unit = repeating(data.rstrip(), RUNAWAY_SPAN, RUNAWAY_COPIES)
        return None if unit is None else \
            f"{at} kept repeating the same {unit}-character text"
    items = (data.items() if isinstance(data, dict) else
             enumerate(data) if isinstance(data, list) else ())
    for key, value in items:
        found = runaway(value, f"{at}[{key}]" if isinstance(key, int) else f"{at}.{key}")
        if found:
            return found
    return None


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
    """Why `text` is no valid `parse` (a pydantic model) as JSON, or has run away
    (`runaway`), or None."""
    from pydantic import ValidationError

    try:
        checked = parse.model_validate_json(text.strip() or "null")
    except ValidationError as e:
        return said(e.errors()[0])
    return runaway(checked.model_dump(mode="json"))
