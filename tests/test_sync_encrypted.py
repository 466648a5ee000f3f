"""An encrypted sync remote (`agent remote add NAME URL --encrypt`): a host that sees only
ciphertext, over git's own smart HTTP (`git http-backend` on 127.0.0.1, tests/githttp.py).

Each machine is a vault and a key file of its own (AGENT_KEY_FILE). What is checked is
what a person who keeps their memory on a host they do not trust relies on: the host's
raw files hold nothing of the vault; a machine not trusted is told which key to trust
where; everything a plain sync does works; and the host, played as the attacker
(altering, swapping, replaying or forging files), gets every change refused in one
line with nothing applied.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyrage
import pytest
from click.testing import CliRunner

from agent.cli.app import cli
from agent.sync.crypt import keys
from agent.sync.crypt.manifest import Manifest, new_data_key, Device
from agent.vault.change import Change
from agent.ops.vaults import open_vault
from agent.vault.repo import Vault
from githttp import GitHttp

CANARY = "the canary sings of ultramarine herons"


@dataclass
class Machine:
    root: Path
    key: Path

    @property
    def vault(self) -> Vault:
        return open_vault(self.root)

    def env(self, **more: str) -> dict[str, str]:
        return {"AGENT_KEY_FILE": str(self.key), **more}

    def run(self, *args: str, ok: bool = True, env: dict[str, str] | None = None):
        result = CliRunner().invoke(cli, ["--vault", str(self.root), *args],
                                    env={**self.env(), **(env or {})}, catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, result.output
        return result

    def public(self) -> str:
        return CliRunner().invoke(cli, ["key"], env=self.env()).output.splitlines()[0]


def git(cwd, *args, input=None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=input, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def host(tmp_path):
    server = GitHttp(tmp_path / "host").start()
    server.bare()
    yield server
    server.close()


@pytest.fixture
def a(tmp_path, vault, host) -> Machine:
    """Machine A: the test vault, synced to an empty encrypted remote on the host."""
    m = Machine(vault.root, tmp_path / "keys" / "a.txt")
    out = m.run("remote", "add", "origin", host.url(), "--encrypt").output
    assert "encrypted" in out and "Made this machine's key" in out
    assert m.run("sync").output.strip().startswith("sync: 0 commits in,")
    return m


def trusted_clone(tmp_path, a: Machine, host, name: str = "b") -> Machine:
    b = Machine(tmp_path / name, tmp_path / "keys" / f"{name}.txt")
    keyfile = tmp_path / f"{name}.pub"
    keyfile.write_text(b.public() + "\n")
    out = a.run("remote", "trust", "origin", str(keyfile)).output
    clone_line = out.splitlines()[-1]
    assert clone_line.startswith("On that machine: agent clone agent-crypt::")
    expect = clone_line.split("--expect ")[1].strip()
    result = CliRunner().invoke(cli, ["clone", f"agent-crypt::{host.url()}", str(b.root),
                                      "--expect", expect], env=b.env(), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return b


def bare(host) -> Path:
    return host.root / "vault.git"


def host_bytes(path: Path) -> bytes:
    """Everything the host stores: every file under the bare repository as it lies on
    disk, and every object decompressed."""
    raw = b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=path,
                             capture_output=True, check=True).stdout
    return raw + objects


def commit_file(v: Vault, rel: str, text: str, subject: str = "test change") -> None:
    with v.locked():
        v.write_text(rel, text)
        v.commit(Change("note", subject))


# ---- the host reads nothing --------------------------------------------------------------


def test_the_host_stores_no_file_name_content_message_author_or_commit(tmp_path, a, host):
    v = a.vault
    a.run("note", CANARY)
    with v.locked():
        v.append_lines("sessions/cli/default/2026-11.jsonl", [json.dumps(
            {"id": "m1", "ts": "2026-11-20T10:00:00+00:00", "role": "user",
             "content": f"remember {CANARY}", "turn": 1})])
        v.commit(Change("chat", "a turn about herons"))
    a.run("sync")
    stored = host_bytes(bare(host))
    needles = [CANARY, "ultramarine", "MEMORY.md", "sessions/", "agent.toml", "memory/",
               "Test User", "test@example.com", "a turn about herons", "note: ",
               v.head(), v.head()[:12]]
    for needle in needles:
        assert needle.encode() not in stored, f"the host holds {needle!r}"
    # Its commits name no one and no time of the vault's.
    log = git(bare(host), "log", "--format=%an <%ae> %ad %s", "agent-crypt")
    assert set(log.splitlines()) == {"agent <agent@localhost> Sun Sep 9 01:46:40 2001 +0000 agent-crypt"}
    assert git(bare(host), "for-each-ref", "--format=%(refname)").split() == ["refs/heads/agent-crypt"]
    # The same vault on a plain remote: the scan finds it there (it is a real scan).
    plain = tmp_path / "plain.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(plain))
    a.run("remote", "add", "plain", str(plain))
    a.run("sync", "--remote", "plain")
    assert CANARY.encode() in host_bytes(plain) and b"MEMORY.md" in host_bytes(plain)


def test_a_machine_not_trusted_is_told_which_key_to_trust_where(tmp_path, a, host):
    c = Machine(tmp_path / "c", tmp_path / "keys" / "c.txt")
    result = CliRunner().invoke(cli, ["clone", host.url(), str(c.root)], env=c.env())
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert c.public() in lines[0]
    assert "agent remote trust NAME FILE" in lines[0] and "unrecoverable" in lines[0]
    assert not c.root.exists()
    assert "Traceback" not in result.output


def test_trusted_machines_sync_both_ways_and_memory_files_merge(tmp_path, a, host):
    b = trusted_clone(tmp_path, a, host)
    assert (b.root / "MEMORY.md").read_text() == (a.root / "MEMORY.md").read_text()
    # The clone's remote is the encrypted one.
    assert git(b.root, "remote", "get-url", "origin").strip() == f"agent-crypt::{host.url()}"
    memory = (a.root / "MEMORY.md").read_text()
    commit_file(a.vault, "MEMORY.md", memory + "- Lives in Lisbon\n")
    commit_file(b.vault, "MEMORY.md", memory + "- Plays the cello\n")
    a.run("note", "from the server")
    b.run("note", "from the laptop")
    assert b.run("sync").output.strip() == "sync: 0 commits in, 2 out"
    out = a.run("sync").output
    assert "2 commits in" in out
    b.run("sync")
    assert a.vault.head() == b.vault.head()
    for m in (a, b):
        text = (m.root / "MEMORY.md").read_text()
        assert "- Lives in Lisbon" in text and "- Plays the cello" in text
        notes = "".join(p.read_text() for p in (m.root / "memory").glob("*.md"))
        assert "from the server" in notes and "from the laptop" in notes


def test_a_clone_expecting_another_fingerprint_is_refused(tmp_path, a, host):
    b = Machine(tmp_path / "b", tmp_path / "keys" / "b.txt")
    (tmp_path / "b.pub").write_text(b.public())
    a.run("remote", "trust", "origin", str(tmp_path / "b.pub"))
    result = CliRunner().invoke(cli, ["clone", f"agent-crypt::{host.url()}", str(b.root),
                                      "--expect", "0000-0000-0000-0000"], env=b.env())
    assert result.exit_code == 1
    assert "not the 0000-0000-0000-0000 you said to expect" in result.output
    assert not b.root.exists()


def test_control_files_from_an_encrypted_remote_are_held_until_accepted(tmp_path, a, host):
    b = trusted_clone(tmp_path, a, host)
    toml = (b.root / "agent.toml").read_text()
    commit_file(b.vault, "agent.toml", toml + "\n# changed on the laptop\n")
    b.run("sync")
    out = a.run("sync").output
    assert "held: agent.toml from origin" in out
    assert "# changed on the laptop" not in (a.root / "agent.toml").read_text()
    a.run("sync", "accept", "agent.toml")
    assert "# changed on the laptop" in (a.root / "agent.toml").read_text()


def test_the_dreams_proposal_branches_travel_encrypted(tmp_path, vault, host, fake_anthropic):
    from helpers import LISBON, script, seed
    seed(vault)
    a = Machine(vault.root, tmp_path / "keys" / "a.txt")
    a.run("remote", "add", "origin", host.url(), "--encrypt")
    script(fake_anthropic)
    a.run("dream", "--sync")
    a.run("sync")
    b = trusted_clone(tmp_path, a, host)
    b.run("sync")
    assert b.vault.git("rev-parse", "dream/1-2").strip() == a.vault.git("rev-parse", "dream/1-2").strip()
    listed = [json.loads(x) for x in b.run("review", "--json").output.splitlines()]
    assert [i["id"] for i in listed] == ["1..2#1"]
    b.run("review", "accept", "1")
    b.run("sync")
    a.run("sync")
    assert a.vault.git("for-each-ref", "refs/heads/dream").strip() == ""
    assert LISBON in (a.root / "USER.md").read_text()
    assert b"dream/1-2" not in host_bytes(bare(host))


# ---- devices ----------------------------------------------------------------------------


def _manifest_keys(host, machine: Machine) -> list[str]:
    """The data keys a device can read from the host's newest manifest (what a device
    keeps if it saves them)."""
    data = subprocess.run(["git", "cat-file", "blob", "agent-crypt:m"], cwd=bare(host),
                          capture_output=True, check=True).stdout
    ident = pyrage.x25519.Identity.from_str(keys.load(machine.key).secret)
    body = pyrage.decrypt(data, [ident]).rpartition(b"\n")[0]
    return [k["age"] for k in json.loads(body)["keys"]]


def _packs(host) -> dict[str, bytes]:
    names = git(bare(host), "ls-tree", "--name-only", "agent-crypt").split()
    return {n: subprocess.run(["git", "cat-file", "blob", f"agent-crypt:{n}"], cwd=bare(host),
                              capture_output=True, check=True).stdout for n in names if n != "m"}


def test_an_untrusted_device_cannot_read_what_is_pushed_after(tmp_path, a, host):
    b = trusted_clone(tmp_path, a, host)
    kept = _manifest_keys(host, b)            # all b could keep of the remote's keys
    before = set(_packs(host))
    out = a.run("remote", "untrust", "origin", b.public()).output
    assert out.startswith("Untrusted b (")
    a.run("note", CANARY)
    a.run("sync")
    new = {n: d for n, d in _packs(host).items() if n not in before}
    assert new
    idents = [pyrage.x25519.Identity.from_str(k) for k in kept] + \
        [pyrage.x25519.Identity.from_str(keys.load(b.key).secret)]
    for data in new.values():
        with pytest.raises(pyrage.DecryptError):
            pyrage.decrypt(data, idents)
    manifest = subprocess.run(["git", "cat-file", "blob", "agent-crypt:m"], cwd=bare(host),
                              capture_output=True, check=True).stdout
    with pytest.raises(pyrage.DecryptError):
        pyrage.decrypt(manifest, idents)
    head = b.vault.head()
    result = b.run("sync", ok=False)
    assert result.exit_code == 1
    assert "cannot open the remote's manifest: it is not trusted there" in result.output
    assert b.vault.head() == head
    # A machine cannot untrust itself, nor a device that is not there.
    assert "That is this machine" in a.run("remote", "untrust", "origin", "vault", ok=False).output \
        or "That is this machine" in a.run("remote", "untrust", "origin",
                                           a.public(), ok=False).output


def test_a_machine_can_use_its_ssh_key(tmp_path, a, host):
    (tmp_path / "ssh").mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ana@laptop",
                    "-f", str(tmp_path / "ssh" / "id_ed25519")], check=True)
    c = Machine(tmp_path / "c", tmp_path / "ssh" / "id_ed25519")
    assert c.public().startswith("ssh-ed25519 ")
    out = a.run("remote", "trust", "origin", str(tmp_path / "ssh" / "id_ed25519.pub"),
                "--name", "laptop").output
    assert "Trusted laptop (ssh-ed25519 " in out
    result = CliRunner().invoke(cli, ["clone", host.url(), str(c.root)], env=c.env(),
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    c.run("note", "written with an ssh key")
    c.run("sync")
    a.run("sync")
    assert "written with an ssh key" in "".join(
        p.read_text() for p in (a.root / "memory").glob("*.md"))


def test_remote_list_shows_the_devices(tmp_path, a, host):
    trusted_clone(tmp_path, a, host)
    out = a.run("remote", "list").output
    assert "origin\tagent-crypt::" in out and "(encrypted)" in out
    assert "(this machine)" in out and "device b:" in out
    rows = [json.loads(line) for line in a.run("remote", "list", "--json").output.splitlines()]
    assert rows[0]["encrypted"] is True and len(rows[0]["devices"]) == 2


def test_trust_refuses_a_secret_key(tmp_path, a, host):
    keyfile = tmp_path / "oops.txt"
    keyfile.write_text(f"{pyrage.x25519.Identity.generate()}\n")
    result = a.run("remote", "trust", "origin", str(keyfile), ok=False)
    assert result.exit_code == 1 and "holds a secret key" in result.output


# ---- the host as the attacker ----------------------------------------------------------


def _host_commit(host, changes: dict[str, bytes], parent: bool = True) -> None:
    """The host replaces its branch by a commit of its own making, some files changed."""
    path = bare(host)
    tree = {}
    for line in git(path, "ls-tree", "agent-crypt").splitlines():
        meta, name = line.split("\t")
        tree[name] = meta.split()[2]
    for name, data in changes.items():
        tree[name] = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=path,
                                    input=data, capture_output=True, check=True).stdout.decode().strip()
    listing = "".join(f"100644 blob {oid}\t{name}\n" for name, oid in tree.items())
    t = git(path, "mktree", input=listing).strip()
    args = ["commit-tree", t, "-m", "x"] + (["-p", "agent-crypt"] if parent else [])
    c = git(path, *args).strip()
    git(path, "update-ref", "refs/heads/agent-crypt", c)


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]


def _unchanged(m: Machine, head: str, tracking: str, result) -> None:
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "Traceback" not in result.output
    assert m.vault.head() == head
    assert git(m.root, "rev-parse", "refs/remotes/origin/main").strip() == tracking


def test_an_altered_manifest_is_refused_and_nothing_applied(tmp_path, a, host):
    data = subprocess.run(["git", "cat-file", "blob", "agent-crypt:m"], cwd=bare(host),
                          capture_output=True, check=True).stdout
    _host_commit(host, {"m": _flip(data, len(data) // 2)})
    head, tracking = a.vault.head(), git(a.root, "rev-parse", "origin/main").strip()
    result = a.run("sync", ok=False)
    _unchanged(a, head, tracking, result)
    assert "Could not fetch from origin" in result.output
    assert "damaged or was altered" in result.output


def test_an_altered_or_swapped_pack_is_refused_and_nothing_applied(tmp_path, a, host):
    b = trusted_clone(tmp_path, a, host)
    first = _packs(host)
    b.run("note", "a change from b")
    b.run("sync")
    new = {n: d for n, d in _packs(host).items() if n not in first}
    (name, data), = new.items()
    head, tracking = a.vault.head(), git(a.root, "rev-parse", "origin/main").strip()
    theirs = b.vault.head()
    # Altered: one bit of the new pack.
    good = git(bare(host), "rev-parse", "agent-crypt").strip()
    _host_commit(host, {name: _flip(data, len(data) - 20)})
    result = a.run("sync", ok=False)
    _unchanged(a, head, tracking, result)
    assert "altered or swapped" in result.output
    assert subprocess.run(["git", "cat-file", "-e", theirs], cwd=a.root).returncode != 0
    # Replayed: an older pack's bytes under the new pack's name.
    git(bare(host), "update-ref", "refs/heads/agent-crypt", good)
    _host_commit(host, {name: next(iter(first.values()))})
    result = a.run("sync", ok=False)
    _unchanged(a, head, tracking, result)
    assert subprocess.run(["git", "cat-file", "-e", theirs], cwd=a.root).returncode != 0
    # The host puts it back: the sync takes it.
    git(bare(host), "update-ref", "refs/heads/agent-crypt", good)
    assert a.run("sync").output.strip().startswith("sync: 1 commit in")


def test_a_replayed_older_state_is_refused(tmp_path, a, host):
    old = git(bare(host), "rev-parse", "agent-crypt").strip()
    a.run("note", "newer")
    a.run("sync")
    git(bare(host), "update-ref", "refs/heads/agent-crypt", old)
    head, tracking = a.vault.head(), git(a.root, "rev-parse", "origin/main").strip()
    a.run("note", "newest")
    head = a.vault.head()
    result = a.run("sync", ok=False)
    _unchanged(a, head, tracking, result)
    assert "older state" in result.output and "replaying" in result.output
    # Renaming the remote keeps what this machine accepted: still refused.
    git(a.root, "remote", "rename", "origin", "vault")
    result = a.run("sync", ok=False)
    assert result.exit_code == 1 and "older state" in result.output


def test_a_manifest_forged_with_public_keys_is_refused(tmp_path, a, host):
    """age says nothing of who encrypted: the host, which may know every public key,
    seals a manifest of its own making to A's key."""
    forged = Manifest(generation=99, keys=[new_data_key()],
                      devices=[Device(a.public(), "mallory", "2026-11-20")])
    data, _ = forged.seal()
    _host_commit(host, {"m": data})
    head, tracking = a.vault.head(), git(a.root, "rev-parse", "origin/main").strip()
    result = a.run("sync", ok=False)
    _unchanged(a, head, tracking, result)
    assert "not made by a device that holds its keys" in result.output


