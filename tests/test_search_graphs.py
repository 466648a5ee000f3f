"""Meaning-search over a long history walks nearest-neighbour graphs (agent/search/ann.py)
instead of scanning every vector: the same hits as the scan, derived files that can be
deleted or left half-written by a kill, and nothing removed ever found again. The
thresholds are lowered here so a vault of a few dozen messages has several graphs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.search import ann, index
from helpers import write_import


def _embed_installed() -> bool:
    from agent.search import embed
    return embed.installed() and embed.wanted() != "off" and ann.available()


pytestmark = pytest.mark.skipif(not _embed_installed(),
                                reason="the embed extra (and usearch) is not installed")

TOPICS = ["the shed roof leaks after rain", "we booked the train to Kyoto for April",
          "my sister ran her first marathon", "the sourdough starter finally bubbled",
          "I drank far too much coffee this morning", "the kids built a treehouse",
          "our cat knocked the plant off the shelf", "the dentist moved my appointment"]
QUERIES = ["roof repair", "コーヒー", "trip to Japan", "bread baking", "running a race",
           "pets at home", "tooth doctor", "garden shed", "coffee", "Kyoto train", "marathon"]


@pytest.fixture
def small_graphs(monkeypatch):
    monkeypatch.setattr(ann, "ANN_AT", 16)
    monkeypatch.setattr(ann, "SEGMENT", 8)
    monkeypatch.setattr(ann, "LARGEST", 32)


def lines(prefix: str, n: int, day: int = 10) -> list[dict]:
    return [{"session": f"import/{prefix}", "id": f"{prefix}{i}", "role": "user",
             "ts": f"2026-10-{day:02d}T{i // 60:02d}:{i % 60:02d}:00+00:00",
             "content": f"{TOPICS[i % len(TOPICS)]} (note {i} of {prefix})"} for i in range(n)]


def segments(vault) -> list[dict]:
    path = index.db_path(vault).with_name("index.sqlite-ann") / "segments.json"
    return json.loads(path.read_text())["segments"]


def seen(vault) -> list:
    return [[(h.message_ids, h.why) for h in index.search(vault, q, limit=8)] for q in QUERIES]


def test_a_search_walks_the_graphs_and_finds_what_the_scan_finds(vault, run, tmp_path,
                                                                small_graphs):
    for part, day in (("a", 10), ("b", 11), ("c", 12)):
        r = run("import", str(write_import(tmp_path, lines(part, 24, day), name=f"{part}.jsonl")))
        assert r.exit_code == 0, r.output
    segs = segments(vault)
    # 72 vectors: runs of the history, contiguous, none larger than LARGEST.
    assert len(segs) >= 2 and sum(s["n"] for s in segs) >= 64
    assert all(a["hi"] == b["lo"] for a, b in zip(segs, segs[1:]))
    assert max(s["n"] for s in segs) <= 32
    walked = seen(vault)
    assert sum(bool(hits) for hits in walked) >= 5, walked
    assert any(why == "meaning" for hits in walked for _, why in hits)
    # Deleted, the graphs are derived: the scan answers the same, and the next upkeep
    # makes them again.
    shutil.rmtree(index.db_path(vault).with_name("index.sqlite-ann"))
    assert seen(vault) == walked
    r = run("import", str(write_import(tmp_path, lines("d", 8, 13), name="d.jsonl")))
    assert r.exit_code == 0, r.output
    assert sum(s["n"] for s in segments(vault)) >= 72


def test_what_a_kill_leaves_in_the_folder_is_ignored_and_cleared(vault, run, tmp_path,
                                                                 small_graphs):
    r = run("import", str(write_import(tmp_path, lines("a", 40))))
    assert r.exit_code == 0, r.output
    folder = index.db_path(vault).with_name("index.sqlite-ann")
    before = seen(vault)
    # A kill while a segment was written, and one while the list was: half files.
    (folder / ".0-99-dead.usearch.tmp").write_bytes(b"half a graph")
    (folder / "1-2-feed.usearch").write_bytes(b"not named by the list")
    (folder / ".segments.json.123.tmp").write_text("{")
    assert seen(vault) == before
    # A segment's file lost: its rows are not found by meaning until upkeep builds it
    # again, and nothing fails meanwhile.
    lost = segments(vault)[0]["file"]
    (folder / lost).unlink()
    assert all(isinstance(x, list) for x in seen(vault))
    r = run("import", str(write_import(tmp_path, lines("b", 8, 11), name="b.jsonl")))
    assert r.exit_code == 0, r.output
    names = {p.name for p in folder.iterdir()} - {ann.LOCK}
    assert names == {"segments.json", *(s["file"] for s in segments(vault))}
    assert set(map(str, before[0])) <= set(map(str, seen(vault)[0]))     # built again


def test_a_removed_message_is_never_found_by_meaning_again(vault, run, tmp_path, small_graphs):
    assert run("import", str(write_import(tmp_path, lines("a", 32)))).exit_code == 0
    coffee = lines("z", 1, 12)[0] | {"content": "Espresso, then a flat white: coffee all day."}
    assert run("import", str(write_import(tmp_path, [coffee], name="z.jsonl"))).exit_code == 0
    assert run("import", str(write_import(tmp_path, lines("b", 16, 11), name="b.jsonl"))).exit_code == 0
    assert segments(vault), "the coffee message is in a graph"
    ids = [m for h in index.search(vault, "コーヒー", limit=20) for m in h.message_ids]
    assert "z0" in ids
    session = next((vault.root / "sessions" / "import" / "z").rglob("*.jsonl"))
    session.unlink()
    ids = [m for h in index.search(vault, "コーヒー", limit=20) for m in h.message_ids]
    assert "z0" not in ids


def test_a_search_that_walks_the_graphs_loads_only_the_walk(vault, run, tmp_path, small_graphs):
    # `agent search` is a new process each time: what it imports is paid by every search.
    # usearch's Python package imports urllib.request and tqdm (50-60 ms of CPU, a fifth
    # of a search); the walk needs only its compiled extension.
    assert run("import", str(write_import(tmp_path, lines("a", 40)))).exit_code == 0
    assert segments(vault)
    code = ("import runpy, sys\n"
            f"sys.argv = ['agent', '--vault', {str(vault.root)!r}, 'search', '--json', 'roof repair']\n"
            "try:\n    runpy.run_module('agent', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('tqdm', 'urllib.request', 'usearch.index',"
            " 'usearch.compiled') if m in sys.modules), file=sys.stderr)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, cwd=tmp_path, check=True,
                       env={**os.environ, "PYTHONPATH": str(Path(ann.__file__).parents[2])})
    hits = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert any(h.get("why") == "meaning" or "roof" in json.dumps(h) for h in hits), p.stdout
    assert p.stderr.strip().splitlines()[-1] == "['usearch.compiled']", p.stderr
