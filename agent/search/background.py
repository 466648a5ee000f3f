"""What "unrelated" is for a query and for a passage, measured on this machine.

A meaning-only result is shown by how much closer it is to the query than unrelated
texts are, never by an absolute cosine: the 4-bit engine gives a few hundredths more or
less on another CPU (コーヒー against "I drank far too much coffee": 0.825 here, 0.813
on another machine), and what counts as close moves with the query and the passage.
The reference is background.txt, everyday lines about nothing in particular (written
for this project), embedded by the same engine as what it is compared with:

- the query's level: its mean similarity to those lines as passages (a short query sits
  closer to everything);
- a passage's pull: its mean similarity to those lines as queries, less that of the
  lines themselves (a generic line, or a message read with the one before it, sits
  closer to every query: the "hubness" of embedding spaces; the correction is CSLS's,
  Conneau et al. 2018, with the background standing for the other side).

`lift` = similarity - level - pull, measured in the spread of the background's own
lifts for the query (a query whose unrelated passages scatter widely needs more). The vectors are made once per index (a few seconds
of the model), kept in it, and once per process.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

SOURCE = Path(__file__).with_name("background.txt")

_MEMO: dict[str, object] = {}          # "model|texts hash" -> float32 [n, dim]
_LOCK = threading.Lock()


def texts() -> list[str]:
    lines = SOURCE.read_text(encoding="utf-8").splitlines()
    return [s.strip() for s in lines if s.strip() and not s.startswith("#")]


def _key(model: str, got: list[str]) -> str:
    digest = hashlib.blake2b("\n".join(got).encode("utf-8"), digest_size=8).hexdigest()
    return f"{model}|{digest}"


class Background:
    """The background lines as passages and as queries (float32 rows, L2-normalised)."""

    def __init__(self, both):
        import numpy as np
        n = len(both) // 2
        self.passages, self.queries = both[:n], both[n:]
        # A typical unrelated passage's pull: the lines against each other, each line
        # left out of its own mean (as a query it is nearest to itself).
        sims = self.queries @ self.passages.T
        np.fill_diagonal(sims, np.nan)
        self.typical = float(np.nanmean(sims))
        self.own_pull = self.pull(self.passages)

    def spread(self, qvec, level: float) -> float:
        """How widely the lifts of unrelated passages spread for this query (their
        standard deviation): the unit a real match must stand out in."""
        return float((self.passages @ qvec - level - self.own_pull).std())

    def best(self, qvec, level: float, spread: float) -> float:
        """The highest lift any background line reaches for this query, in spreads: how
        close the best of these unrelated passages comes, measured, not assumed."""
        if spread <= 0:
            return 0.0
        return float((self.passages @ qvec - level - self.own_pull).max()) / spread

    def level(self, qvec) -> float:
        """The query's mean similarity to the background: "unrelated" for it."""
        return float((self.passages @ qvec).mean())

    def pull(self, pvecs):
        """How much closer than a typical unrelated passage each passage sits to any
        query (float32 [n])."""
        return (pvecs @ self.queries.T).mean(axis=1) - self.typical


def load(db, embedder) -> Background:
    """The background for this model: from this process, else from the index, else
    made by the model; kept in both."""
    import numpy as np
    got = texts()
    key = _key(embedder.name, got)
    with _LOCK:
        bg = _MEMO.get(key)
        if bg is None:
            both = _stored(db, key, embedder.dim, 2 * len(got))
            if both is None:
                both = np.concatenate([np.asarray(embedder.passages(got), np.float32),
                                       np.asarray(embedder.queries(got), np.float32)])
                _store(db, key, both)
            bg = _MEMO[key] = Background(both)
        elif not _has(db, key):         # another index of this process: kept there too
            _store(db, key, np.concatenate([bg.passages, bg.queries]))
        return bg


def _has(db, key: str) -> bool:
    try:
        return db.execute("SELECT 1 FROM vec_background WHERE key = ?", (key,)).fetchone() is not None
    except sqlite3.OperationalError:
        return False


_TABLE = "CREATE TABLE IF NOT EXISTS vec_background(key TEXT PRIMARY KEY, v BLOB NOT NULL)"


def _stored(db, key: str, dim: int, n: int):
    import numpy as np
    try:
        row = db.execute("SELECT v FROM vec_background WHERE key = ?", (key,)).fetchone()
    except sqlite3.OperationalError:        # no such table yet: an index made before it
        return None
    if row is None or len(row[0]) != n * dim * 4:
        return None
    return np.frombuffer(row[0], dtype="<f4").reshape(n, dim).copy()


def _store(db, key: str, m) -> None:
    """Keep the vectors in the index; an index another process holds, or a read-only
    one, only costs the next process the model's time again."""
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return
    try:
        db.execute(_TABLE)
        db.execute("DELETE FROM vec_background")
        db.execute("INSERT INTO vec_background(key, v) VALUES (?, ?)",
                   (key, m.astype("<f4").tobytes()))
        db.execute("COMMIT")
    except sqlite3.OperationalError:
        db.execute("ROLLBACK")