def test_a_manifest_nested_past_any_real_one_is_refused_in_one_line(tmp_path, a, host):
    """Its JSON is read before its MAC can be checked: the host, sealing to A's public
    key, makes it nest 50,000 levels."""
    body = b'{"format": 1, "refs": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    data = pyrage.encrypt(body + b"\n" + b"0" * 64, [keys.recipient(a.public())])
    _host_commit(host, {"m": data})
    head, tracking = a.vault.head(), git(a.root, "rev-parse", "origin/main").strip()
    result = a.run("sync", ok=False)
    _unchanged(a, head, tracking, result)
    assert "not one this version reads" in result.output


# ---- forget -----------------------------------------------------------------------------


def _reachable(host) -> set[str]:
    return {line.split()[0] for line in
            git(bare(host), "rev-list", "--objects", "--all").splitlines()}


def test_forget_reuploads_and_the_old_ciphertext_leaves_the_hosts_refs(tmp_path, a, host):
    a.run("note", CANARY)
    a.run("sync")
    b = trusted_clone(tmp_path, a, host)
    old = _reachable(host)
    out = a.run("forget", "ultramarine herons", "--yes").output
    assert "origin/main" in out, out
    log = git(bare(host), "log", "--format=%H %P", "agent-crypt").splitlines()
    assert len(log) == 1 and len(log[0].split()) == 1     # one root commit: a new history
    now = _reachable(host)
    assert not (old & now)      # no object the refs reached before is reachable now
    # B holds the tombstone for its person, then applies it.
    out = b.run("sync").output
    assert "held: forgotten phrase" in out
    b.run("sync", "accept")
    b.run("sync")
    notes = "".join(p.read_text() for p in (b.root / "memory").glob("*.md"))
    assert "ultramarine herons" not in notes and "[forgotten]" in notes
    b.run("note", "after the forget")
    b.run("sync")
    a.run("sync")
    assert a.vault.head() == b.vault.head()
    assert "ultramarine herons" not in git(a.root, "log", "--all", "-p")


