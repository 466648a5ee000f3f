"""An approximate nearest-neighbour index over the document vectors, for a history too
long to scan at every search.

Below ANN_AT vectors a search compares the query with every vector (matrix.py: a
memory-mapped matrix, 13 ms at 100,000 rows). Past it, the vectors are also kept in
HNSW graphs (usearch: Malkov and Yashunin's hierarchical navigable small worlds), and a
search walks the graphs instead of scanning: at 1,000,000 vectors the scan read 1.5 GB
of page cache per search (1.83x the CPU of a search at 1,000), a graph walk touches a
few thousand rows.

Why usearch (measured in docs/benchmarks.md): a saved index is *viewed*, memory-mapped
as it lies on disk, so a new `agent search` process neither reads nor holds it (what
it touches is a few MB of pages), where hnswlib and voyager load the whole graph into
memory (1.6 GB at a million vectors, seconds to read, in every process), and faiss
maps only flat and inverted-list indexes, whose incremental upkeep needs a trained
quantizer. sqlite-vec cannot load here (matrix.py says why). usearch stores the
vectors as float16, which is what the index's `vec` table keeps anyway.

What a search process pays past ANN_AT (an `agent search` is a new process each time):
usearch's compiled extension, loaded alone (its package imports urllib and tqdm, a
fifth of a search: `_load_compiled`); the view of each segment, which in usearch passes
over every node of the file (7-11 ms a segment of LARGEST rows here: the part that still
follows the history, 4 segments at a million); and the walks, which touch a few thousand
rows of each segment (2-3 ms a segment, when the page cache holds it in large folios:
`_build` and `_cache_whole` see to that). Memory follows one segment's walk: its pages
are let go after each one.

The graphs are *segments* covering runs of `vec.seq`, each immutable once written
(a log-structured merge): the rows after the last segment are scanned as before; once
SEGMENT rows wait there, they become a segment; FANOUT segments of one size merge into
one FANOUT times larger (up to LARGEST), so a vector is re-inserted a few times in its
life and a search walks a few graphs, their number growing with the logarithm of the
history up to LARGEST and slowly after. A merge rebuilds from the live rows of `vec`,
so what was removed goes with it (and a segment that lost a tenth of its rows is
rebuilt alone). Memory while building follows the segment being built (LARGEST rows at
most), never the history.

On disk: `.agent/index.sqlite-ann/`, one file per segment and `segments.json` naming
them (written last, by rename: it is what a search believes, so a kill at any point
leaves the old set or the new one, never half); files it does not name are removed by
the next upkeep. All of it is derived: deleting it costs the next upkeep a rebuild, and
searches meanwhile scan.
"""

from __future__ import annotations

import base64
import contextlib
import json
import mmap
import os
import threading
from dataclasses import dataclass
from typing import Any

ANN_AT = 65_536               # vectors from which the graphs are kept and walked
SEGMENT = 4_096               # rows after the last segment that make a new one
FANOUT = 4                    # segments of one size that merge into one
LARGEST = 262_144             # rows a merge makes at most (memory while building: ~250 MB)
REBUILD_GONE = 0.1            # share of a segment's rows removed that rebuilds it
# HNSW's settings (usearch's names). Measured on 20,000 clustered 384-d vectors, one
# thread: expansion_add 32 / 64 / 128 took 0.12 / 0.33 / 0.56 ms a vector and found
# 0.87 / 0.91 / 0.93 of the exact top 50 at expansion_search 128; a search asks for
# EXPANSION_SEARCH candidates or four times what it wants, whichever is more.
CONNECTIVITY = 16
EXPANSION_ADD = 64
EXPANSION_SEARCH = 256
COPY_BLOCK = 16 << 20         # bytes a write when a saved segment is written again (_build)
FORMAT = "1"
MANIFEST = "segments.json"
LOCK = ".building"


def folder_of(key: str) -> str:
    """The segments' folder beside the index at `key` (its path)."""
    return f"{key}-ann"


