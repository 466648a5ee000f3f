"""What is wrong with parsed agent.toml data: each value checked against its setting
(pydantic, its errors said in agent.toml's words), unknown keys found, models that name
an undefined provider."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent.config.schema import KEYS, SECTIONS, Key
from agent.schemas import in_words as said
from agent.errors import UserError, did_you_mean


def _adapter(k: Key):
    """The pydantic TypeAdapter that checks values of `k` (made at the first check)."""
    adapter = _ADAPTERS.get(k.key)
    if adapter is not None:
        return adapter
    from typing import Annotated, Any

    from pydantic import AfterValidator, Field, StrictBool, StrictInt, StrictStr, TypeAdapter

    def ours(check):
        def run(value):
            wrong = check(value)
            if wrong:
                raise ValueError(wrong)
            return value
        return AfterValidator(run)

    def no_chars(value: str) -> str | None:
        bad = [c for c in k.no_chars if c in value]
        return f"must not hold {', '.join(repr(c) for c in bad)}" if bad else None

    text = Annotated[StrictStr, Field(pattern=r"\S")]
    kind: Any
    if k.check is not None:
        kind = Annotated[Any, ours(k.check)]
    elif k.kind is bool:
        kind = StrictBool
    elif k.kind is int:
        kind = Annotated[StrictInt, Field(ge=k.min)] if k.min is not None else StrictInt
    elif k.kind is list:
        kind = list[text]
    else:
        kind = Annotated[text, ours(no_chars)] if k.no_chars else text
    adapter = _ADAPTERS[k.key] = TypeAdapter(kind)
    return adapter


_ADAPTERS: dict[str, object] = {}


def check_value(k: Key, value) -> str | None:
    """What is wrong with `value` for the setting `k`, or None (pydantic checks it; its
    first error is said in the words of agent.toml)."""
    from pydantic import ValidationError

    try:
        _adapter(k).validate_python(value)
    except ValidationError as e:
        err = e.errors()[0]
        if k.kind is list and k.check is None:
            return f"must be a list of strings, as in [\"a\", \"b\"], not {value!r}"
        return _said(err, value, k)
    return None


def _said(err: Mapping[str, Any], value: Any, k: Key) -> str:
    return said(err, {"bool_type": "must be true or false, not {value!r}",
                      "int_type": "must be a whole number, not {value!r}",
                      "greater_than_equal": f"must be at least {k.min}, not {{value}}",
                      "string_type": "must be a string (in quotes), not {value!r}",
                      "string_pattern_mismatch": "must not be empty"}, value)


def hint(word: str, choices) -> str:
    close = did_you_mean(word, choices)          # " Did you mean X?"
    return f" (d{close[2:]})" if close else " (agent config list shows the settings)"


def table_of(data: dict[str, Any], section: str) -> Any:
    """The table `section` (dotted for a nested one) of parsed data, or None."""
    table: Any = data
    for part in section.split("."):
        table = table.get(part) if isinstance(table, dict) else None
    return table


def _nested(prefix: str) -> list[str]:
    """The sections under `prefix`: channels -> [channels.telegram]."""
    return sorted(s for s in SECTIONS if s.startswith(prefix + "."))


def findings(data: dict) -> list[str]:
    """What `agent config check` reports of parsed agent.toml data as errors: its
    problems, and a dream schedule that is no cron expression."""
    found = problems(data)
    dream = data.get("dream")
    schedule = dream.get("schedule") if isinstance(dream, dict) else None
    if isinstance(schedule, str) and schedule.strip():
        from agent import schedule as sched
        try:
            sched.check_cron(schedule)
        except UserError as e:
            found.append(f"dream.schedule: {e}")
    return found


def problems(data: dict, unknown: list[str] | None = None) -> list[str]:
    """Every problem of parsed agent.toml data, each naming its key. An unknown key is no
    problem (a newer version on another machine may have written it): it goes to
    `unknown` when given, see also unknown()."""
    errors, unknowns = _walk(data)
    if unknown is not None:
        unknown.extend(unknowns)
    return errors + model_problems(data)


def unknown(data: dict) -> list[str]:
    """The keys and sections of agent.toml no setting knows (a typo, or a setting of a
    newer version synced from another machine): warned of and ignored."""
    _, warnings = _walk(data)
    return warnings


def _walk(data: dict, prefix: str = "") -> tuple[list[str], list[str]]:
    out, unknowns = [], []
    for section, table in data.items():
        if prefix:
            section = f"{prefix}.{section}"
        elif section == "mcp":
            # MCP servers are named tables of their own; agent.chat.mcp_client.client checks them.
            from agent.config.mcp_servers import problems as mcp_problems
            out.extend(mcp_problems(table))
            continue
        elif section == "providers":
            from agent.config.providers import problems as provider_problems
            out.extend(provider_problems(table))
            continue
        elif section == "prices":
            # One table per model, named as the models are: agent/prices.py checks them.
            from agent.prices import problems as price_problems
            out.extend(price_problems(table))
            continue
        if section not in SECTIONS and _nested(section):
            if not isinstance(table, dict):
                out.append(f"[{section}] must be a table, as in [{_nested(section)[0]}]")
            else:
                more, also = _walk(table, section)
                out.extend(more)
                unknowns.extend(also)
            continue
        if section not in SECTIONS:
            where = _nested(prefix) if prefix else SECTIONS
            unknowns.append(f"unknown section [{section}]{hint(section, where)}")
            continue
        if not isinstance(table, dict):
            out.append(f"[{section}] must be a table of settings ([{section}] then "
                       f"key = value lines), not {table!r}")
            continue
        for name, value in table.items():
            key = f"{section}.{name}"
            k = KEYS.get(key)
            if k is None and section.startswith("channels.") and "token" in str(name).lower():
                out.append(f"{key}: a bot token is a secret and is never read from agent.toml "
                           f"(the vault is no place for secrets); remove the line and set "
                           f"$TELEGRAM_BOT_TOKEN in agent serve's environment")
                continue
            if k is None:
                unknowns.append(f"unknown setting {key}{hint(key, KEYS)}")
                continue
            wrong = check_value(k, value)
            if wrong:
                out.append(f"{key} {wrong}")
    return out, unknowns


def provider_names(data: dict) -> list[str]:
    """The providers a model may name: the built-in ones and agent.toml's tables."""
    from agent.config.providers import BUILTIN

    section = data.get("providers")
    return sorted({*BUILTIN, *(section if isinstance(section, dict) else {})})


