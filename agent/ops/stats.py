"""Memory health (`agent stats`, the web page's Health view, serve's nightly line): per
day and in total, the facts in memory, what the dream proposed and what became of it,
and the tokens chat, compaction and the dream spent, with an estimated cost.

Everything comes from history as the commits tell it, read in one `git log` (whatever
the history's length) and one `git cat-file --batch` for the memory files as each day
left them:

- facts: the bullets of MEMORY.md and USER.md at the day's last commit on `main`'s
  first-parent line (what the vault held, not a side branch a sync merged);
- proposals made: a dream commit's `Proposed:` trailer (edits that waited for review), and
  the proposals a chat turn held for review under `review = "all"` (from the ledger);
  accepted and rejected: a review commit's `Accepted:` and `Rejected:` trailers; stale:
  proposals still waiting whose line changed since (agent review shows them STALE),
  counted on the day they were made; dropped as duplicates: the `Dropped-duplicates:`
  trailer of a dream commit; direct: the dream's edits that landed without review, its
  `Facts-added:`, `Facts-updated:` and `Facts-removed:` trailers (a dream commit of a
  version before these trailers tells both counts in its subject, which is read then);
- tokens: every `Tokens:` trailer, by the commit's kind (a dream; archive: compaction;
  any other: chat, cron, heartbeats and sub-agents included), priced by its `Model:`
  (agent/prices.py, with agent.toml's `[prices]`); a dream sent as a batch at half
  price; a model that answers on this machine costs nothing; a model without a price
  leaves its tokens counted and the cost unknown.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime, tzinfo
from typing import TYPE_CHECKING, Any

from agent.prices import Price, lookup, overrides
from agent.stores.memory import MEMORY_FILES, count_facts
from agent.vault import fulllog
from agent.vault.change import (BATCH, DUPLICATES, FACTS_ADDED, FACTS_REMOVED, FACTS_UPDATED,
                                MODEL, PROPOSED, RUN, TOKENS, read_tokens)
from agent.vault.fulllog import Commit

if TYPE_CHECKING:
    from agent.config import Settings
    from agent.vault.repo import Vault

PARTS = ("chat", "compaction", "dream")
ACCEPTED, REJECTED = "Accepted", "Rejected"   # written by a review (agent/ops/review.py)
USAGE = ("input_tokens", "output_tokens", "cache_read_input_tokens",
         "cache_creation_input_tokens")
_FACTS = (FACTS_ADDED, FACTS_UPDATED, FACTS_REMOVED)
_KEYS = (MODEL, TOKENS, BATCH, RUN, DUPLICATES, ACCEPTED, REJECTED, *_FACTS, PROPOSED)
# How a dream commit of a version before the trailers told its edits: in its subject.
_DIRECT = re.compile(r"^\+(\d+) facts?, (\d+) updated, (\d+) removed")
_PROPOSED = re.compile(r", (\d+) proposed \(")


def usd(value: float) -> float | None:
    """A cost as JSON gives it: rounded, and None rather than a number JSON has not
    (prices are bounded, so only a bug could make one)."""
    return round(value, 6) if math.isfinite(value) else None


@dataclass
class Part:
    """The tokens of chat, compaction or the dream, and what they cost."""
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE, 0))
    cost: float = 0.0
    unknown: set[str] = field(default_factory=set)    # models without a price

    def add(self, other: Part) -> None:
        for k in USAGE:
            self.tokens[k] += other.tokens[k]
        self.cost += other.cost
        self.unknown |= other.unknown

    def to_json(self) -> dict[str, Any]:
        t = self.tokens
        return {"input": t["input_tokens"], "output": t["output_tokens"],
                "cache_read": t["cache_read_input_tokens"],
                "cache_write": t["cache_creation_input_tokens"],
                "cost": None if self.unknown else usd(self.cost),
                "cost_known": usd(self.cost),
                "unknown_models": sorted(self.unknown)}


@dataclass
class Day:
    """One day's health, or the total of several (day "total")."""
    day: str
    facts: int = 0
    made: int = 0
    accepted: int = 0
    rejected: int = 0
    stale: int = 0
    dropped: int = 0
    direct: int = 0
    parts: dict[str, Part] = field(default_factory=lambda: {p: Part() for p in PARTS})

    @property
    def accept_rate(self) -> float | None:
        """Accepted of the proposals decided in review; None when none was."""
        decided = self.accepted + self.rejected
        return self.accepted / decided if decided else None

    @property
    def cost(self) -> float | None:
        """Estimated USD of every part; None when a model had no price."""
        if any(p.unknown for p in self.parts.values()):
            return None
        return sum(p.cost for p in self.parts.values())

    def add(self, other: Day) -> None:
        for k in ("made", "accepted", "rejected", "stale", "dropped", "direct"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        for p in PARTS:
            self.parts[p].add(other.parts[p])

    def to_json(self) -> dict[str, Any]:
        rate = self.accept_rate
        cost = self.cost
        return {"day": self.day, "facts": self.facts,
                "proposals": {"made": self.made, "accepted": self.accepted,
                              "rejected": self.rejected, "stale": self.stale,
                              "dropped_duplicates": self.dropped,
                              "accept_rate": None if rate is None else round(rate, 4)},
                "direct_edits": self.direct,
                "tokens": {p: self.parts[p].to_json() for p in PARTS},
                "cost": None if cost is None else usd(cost)}


@dataclass
class Stats:
    days: list[Day]
    total: Day
    since: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"since": self.since, "days": [d.to_json() for d in self.days],
                "total": self.total.to_json()}