def test_a_forget_whose_push_was_cut_off_is_finished_by_the_next_sync(tmp_path, a, host):
    a.run("note", CANARY)
    a.run("sync")
    host.fault = "drop"
    out = a.run("forget", "ultramarine herons", "--yes").output
    assert "remote: origin was not updated" in out and "the next `agent sync` rewrites it" in out
    host.fault = None
    a.run("sync")
    log = git(bare(host), "log", "--format=%H %P", "agent-crypt").splitlines()
    assert len(log[-1].split()) == 1            # the host's branch starts anew
    b = trusted_clone(tmp_path, a, host)
    assert "ultramarine herons" not in git(b.root, "log", "--all", "-p")
    assert b.vault.head() == a.vault.head()


# ---- the network ------------------------------------------------------------------------


def test_a_stalled_host_is_a_timeout_in_one_line(tmp_path, a, host):
    a.run("note", "while the host stalls")
    head, tracking = a.vault.head(), git(a.root, "rev-parse", "origin/main").strip()
    host.fault = "stall"
    result = a.run("sync", ok=False, env={"AGENT_SYNC_TIMEOUT": "2"})
    _unchanged(a, head, tracking, result)
    assert "stalled (nothing for 2 seconds)" in result.output
    host.fault = None
    assert a.run("sync").output.strip() == "sync: 0 commits in, 1 out"