def model_problems(data: dict) -> list[str]:
    """A model named `<provider>/<model>` whose provider is neither built in nor a table."""
    names = provider_names(data)
    out = []
    for k in ("model.name", "model.fallbacks", "model.fallback", "model.dream", "dream.model"):
        table = table_of(data, KEYS[k].section)
        value = table.get(KEYS[k].name) if isinstance(table, dict) else None
        for model in value if isinstance(value, list) else [value]:
            if isinstance(model, str) and "/" not in model:
                # A bare name is an Anthropic model: one of another vendor's would be
                # sent to Anthropic's API (and fail there, or be billed as a fallback).
                if (other := vendor_of(model)) is not None:
                    meant = _provider_for(other, data)
                    table = "" if meant in names else \
                        f" (with a [providers.{meant}] table for its server: docs/providers.md)"
                    out.append(f"{k}: {model!r} is not an Anthropic model (a name without "
                               f"a provider is one); did you mean {meant}/{model}?{table}")
                continue
            if not isinstance(model, str):
                continue
            provider, _, rest = model.partition("/")
            if provider not in names:
                close = did_you_mean(provider, names)      # " Did you mean X?"
                out.append(f"{k}: {model!r} names the provider {provider!r}, which agent.toml "
                           f"does not define{f' (d{close[2:]})' if close else ''}; add a [providers."
                           f"{provider}] table or use one of {', '.join(names)}")
            elif not rest.strip():
                out.append(f"{k}: {model!r} names no model after {provider}/")
    return out


# Model names no Anthropic model has: OpenAI's families, and the open models a local
# server (Ollama, llama.cpp, vLLM, LM Studio) serves. Anthropic's all start "claude".
_OPENAI_NAMES = re.compile(r"^(gpt-|chatgpt-|o[1-9](-|$)|text-|davinci|babbage|codex-)",
                           re.IGNORECASE)
_OPEN_NAMES = re.compile(r"^(qwen|llama|gemma|mistral|mixtral|phi|deepseek|smollm|granite|"
                         r"olmo|command-r|nemotron|falcon|yi-|internlm)|:|\.gguf$", re.IGNORECASE)


def vendor_of(bare: str) -> str | None:
    """"openai" or "local" for a bare model name that is recognisably not Anthropic's
    (`gpt-5-mini`, `qwen3:8b`); None for any other (a proxy's own names pass)."""
    if _OPENAI_NAMES.match(bare):
        return "openai"
    if _OPEN_NAMES.search(bare):
        return "local"
    return None


def _provider_for(vendor: str, data: dict) -> str:
    """The provider a name of `vendor` most likely meant: openai, or the one configured
    provider table on this machine (else the name a local one is given in the docs)."""
    if vendor == "openai":
        return "openai"
    from agent.config.providers import BUILTIN

    section = data.get("providers")
    tables = [n for n in (section if isinstance(section, dict) else {}) if n not in BUILTIN]
    return tables[0] if len(tables) == 1 else "local"


_WARNED: set[str] = set()


def warn_unknown(data: dict, where: str) -> None:
    """Say once per process, on stderr, which keys of agent.toml are ignored."""
    import sys

    for w in unknown(data):
        if w not in _WARNED:
            _WARNED.add(w)
            print(f"warning: {where}: {w}; ignored", file=sys.stderr)