def _numbers(value: str | None) -> int:
    """How many numbers a trailer such as `Accepted: 1, 3` lists."""
    return len([x for x in (value or "").split(",") if x.strip()])


class Pricing:
    """Which price each model has (cached), and whether it answers on this machine."""

    def __init__(self, settings: Settings) -> None:
        from agent.llm.spec import specs

        self.table = overrides(settings.raw.get("prices"))
        self.specs = specs(settings)
        self._cache: dict[str, Price | None | bool] = {}

    def of(self, model: str) -> Price | None | bool:
        """The model's Price, None when unknown, False when it costs nothing (local)."""
        if model not in self._cache:
            from agent.llm.spec import split

            spec = self.specs.get(split(model)[0])
            self._cache[model] = False if spec is not None and spec.local else \
                lookup(model, self.table)
        return self._cache[model]


def _whole(value: str | None) -> int:
    return int(value) if value is not None and value.isdigit() else 0


def _dream_edits(c: Commit) -> tuple[int, int]:
    """(edits that landed, edits proposed) of a dream commit: its trailers, or the
    subject of one written before them."""
    if any(c.trailer(k) is not None for k in (*_FACTS, PROPOSED)):
        return sum(_whole(c.trailer(k)) for k in _FACTS), _whole(c.trailer(PROPOSED))
    m = _DIRECT.match(c.subject.partition(": ")[2])
    p = _PROPOSED.search(c.subject)
    return (sum(int(x) for x in m.groups()) if m else 0), (int(p.group(1)) if p else 0)


def _part(c: Commit, pricing: Pricing) -> tuple[str, Part] | None:
    value = c.trailer(TOKENS)
    if value is None:
        return None
    kind = c.kind
    name = "dream" if kind == "dream" else "compaction" if kind == "archive" else "chat"
    part = Part()
    usage = dict.fromkeys(USAGE, 0)
    for phase in read_tokens(value).values():
        for k in USAGE:
            usage[k] += phase.get(k, 0)
    part.tokens = usage
    model = c.trailer(MODEL) or ""
    price = pricing.of(model)
    if price is None:
        part.unknown.add(model or "(no model named)")
    elif price is not False:
        assert isinstance(price, Price)
        batch = name == "dream" and not (c.trailer(BATCH) or "none").startswith("none")
        part.cost = price.cost(usage, batch=batch)
    return name, part


