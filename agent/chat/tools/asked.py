"""Whether the person's own words in a turn asked for a schedule: the one exception to
"a job the model makes waits for the person's approval" (the cron tools).

A page the model read, a file, a tool's result or an MCP server may tell the model to
schedule something; only what the person typed in the turn can ask for it. The words
count when they hold both

- a word asking for a time or a repeat, in English, German, French, Spanish, Italian,
  Portuguese or Dutch (remind, every, daily, tomorrow, erinnere, jeden, rappelle, cada,
  ogni, lembre, elke, ...), and
- the schedule itself: its interval as a number and its unit ("every 10 minutes",
  "10m", "alle 10 Minuten" for 600 seconds; "hourly" or "every day" where the number
  is one), its time of day ("at 15:30", "3:30 pm", "15h30", "at 9", "um 9 Uhr" for
  09:00; "at 3 pm" is never 03:00), or how far away it is ("in 20 minutes").

A miss costs one `agent cron approve ID`; a match the person did not mean costs a job
they asked for in other numbers, so the rule errs towards holding. Pure: text in,
a yes or no out.
"""

from __future__ import annotations

import re
from datetime import datetime

from agent.schedule import Schedule, zone

_INTENT = re.compile(
    r"\b(?:remind|reminder|schedule|every|each|daily|weekly|hourly|monthly|tomorrow|"
    r"tonight|o'?clock|alarm|timer|wake|"
    r"erinner\w*|jede[nrs]?|täglich|stündlich|wöchentlich|morgen|uhr|wecke\w*|"
    r"rappel\w*|chaque|tou(?:s|tes) les|demain|quotidien\w*|"
    r"recu[eé]rda\w*|recordatorio|cada|tod[oa]s? l[oa]s|mañana|diari\w*|"
    r"ricorda\w*|promemoria|ogni|domani|"
    r"lembr\w*|lembrete|amanhã|"
    r"herinner\w*|elke|iedere|dagelijks)\b"
    r"|\d{1,2}[:h.]\d{2}\b|\d\s*[ap]\.?m\b|\b(?:in|en|dans|tra|fra|over|em)\s+\d+\s*\w",
    re.IGNORECASE)
# How each unit is written after its number ("10 min", "2h", "3 Tage", "5 minutos").
_UNIT_WORDS = {
    1: r"s|secs?|seconds?|sekunden?|secondes?|segundos?|secondi|seconden",
    60: r"m|mins?|minutes?|minuten?|minutos?|minuti|minuut",
    3600: r"h|hrs?|hours?|stunden?|std|heures?|horas?|ore|ora|uur",
    86400: r"d|days?|tagen?|tage|jours?|d[ií]as?|giorni|giorno|dagen|dag",
    604800: r"w|weeks?|wochen?|semaines?|semanas?|settimane?|weken"}
# The unit a bare word names, for an interval of one of them ("hourly", "every day").
_ONE = {60: r"minute|minütlich|minuto|minuut",
        3600: r"hour|hourly|stunde|stündlich|heure|hora|ora|uur",
        86400: r"day|daily|tag|täglich|jour|quotidien|día|dia|diario|giorno|dag|dagelijks",
        604800: r"week|weekly|woche|wöchentlich|semaine|semana|settimana"}
_AT = r"(?:at|um|à|a las|a la|alle|om|às|ore)"
_SUFFIX = r"(?:h\b|uhr\b|o'?clock|heures?\b|uur\b)"


def asked_for(text: str, schedule: Schedule, now: datetime) -> bool:
    """Whether `text` (the person's own words in the turn) asks for `schedule`."""
    if not text or not _INTENT.search(text):
        return False
    if schedule.kind == "every":
        return _interval(text, schedule.every_seconds or 0)
    if schedule.kind == "at" and schedule.at is not None:
        local = schedule.at.astimezone(zone(schedule.tz))
        ahead = (schedule.at - now).total_seconds()
        return _clock(text, local.hour, local.minute) or _within(text, ahead)
    if schedule.kind == "cron" and schedule.expr:
        return _cron(text, schedule.expr)
    return False


def _said(text: str, n: int, unit: int) -> bool:
    """Whether `text` says `n` of `unit` ("10 minutes", "10m", "10 Minuten")."""
    return re.search(rf"(?<!\d){n}\s*(?:{_UNIT_WORDS[unit]})\b", text, re.IGNORECASE) is not None


def _interval(text: str, seconds: int) -> bool:
    for unit in _UNIT_WORDS:
        if seconds <= 0 or seconds % unit:
            continue
        n = seconds // unit
        if _said(text, n, unit):
            return True
        if n == 1 and unit in _ONE and re.search(rf"\b(?:{_ONE[unit]})", text, re.IGNORECASE):
            return True
    return False


def _clock(text: str, hour: int, minute: int) -> bool:
    """Whether `text` names this time of day: 15:30, 3:30 pm, 15h30, 9 am, at 9, um 9 Uhr."""
    h12 = hour % 12 or 12
    half, other = ("a", "p") if hour < 12 else ("p", "a")
    wrong = rf"(?!\s*{other}\.?m\b)"          # "at 3 pm" is not 03:00
    forms = [rf"(?<!\d)0?{hour}\s*[:.h]\s*{minute:02d}(?!\d){wrong}",
             rf"(?<!\d){h12}(?:[:.]{minute:02d})?\s*{half}\.?m\b"]
    if minute == 0:
        forms += [rf"(?<!\d)0?(?:{hour}|{h12})\s*{_SUFFIX}",
                  rf"\b{_AT}\s+0?(?:{hour}|{h12})(?![\d:.]){wrong}"]
    return any(re.search(f, text, re.IGNORECASE) for f in forms)


def _within(text: str, ahead: float) -> bool:
    """"in 20 minutes": a number of seconds, minutes, hours or days that far away."""
    slack = {1: 5, 60: 90, 3600: 300, 86400: 3 * 3600}
    for unit, leeway in slack.items():
        n = round(ahead / unit)
        if n > 0 and abs(n * unit - ahead) <= leeway and _said(text, n, unit):
            return True
    return False


def _cron(text: str, expr: str) -> bool:
    fields = expr.split()
    if len(fields) != 5:
        word = {"@hourly": 3600, "@daily": 86400, "@midnight": 86400, "@weekly": 604800}
        return expr in word and _interval(text, word[expr])
    minute, hour = fields[0], fields[1]
    for f, unit in ((minute, 60), (hour, 3600)):
        step = f.split("/", 1)[1] if f.startswith("*/") else ""
        if step.isdigit():
            return _interval(text, int(step) * unit)
    hours = [int(h) for h in hour.split(",") if h.isdigit()] if hour != "*" else []
    minutes = [int(m) for m in minute.split(",") if m.isdigit()]
    if not hours:                  # every hour at a minute: "hourly", "every hour"
        return _interval(text, 3600)
    return all(_clock(text, h, m) for h in hours for m in (minutes or [0]))