@pytest.mark.parametrize("fault", ["drop", "drop-after"])
def test_a_push_cut_off_loses_nothing_and_the_next_sync_finishes(tmp_path, a, host, fault):
    b = trusted_clone(tmp_path, a, host)
    a.run("note", "sent while the line drops")
    head = a.vault.head()
    host.fault = fault
    result = a.run("sync", ok=False)
    assert result.exit_code == 1 and "hung up in the middle" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert a.vault.head() == head
    host.fault = None
    a.run("sync")
    b.run("sync")
    assert b.vault.head() == head
    notes = "".join(p.read_text() for p in (b.root / "memory").glob("*.md"))
    assert "sent while the line drops" in notes


# ---- many syncs, many machines ----------------------------------------------------------


def test_packs_are_merged_as_they_pile_up_and_a_clone_reads_them(tmp_path, a, host):
    for i in range(10):
        a.run("note", f"note {i}")
        a.run("sync")
    files = git(bare(host), "ls-tree", "--name-only", "agent-crypt").split()
    assert len(files) < 8          # 11 pushes, merged: the manifest and a few packs
    b = trusted_clone(tmp_path, a, host)
    notes = "".join(p.read_text() for p in (b.root / "memory").glob("*.md"))
    assert all(f"note {i}" in notes for i in range(10))
    assert b.vault.head() == a.vault.head()


