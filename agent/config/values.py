"""The kinds of value agent.toml holds beyond what TOML says (Telegram user ids, http(s)
addresses, durations, sizes) and the error a bad setting raises (pydantic's errors are
said in agent.toml's words by agent.schemas.in_words)."""

from __future__ import annotations

import re

from agent.errors import UserError


class SettingsError(UserError):
    pass


def user_ids_problem(value) -> str | None:
    """Telegram user ids: whole numbers, written bare or in quotes."""
    if not isinstance(value, list):
        return f"must be a list of Telegram user ids, as in [123456789], not {value!r}"
    for v in value:
        if isinstance(v, bool) or not (isinstance(v, int) or
                                       (isinstance(v, str) and v.strip().isdigit())):
            return (f"must be a list of Telegram user ids (whole numbers, as in [123456789]); "
                    f"{v!r} is not one")
    return None


def user_ids(values) -> list[int]:
    """allow_from as numbers (checked by user_ids_problem)."""
    return [int(str(v).strip()) for v in values]


def http_url_problem(value) -> str | None:
    if not isinstance(value, str) or not re.match(r"^https?://[^/\s]+", value):
        return f"must be an http(s) address such as \"https://api.telegram.org\", not {value!r}"
    return None


def duration_problem(value) -> str | None:
    """A duration as people write it (90s, 5m, 2h, 1d)."""
    from agent.schedule import ScheduleError, parse_duration
    if not isinstance(value, str):
        return f"must be a duration in quotes, such as \"5m\", not {value!r}"
    try:
        parse_duration(value)
    except ScheduleError as e:
        return f"must be a duration such as \"5m\" or \"1h\" ({e})"
    return None


_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes of a size as people write it: "1G", "512M", "100 MB", "1 GiB" (K, M, G
    and T count in 1024s, as ulimit and tmpfs do); SettingsError when it is none."""
    m = _SIZE.match(str(text)) if isinstance(text, str) else None
    if m is None or (not m.group(2) and not str(text).strip().upper().endswith("B")):
        raise SettingsError(f"{text!r} is not a size: write it in quotes with a unit, "
                            f"as \"1G\", \"512M\" or \"100 MB\"")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def show_size(n: int) -> str:
    """A size in the unit it is a whole number of: 1 GiB, 100 MiB, 1536 KiB."""
    for unit, name in ((1024 ** 3, "GiB"), (1024 ** 2, "MiB"), (1024, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} bytes"


def size_problem(value) -> str | None:
    try:
        n = parse_size(value)
    except SettingsError as e:
        return f"must be a size such as \"1G\" or \"100M\" ({e})"
    return None if n > 0 else "must be more than 0 bytes"