def stats(vault: Vault, settings: Settings, now: datetime,
          since: date | datetime | None = None) -> Stats:
    """Health per day (the days with commits, from `since` on) and in total."""
    commits = fulllog.commits(vault, _KEYS, MEMORY_FILES)
    zone: tzinfo | None = now.tzinfo
    pricing = Pricing(settings)
    chain = fulllog.first_parents(commits)
    days: dict[str, Day] = {}
    state: dict[str, str] = {}
    ends: dict[str, dict[str, str]] = {}
    run_day: dict[str, str] = {}
    for c in commits:
        day = datetime.fromtimestamp(c.when, zone).date().isoformat()
        d = days.setdefault(day, Day(day))
        if c.sha in chain:
            state.update(c.blobs)
            ends[day] = dict(state)
        if c.kind == "dream":
            direct, made = _dream_edits(c)
            d.direct += direct
            d.made += made
            d.dropped += int(c.trailer(DUPLICATES) or 0) if (c.trailer(DUPLICATES) or "").isdigit() else 0
            if c.trailer(RUN):
                run_day[c.trailer(RUN) or ""] = day
        elif c.kind == "review":
            d.accepted += _numbers(c.trailer(ACCEPTED))
            d.rejected += _numbers(c.trailer(REJECTED))
        found = _part(c, pricing)
        if found:
            d.parts[found[0]].add(found[1])
    _chat_made(vault, days, run_day, zone)
    _stale(vault, days, run_day, now)
    texts = fulllog.blobs(vault, {b for files in ends.values() for b in files.values() if b})
    facts = {sha: count_facts(text) for sha, text in texts.items()}
    held: dict[str, str] = {}
    for day in sorted(days):
        held.update(ends.get(day, {}))
        days[day].facts = sum(facts.get(b, 0) for b in held.values() if b)
    first = _day(since, zone)
    shown = [days[k] for k in sorted(days) if first is None or k >= first]
    total = Day("total", facts=shown[-1].facts if shown else (days[max(days)].facts if days else 0))
    for d in shown:
        total.add(d)
    return Stats(shown, total, first)


def _day(since: date | datetime | None, zone: tzinfo | None) -> str | None:
    if since is None:
        return None
    if isinstance(since, datetime):
        return since.astimezone(zone).date().isoformat()
    return since.isoformat()


def _chat_made(vault: Vault, days: dict[str, Day], run_day: dict[str, str],
               zone: tzinfo | None) -> None:
    """Proposals a chat turn held for review (`[dream] review = "all"`, agent/stores/holds.py):
    no dream commit counts them, so they are read from the ledger, each on the day its
    record says it was made (a record counted once, however a union merge repeated it)."""
    from agent.stores import holds, ledger

    seen: set[tuple[str, int]] = set()
    for r in ledger.read(vault.root):
        run, n, at = r.get("run"), r.get("n"), r.get("at")
        if not (isinstance(run, str) and holds.is_chat(run) and isinstance(n, int)
                and isinstance(at, str) and r.get("status") == ledger.PROPOSED):
            continue
        if (run, n) in seen:
            continue
        seen.add((run, n))
        try:
            made = datetime.fromisoformat(at)
        except ValueError:
            continue               # a hand-mangled record: not counted, never a traceback
        day = (made.astimezone(zone) if made.tzinfo else made).date().isoformat()
        days.setdefault(day, Day(day)).made += 1
        run_day.setdefault(run, day)


def _stale(vault: Vault, days: dict[str, Day], run_day: dict[str, str], now: datetime) -> None:
    """Proposals still waiting whose line changed since: counted on their dream's day."""
    from agent.ops import review
    from agent.stores import ledger

    if not ledger.waiting(vault.root):
        return
    today = now.date().isoformat()
    for item in review.pending(vault):
        if item.stale:
            day = run_day.get(item.run, today)
            days.setdefault(day, Day(day)).stale += 1


# ---- what the front-ends show -------------------------------------------------------------


def money(usd: float | None) -> str:
    if usd is None:
        return "cost unknown"
    return f"${usd:,.2f}" if usd >= 1 or usd == 0 else f"${usd:.4f}"


def rate(r: float | None) -> str:
    return "-" if r is None else f"{r * 100:.0f}%"


def line(s: Stats) -> str:
    """The health in one line (serve's nightly message)."""
    t = s.total
    tokens = sum(sum(p.tokens.values()) for p in t.parts.values())
    since = f" since {s.since}" if s.since else ""
    return (f"Memory: {t.facts} fact{'s' * (t.facts != 1)}; {t.made} proposed, {t.accepted} accepted, "
            f"{t.rejected} rejected (accept rate {rate(t.accept_rate)}), {t.stale} stale, "
            f"{t.dropped} duplicates dropped{since}; {tokens:,} tokens, {money(t.cost)}"
            f"{'' if t.cost is None else ' (estimate)'}.")


def unknown_models(s: Stats) -> list[str]:
    return sorted({m for p in s.total.parts.values() for m in p.unknown})