def _agent(m: Machine, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(m.root), *args],
                            env={**os.environ, **m.env()}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_two_machines_syncing_at_once_again_and_again_lose_nothing(tmp_path, a, host):
    b = trusted_clone(tmp_path, a, host)
    rounds = 4
    for i in range(rounds):
        for m, who in ((a, "a"), (b, "b")):
            m.run("note", f"round {i} from {who}")
        procs = [_agent(a, "sync"), _agent(b, "sync")]
        for p in procs:
            out, _ = p.communicate(timeout=120)
            # A sync that lost every race says so in one line; nothing is lost either way.
            assert p.returncode == 0 or "kept moving" in out or "Could not push" in out, out
    for _ in range(3):
        a.run("sync")
        b.run("sync")
    assert a.vault.head() == b.vault.head()
    for m in (a, b):
        notes = "".join(p.read_text() for p in (m.root / "memory").glob("*.md"))
        for i in range(rounds):
            assert f"round {i} from a" in notes and f"round {i} from b" in notes
    # The host's branch is one line of commits back to one root (a merge of packs starts
    # a new one, leased): no push ever forked it.
    parents = [line.split()[1:] for line in
               git(bare(host), "log", "--format=%H %P", "agent-crypt").splitlines()]
    assert sum(1 for p in parents if not p) == 1 and all(len(p) <= 1 for p in parents)


