"""`agent import` of hostile exports, in bounded memory (issue 41): JSON nested past any
real export, a conversation past its size or count of values, a zip whose directory
lies about a member, a deep memories.json or manifest. Each is refused with one line
naming the file, no traceback, and the vault left as it was.

Memory is bounded in the test itself, not timed: the import runs in its own process
under an address-space cap (RLIMIT_AS) far below what the unbounded parse took."""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import agent_proc

T0 = 1_700_000_000
CAP = 1024 ** 3            # 1 GB of address space: 40,000 levels took 3.9 GB unbounded


def conversation(title: str = '"Fine"', extra: str = "") -> str:
    """One ChatGPT conversation as JSON text; `title` is JSON text, `extra` more keys."""
    msg = {"id": "m1", "author": {"role": "user"}, "create_time": T0,
           "content": {"content_type": "text", "parts": ["hello there"]}}
    conv = {"id": "c1", "create_time": T0, "current_node": "m1",      # the title last
            "mapping": {"m1": {"id": "m1", "parent": None, "children": [], "message": msg}},
            "title": "TITLE"}
    return json.dumps(conv).replace('"TITLE"', title + extra)


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def zipped(path: Path, files: dict[str, str | bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def unchanged(vault, head: str) -> bool:
    return (vault.git("rev-parse", "HEAD").strip() == head
            and vault.git("status", "--porcelain") == ""
            and not (vault.root / "sessions" / "import").exists())


def refused(vault, path: Path, *, cap: int | None = None) -> str:
    """Import `path` in its own process (under an address-space cap when given); assert
    it is refused in one line with the vault unchanged; the line."""
    head = vault.git("rev-parse", "HEAD").strip()

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "import",
                        str(path)], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       env={**os.environ, "AGENT_EMBED": "off"},
                       preexec_fn=limit if cap else None)
    assert p.returncode == 1, p.stdout + p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr[-2000:]
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert unchanged(vault, head)
    return p.stderr.strip()


def test_a_tiny_zip_nesting_forty_thousand_levels_is_refused_in_bounded_memory(vault,
                                                                             tmp_path):
    bomb = zipped(tmp_path / "nested.zip", {
        "conversations.json": "[" + conversation(nested(40_000)) + "]"})
    assert bomb.stat().st_size < 1000
    line = refused(vault, bomb, cap=CAP)
    assert line == ("Error: nested.zip:conversations.json: nested more than 100 levels deep "
                    "(no real file is; a hostile one, to exhaust memory); nothing was "
                    "imported from it.")


def test_the_depth_bound_takes_a_file_at_it_and_refuses_one_level_more(vault, run, tmp_path):
    # The array of conversations, the conversation and its title are three levels.
    (tmp_path / "at.json").write_text("[" + conversation(nested(98)) + "]")
    (tmp_path / "past.json").write_text("[" + conversation(nested(99)) + "]")
    assert "nested more than 100 levels deep" in refused(vault, tmp_path / "past.json")
    r = run("import", str(tmp_path / "at.json"))
    assert r.exit_code == 0, r.output
    assert "Imported 1 message in 1 conversation" in r.output


def test_a_conversation_holding_more_values_than_any_real_one_is_refused(vault, tmp_path):
    # Two bytes a value: a million of them would be tens of MB of Python objects.
    many = "[" + ",".join(["0"] * 1_100_000) + "]"
    (tmp_path / "conversations.json").write_text(
        "[" + conversation() + "," + conversation(extra=', "x": ' + many) + "]")
    assert refused(vault, tmp_path / "conversations.json") == (
        "Error: conversations.json: conversation 2 holds over 1,000,000 values (a real one "
        "is a few MB); nothing was imported from it.")


def test_a_conversation_past_its_size_is_refused_before_it_is_parsed_whole(vault,
                                                                          tmp_path):
    huge = '"' + "x" * (65 * 1024 * 1024) + '"'
    path = tmp_path / "conversations.json"
    path.write_text("[" + conversation() + "," + conversation(huge) + "]")
    assert refused(vault, path, cap=CAP) == (
        "Error: conversations.json: conversation 2 is over 64 MB of JSON (a real one is a "
        "few MB); nothing was imported from it.")


@pytest.mark.parametrize("name", ["memories.json", "manifest-2024.json"])
def test_a_deep_memories_file_or_manifest_is_one_line_not_a_recursion_traceback(
        vault, tmp_path, name):
    folder = tmp_path / "claude-export"
    folder.mkdir()
    (folder / "conversations.json").write_text("[]")
    (folder / name).write_text(nested(50_000))
    assert refused(vault, folder) == (
        f"Error: claude-export/{name}: is not valid JSON (nested more than 100 levels deep "
        f"(no real file is; a hostile one, to exhaust memory)).")


def _understate(path: Path, member: str, size: int) -> None:
    """Rewrite the zip's central directory so `member` claims `size` bytes unpacked."""
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        name_len = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46:at + 46 + name_len] == member.encode():
            struct.pack_into("<I", data, at + 24, size)
        at = data.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(data))


def test_a_zip_whose_directory_understates_a_member_is_one_line(vault, tmp_path):
    path = zipped(tmp_path / "liar.zip", {"conversations.json": "[" + conversation() + "]"})
    _understate(path, "conversations.json", 40)
    line = refused(vault, path)
    assert line.startswith("Error: liar.zip:conversations.json: cannot be read (")
    assert line.endswith("; nothing was imported from it.")


def test_a_path_that_does_not_exist_is_named_so(vault, tmp_path):
    from agent.clock import now
    from agent.ops.imports import import_path
    from agent.stores.exports import ExportError

    with pytest.raises(ExportError) as e:
        import_path(vault, tmp_path / "gone.zip", now=now())
    assert str(e.value) == f"{tmp_path / 'gone.zip'}: no such file or folder."
    p = agent_proc("import", "/dev/null", vault=vault.root)
    assert p.returncode == 1
    assert "is not a regular file (a device, FIFO or socket)" in p.stderr


def test_the_depth_is_counted_right_wherever_a_read_cuts_the_file():
    """The bound must never refuse a real file: the depth counted as the bytes arrive,
    cut anywhere (inside a string, an escape, a multi-byte character), is the file's."""
    import random

    from agent.fs.boundedjson import Scanner, TooDeep

    rng = random.Random(41)
    alphabet = ['a', '"', '\\', '[', ']', '{', '}', ',', 'é', '\n', ' ', '\\"', '\\\\']

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))

    def value(depth: int):
        r = rng.random()
        if depth > 7 or r < 0.45:
            return rng.choice([text(), 1, 2.5, None, True])
        if r < 0.7:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {text(): value(depth + 1) for _ in range(rng.randint(0, 3))}

    def deepest(v) -> int:
        inner = list(v.values()) if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if inner is None else 1 + max(map(deepest, inner), default=0)

    for _ in range(3000):
        doc = value(0)
        raw = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode()
        cuts = sorted(rng.sample(range(len(raw) + 1), min(len(raw), rng.randint(0, 6))))
        pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]
        d = deepest(doc)
        scanner = Scanner(d)
        for piece in pieces:
            scanner.feed(piece)                 # at the bound: taken
        assert scanner.depth == 0
        if d:
            with pytest.raises(TooDeep):        # one level less: refused
                below = Scanner(d - 1)
                for piece in pieces:
                    below.feed(piece)