@contextlib.contextmanager
def building(key: str):
    """Whether this process may build the segments now (a lock on a file of the folder,
    held for the block; False when another process holds it)."""
    import fcntl
    os.makedirs(folder_of(key), exist_ok=True)
    fd = os.open(os.path.join(folder_of(key), LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def available() -> bool:
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Segment:
    file: str                 # name inside the folder
    lo: int                   # the seqs it covers: lo < seq <= hi
    hi: int
    n: int                    # rows it holds
    total: Any                # float64 [dim]: the sum of its vectors (for the mean similarity)

    def to_json(self) -> dict:
        import numpy as np
        raw = np.asarray(self.total, "<f8").tobytes()
        return {"file": self.file, "lo": self.lo, "hi": self.hi, "n": self.n,
                "total": base64.b64encode(raw).decode("ascii")}


@dataclass
class Segments:
    epoch: str
    model: str
    dim: int
    items: list[Segment]

    @property
    def hi(self) -> int:
        """The newest seq the segments cover (0: none)."""
        return self.items[-1].hi if self.items else 0


def read(key: str, epoch: str, model: str | None, dim: int) -> Segments | None:
    """The segments written for this set of vectors, or None (none, or for another;
    `model` None: whichever model its manifest names)."""
    import numpy as np
    path = os.path.join(folder_of(key), MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            h = json.load(f)
    except (OSError, ValueError):
        return None
    if (not isinstance(h, dict) or h.get("format") != FORMAT or h.get("epoch") != epoch
            or (model is not None and h.get("model") != model) or h.get("dim") != dim
            or not isinstance(h.get("segments"), list)):
        return None
    items = []
    try:
        for s in h["segments"]:
            total = np.frombuffer(base64.b64decode(s["total"]), "<f8")
            if total.shape != (dim,) or not all(isinstance(s[k], int) for k in ("lo", "hi", "n")):
                return None
            if (not isinstance(s["file"], str) or "/" in s["file"] or s["file"].startswith(".")
                    or bool(s["file"]) != (s["n"] > 0)):
                return None
            items.append(Segment(s["file"], s["lo"], s["hi"], s["n"], total))
    except (KeyError, TypeError, ValueError):
        return None
    if any(a.hi != b.lo for a, b in zip(items, items[1:])):
        return None             # runs that do not follow one another: not ours
    return Segments(epoch, str(h.get("model")), dim, items)


# ---- searching ------------------------------------------------------------------------

_VIEWS: dict[str, tuple[tuple, Any, Any]] = {}    # path -> (its stat, the index, its mapping)
_VIEWING = threading.Lock()
_LIB: Any = None              # usearch's compiled module, once loaded (_compiled)


def _compiled() -> Any:
    """usearch's compiled extension (`usearch.compiled`, the module its `Index` wraps),
    loaded once per process."""
    global _LIB
    if _LIB is None:
        import sys
        _LIB = sys.modules.get("usearch.compiled") or _load_compiled()
    return _LIB


def _load_compiled() -> Any:
    # A search walks the segments with the extension's own Index, loaded by itself:
    # importing anything under the `usearch` package runs usearch/__init__.py, which
    # imports urllib.request (for a downloader of prebuilt binaries), and usearch/index.py
    # adds tqdm (progress bars): 50-60 ms of CPU of an `agent search` process that costs
    # about 240 ms at 1,000 messages, against 4-8 ms for the extension alone (measured
    # with resource.getrusage around each import, numpy already loaded). The extension
    # resolves NumKong's symbols when it loads, so NumKong's library is loaded first with
    # RTLD_GLOBAL, as usearch/__init__.py does. It is registered as `usearch.compiled`,
    # so a later `import usearch.index` (building a segment) uses this same module. Any
    # other layout (another usearch release): the package is imported the ordinary way.
    import ctypes
    import importlib
    import importlib.machinery
    import importlib.util
    import sys
    try:
        package = importlib.util.find_spec("usearch")
        numkong = importlib.import_module("numkong._numkong").__file__
        if package is None or not package.submodule_search_locations or not numkong:
            raise ImportError("usearch or NumKong laid out otherwise")
        ctypes.CDLL(numkong, mode=ctypes.RTLD_GLOBAL)
        for folder in package.submodule_search_locations:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(folder, "compiled" + suffix)
                if not os.path.isfile(path):
                    continue
                spec = importlib.util.spec_from_file_location("usearch.compiled", path)
                if spec is None or spec.loader is None:
                    continue
                module = importlib.util.module_from_spec(spec)
                sys.modules["usearch.compiled"] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop("usearch.compiled", None)
                    raise
                return module
    except (ImportError, OSError):
        pass
    return importlib.import_module("usearch.compiled")


def _view(path: str, dim: int):
    """The segment at `path` as (index, mapping), memory-mapped by this module (kept for
    the process), or None. The mapping is ours so that a search can let its pages go:
    a walk reads a few thousand rows, each on a page of its own, and the pages a mapped
    file's reader touched count as the process's memory until let go (48 MB for one
    search of 100,000 vectors, 4 MB after)."""
    try:
        lib = _compiled()
        st = os.stat(path)
    except (ImportError, OSError):
        return None
    sig = (st.st_ino, st.st_size, st.st_mtime_ns)
    with _VIEWING:
        got = _VIEWS.get(path)
        if got is not None and got[0] == sig:
            return got[1], got[2]
        try:
            with open(path, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
                _cache_whole(f, mapped)
            # What usearch.index.Index.restore(view=True) makes, without its wrapper.
            # No key lookups: building their table reads every row of the file.
            index = lib.Index(ndim=dim, dtype=lib.ScalarKind.F16, metric_kind=lib.MetricKind.IP,
                              metric_signature=lib.MetricSignature.ArrayArraySize,
                              enable_key_lookups=False)
            index.view_index_from_buffer(memoryview(mapped))
        except (RuntimeError, ValueError, OSError):
            return None
        _VIEWS[path] = (sig, index, mapped)
        return index, mapped


def _cache_whole(f, mapped) -> None:
    """Read the segment through the page cache in large reads when some of it is not in
    memory (after a reboot, or evicted): a walk's faults would bring it back in pages of
    4 KB, and every later search's walk would pay three times the kernel's time for it
    (_build says why); read in large reads, it is held in large folios, as when built.
    A walk of a segment not in memory reads most of it anyway (each fault reads the
    128 KB around it), here in order."""
    import ctypes
    import sys
    if not sys.platform.startswith("linux"):
        return
    import numpy as np
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        pages = (len(mapped) + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        held = (ctypes.c_ubyte * pages)()
        view = np.frombuffer(mapped, np.uint8)
        failed = libc.mincore(view.ctypes.data, len(mapped), held)
        del view
    except (AttributeError, OSError, ValueError):
        return
    if failed or (np.frombuffer(bytes(held), np.uint8) & 1).all():   # all in memory, or unknown
        return
    buf = bytearray(COPY_BLOCK)
    f.seek(0)
    while f.readinto(buf):
        pass


def search(key: str, segs: Segments, q, k: int) -> tuple[list[tuple[int, float]], bool]:
    """The k nearest (seq, similarity) of every segment together, and whether every
    segment could be read."""
    import numpy as np
    out: list[tuple[int, float]] = []
    want = max(EXPANSION_SEARCH, 4 * k)
    whole = True
    query = np.ascontiguousarray(q, np.float32).reshape(1, -1)
    for s in segs.items:
        if not s.file:
            continue
        viewed = _view(os.path.join(folder_of(key), s.file), segs.dim)
        if viewed is None or viewed[0].ndim != segs.dim:
            whole = False           # found by words until the next upkeep builds it again
            continue
        index, mapped = viewed
        index.expansion_search = want
        # One query on this thread (0 would start a pool of threads for it).
        keys, distances, counts, _, _ = index.search_many(query, count=min(k, len(index)),
                                                          exact=False, threads=1)
        n = int(counts[0])
        out.extend((int(a), 1.0 - float(d)) for a, d in zip(keys[0][:n], distances[0][:n]))
        if hasattr(mapped, "madvise"):
            mapped.madvise(mmap.MADV_DONTNEED)     # read again from the page cache if needed
    out.sort(key=lambda x: -x[1])
    return out, whole


def total(segs: Segments):
    """The sum of the segments' vectors (float64 [dim])."""
    import numpy as np
    acc = np.zeros(segs.dim, np.float64)
    for s in segs.items:
        acc += s.total
    return acc


# ---- upkeep ---------------------------------------------------------------------------


def _write_manifest(folder: str, segs: Segments) -> None:
    tmp = os.path.join(folder, f".{MANIFEST}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"format": FORMAT, "epoch": segs.epoch, "model": segs.model, "dim": segs.dim,
                   "segments": [s.to_json() for s in segs.items]}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(folder, MANIFEST))


def _build(db, folder: str, lo: int, hi: int, dim: int) -> Segment:
    """A segment of the live rows of `vec` with lo < seq <= hi, written to its file
    (none when no row is left there: an empty segment keeps the runs contiguous)."""
    import numpy as np
    from usearch.index import Index

    index = Index(ndim=dim, metric="ip", dtype="f16", connectivity=CONNECTIVITY,
                  expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)
    acc = np.zeros(dim, np.float64)
    n, last = 0, lo
    while True:
        rows = db.execute("SELECT seq, v FROM vec WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT 8192",
                          (last, hi)).fetchall()
        if not rows:
            break
        m = np.frombuffer(b"".join(r[1] for r in rows), np.float16).reshape(len(rows), dim)
        index.add(np.array([r[0] for r in rows], np.uint64), m, threads=_threads())
        acc += m.astype(np.float64).sum(axis=0)
        n += len(rows)
        last = rows[-1][0]
    if not n:
        return Segment("", lo, hi, 0, acc)
    name = f"{lo}-{hi}-{os.urandom(4).hex()}.usearch"
    raw, tmp = os.path.join(folder, f".{name}.raw.tmp"), os.path.join(folder, f".{name}.tmp")
    index.save(raw)
    del index
    # Written again in large writes: usearch saves in writes of a few KB, and the page
    # cache then holds the file in pages of 4 KB; written in large writes, it holds it
    # in large folios (ext4, xfs and others on Linux 6.x), and a search's walk, which
    # maps a page around each row it reads, takes a third of the page faults and of the
    # kernel's time (a 262,144-row segment: 3,700 -> 1,600 faults, 7-12 -> 2-3 ms of
    # system CPU per view and walk). What reaches the cache later by a search's faults
    # (after a reboot) is in small pages again until the segment is next rebuilt.
    try:
        with open(raw, "rb") as src, open(tmp, "wb") as dst:
            while block := src.read(COPY_BLOCK):
                dst.write(block)
            dst.flush()
            os.fsync(dst.fileno())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(raw)
    os.replace(tmp, os.path.join(folder, name))
    return Segment(name, lo, hi, n, acc)


def _threads() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, 4))


def _tier(n: int) -> int:
    t, size = 0, SEGMENT
    while size * FANOUT <= n:
        size *= FANOUT
        t += 1
    return t


def _plan(segs: list[Segment], gone: dict[int, int]) -> tuple[int, int] | None:
    """The next step of upkeep: (first, last) segment positions to rebuild as one, with
    last exclusive; None when none is due."""
    for i, s in enumerate(segs):          # a segment that lost a tenth of its rows
        if s.n and gone.get(i, 0) >= REBUILD_GONE * s.n:
            return i, i + 1
    # FANOUT neighbours of one tier (the newest first), unless that passes LARGEST.
    for i in range(len(segs) - FANOUT, -1, -1):
        run = segs[i:i + FANOUT]
        if (len({_tier(s.n) for s in run}) == 1 and sum(s.n for s in run) <= LARGEST
                and all(s.n < LARGEST for s in run)):
            return i, i + FANOUT
    return None


def maintain(db, key: str, epoch: str, model: str, dim: int, progress=None) -> int:
    """Bring the segments up to date with `vec` (the caller holds `building`): a new
    segment of the rows waiting after the last one once SEGMENT wait, and the merges
    due. Each read of `vec` is a transaction of its own: rows added meanwhile wait for
    the next segment, rows removed are left out of answers by the search. Returns how many rows went into graphs. Nothing happens below
    ANN_AT vectors, or without usearch."""
    import glob

    if not available():
        return 0
    live = db.execute("SELECT count(*) FROM vec").fetchone()[0]
    folder = folder_of(key)
    if live < ANN_AT:
        # A history that shrank (or never grew): the scan serves; the graphs go.
        for path in glob.glob(os.path.join(glob.escape(folder), "*")):
            with contextlib.suppress(OSError):
                os.unlink(path)
        return 0
    segs = read(key, epoch, model, dim) or Segments(epoch, model, dim, [])
    named = {s.file for s in segs.items} | {MANIFEST, LOCK}
    for path in glob.glob(os.path.join(glob.escape(folder), "*")) + glob.glob(
            os.path.join(glob.escape(folder), ".*")):
        if os.path.basename(path) not in named:       # a kill's leftovers, or replaced
            with contextlib.suppress(OSError):
                os.unlink(path)
    built = 0
    while True:
        waiting = db.execute("SELECT count(*) FROM vec WHERE seq > ?", (segs.hi,)).fetchone()[0]
        if waiting >= SEGMENT:
            # At most LARGEST rows a segment: memory while building stays bounded.
            upto = db.execute("SELECT seq FROM vec WHERE seq > ? ORDER BY seq LIMIT 1 OFFSET ?",
                              (segs.hi, LARGEST - 1)).fetchone()
            hi = upto[0] if upto else db.execute("SELECT max(seq) FROM vec").fetchone()[0]
            made = _build(db, folder, segs.hi, hi, dim)
            segs.items.append(made)
            built += made.n
            _write_manifest(folder, segs)
            if progress is not None:
                progress(built)
            continue
        # A file gone from the folder counts as all its rows removed: built again.
        gone = {i: s.n if s.file and not os.path.exists(os.path.join(folder, s.file)) else
                s.n - db.execute("SELECT count(*) FROM vec WHERE seq > ? AND seq <= ?",
                                 (s.lo, s.hi)).fetchone()[0]
                for i, s in enumerate(segs.items)}
        step = _plan(segs.items, gone)
        if step is None:
            break
        a, b = step
        old = segs.items[a:b]
        made = _build(db, folder, old[0].lo, old[-1].hi, dim)
        segs.items[a:b] = [made]
        built += made.n
        _write_manifest(folder, segs)
        for s in old:
            if s.file:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, s.file))
        if progress is not None:
            progress(built)
    return built


def remove(key: str) -> None:
    """Delete the segments (they are derived: the next upkeep makes them again)."""
    import shutil
    shutil.rmtree(folder_of(key), ignore_errors=True)