# ---- doctor, plain remotes --------------------------------------------------------------


def test_doctor_checks_the_key_and_the_remote(tmp_path, a, host):
    out = a.run("doctor", "--json", ok=False).output
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert checks["key"]["status"] == "ok"
    remote = checks["remote origin"]
    assert remote["status"] == "warn" and "unrecoverable" in remote["detail"]
    trusted_clone(tmp_path, a, host)
    a.key.chmod(0o644)
    checks = {c["name"]: c for c in json.loads(a.run("doctor", "--json", ok=False).output)["checks"]}
    assert checks["remote origin"]["status"] == "ok"
    assert "encrypted for 2 devices" in checks["remote origin"]["detail"]
    assert checks["key"]["status"] == "warn" and "chmod 600" in checks["key"]["fix"]
    # The host alters the manifest: doctor says so.
    data = subprocess.run(["git", "cat-file", "blob", "agent-crypt:m"], cwd=bare(host),
                          capture_output=True, check=True).stdout
    _host_commit(host, {"m": _flip(data, len(data) // 2)})
    checks = {c["name"]: c for c in json.loads(a.run("doctor", "--json", ok=False).output)["checks"]}
    assert checks["remote origin"]["status"] == "fail"


def test_a_plain_remote_add_stays_plain(tmp_path, vault):
    plain = tmp_path / "plain.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(plain))
    m = Machine(vault.root, tmp_path / "keys" / "a.txt")
    out = m.run("remote", "add", "origin", str(plain)).output
    assert "its host can read everything" in out
    m.run("note", CANARY)
    m.run("sync")
    assert git(plain, "show", "main:agent.toml")
    assert not m.key.exists()           # no key is made for a plain remote
