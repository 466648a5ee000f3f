"""Word search whose cost is bounded by what it returns, not by how many messages hold a
word (issue 36): counted in SQLite virtual-machine steps, which do not depend on the
machine, never in seconds."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from agent.search import index, ranking
from agent.stores import sessions

KEY = "cli/long"


def grow(vault, n: int, start: int = 0) -> None:
    """n more messages, each holding 'garden' and 'trip'; one in 500 also 'kyoto'."""
    t0 = datetime(2016, 1, 1, tzinfo=timezone.utc)
    by_file: dict[str, list[str]] = {}
    for i in range(start, start + n):
        ts = t0 + timedelta(minutes=12 * i)
        extra = " and kyoto" if i % 500 == 7 else ""
        by_file.setdefault(sessions.month_file(KEY, ts), []).append(sessions.dumps(
            {"id": f"m{i}", "ts": ts.isoformat(), "role": "user", "turn": i + 1,
             "content": f"message {i} about the garden and the long trip{extra}"}))
    for rel, lines in by_file.items():
        path = vault.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write("\n".join(lines) + "\n")
    vault.git("add", "-A")
    vault.git("commit", "-qm", f"{n} messages")


def steps(vault, query: str, monkeypatch) -> tuple[int, list]:
    """(SQLite VM steps / 100, hits) of one word search, the index already up to date."""
    import contextlib

    from agent.search import query as search_query

    index.search(vault, query, 10, mode="words")          # brings the index up to date
    count = [0]

    def tick():
        count[0] += 1
        return 0
    real = search_query.open_index

    @contextlib.contextmanager
    def counted(*a, **k):
        with real(*a, **k) as db:
            db.set_progress_handler(tick, 100)
            try:
                yield db
            finally:
                db.set_progress_handler(None, 0)
    with monkeypatch.context() as m:
        m.setattr(search_query, "open_index", counted)
        hits = index.search(vault, query, 10, mode="words")
    return count[0], hits


@pytest.fixture
def small_budget(monkeypatch):
    monkeypatch.setattr(ranking, "POSTINGS_BUDGET", 300)
    monkeypatch.setenv("AGENT_EMBED", "off")


def test_a_word_in_every_message_costs_the_same_at_four_times_the_history(vault, small_budget,
                                                                         monkeypatch):
    grow(vault, 1000)
    small, hits = steps(vault, "garden trip", monkeypatch)
    assert len(hits) == 10 and all("garden" in h.text for h in hits)
    grow(vault, 3000, start=1000)
    large, hits = steps(vault, "garden trip", monkeypatch)
    assert len(hits) == 10
    # Recent messages holding the words, as a person expects of a common word.
    assert all(int(h.text.split()[1]) >= 3800 for h in hits), [h.text for h in hits]
    # Bounded by what it returns: four times the messages, not four times the work.
    assert large < small * 1.5, (small, large)


def test_a_rare_word_beside_common_ones_is_still_found_anywhere_in_history(vault, small_budget,
                                                                          monkeypatch):
    grow(vault, 4000)
    _, hits = steps(vault, "kyoto garden", monkeypatch)
    kyoto = [h for h in hits if "kyoto" in h.text]
    # message 7 (the oldest holding kyoto) is found although 'garden' is in every message
    assert kyoto and any(h.text.startswith("message 7 ") for h in kyoto), [h.text for h in hits]
