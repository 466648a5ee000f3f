"""One encrypted remote as this machine sees it: read, check, fetch from and push to it.

    remote = CryptRemote(git_dir, "https://host/vault.git", keys.load(), "origin")
    with remote.locked():
        state = remote.load()                       # the host's newest state, checked
        remote.fetch_objects(state)                 # the packs this vault lacks, applied
        results = remote.push(state, [Update(...)]) # a new pack and manifest, or why not

The host keeps a carrier repository (agent.vault.carrier) whose newest commit holds
the manifest (agent.sync.crypt.manifest) and the packs it lists. Every push adds one
pack of what the remote lacks, sealed to the newest data key, and a new manifest one
generation on, in one fast-forward commit: a push from the same commit by another
machine is refused by the host's own ref update, and the git push above it says
"fetch first" (the sync fetches, merges and pushes again).

Packs pile up one a push; when FANOUT packs of one level end the list they are merged
into one of the next level (made from this vault's own objects), so a clone after
years of syncing decrypts and indexes a few dozen packs rather than one per sync. A
merge, and a rewrite of the vault's history (`agent forget`, or a branch replaced
rather than moved on: everything is then re-uploaded as one pack), put a new root
commit on the host's branch, leased on the commit they replace: what they supersede
is then reachable from no ref of the host (which drops it in its own time), and a
machine that pushed meanwhile made the lease fail, so it is read again and nothing
of its is dropped. Nothing else is ever force-pushed.

This machine's record of the remote (what it accepted) and its copy of the carrier live in .git/agent-crypt/<id>/: never in the vault's tree.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyrage

from agent.fs import atomic
from agent.sync.crypt import keys
from agent.sync.crypt.manifest import (Device, Manifest, Pack, Refused, Seen, accept,
                                       new_data_key, open_sealed)
from agent.vault import carrier as carrying
from agent.vault.carrier import Carrier, CarrierError, Rejected

PREFIX = "agent-crypt::"
MANIFEST = "m"                 # the manifest's file on the carrier; packs have random names
FANOUT = 8                     # packs of one level merged into one of the next
TIMEOUT = 60                   # seconds a host may send nothing before a sync gives up
MAX_TRIES = 5                  # pushes of a carrier commit that another machine beat
TIMEOUT_ENV = "AGENT_SYNC_TIMEOUT"
EXPECT_ENV = "AGENT_CRYPT_EXPECT"


def address(url: str) -> str | None:
    """The host's URL of an encrypted remote's URL (`agent-crypt::URL`), else None."""
    return url[len(PREFIX):] if url.startswith(PREFIX) else None


def timeout() -> int:
    try:
        return max(1, int(os.environ.get(TIMEOUT_ENV, TIMEOUT)))
    except ValueError:
        return TIMEOUT


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class State:
    """The host's newest state, checked: its carrier commit (None: no carrier yet),
    manifest and files."""
    tip: str | None = None
    manifest: Manifest | None = None
    files: dict[str, str] = field(default_factory=dict)

    @property
    def refs(self) -> dict[str, str]:
        return self.manifest.refs if self.manifest else {}


_UNSET = "\0unset"


@dataclass
class Update:
    """One ref a push changes: `new` None deletes it; `listed` is the value git saw when
    it decided (a host that moved it since says "fetch first"); `lease` a value the
    ref must still have (--force-with-lease)."""
    dst: str
    new: str | None
    force: bool = False
    listed: str | None = None
    lease: str | None = _UNSET


class CryptRemote:
    """The encrypted remote `name` at `url` (the host's, without the prefix) of the
    vault whose git folder is `git_dir`, read with this machine's `device` key."""

    def __init__(self, git_dir: Path, url: str, device: keys.DeviceKey, name: str) -> None:
        self.git_dir = Path(git_dir)
        self.url = url
        self.device = device
        self.name = name
        # This machine's record is kept by the host's URL, whatever the remote is named
        # (a rename must not start it afresh: it guards against replays and forgeries).
        ident = hashlib.sha256(url.encode()).hexdigest()[:16]
        self.dir = self.git_dir / "agent-crypt" / ident
        self.carrier = Carrier(self.dir / "carrier.git")
        self.timeout = timeout()

    # ---- this machine's record ----------------------------------------------------------

    def _record(self) -> dict[str, object]:
        data = atomic.read_json(self.dir / "state.json")
        return data if isinstance(data, dict) else {}

    def _save(self, **changes: object) -> None:
        data = {**self._record(), "url": self.url, **changes}
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic.write_text(self.dir / "state.json", json.dumps(data, indent=2, sort_keys=True) + "\n",
                          mode=0o600)

    @property
    def seen(self) -> Seen:
        seen = Seen.from_dict(self._record().get("seen"))
        if seen.mac_key is None and os.environ.get(EXPECT_ENV):
            seen.expect = os.environ[EXPECT_ENV].strip().lower()
        return seen

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One process at a time reads or writes this machine's record of the remote."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # ---- reading ------------------------------------------------------------------------

    def load(self) -> State:
        """The host's newest state, fetched and checked (Refused, CarrierError)."""
        return self._open(self.carrier.fetch(self.url, self.timeout))

    def cached(self) -> State:
        """The state as last fetched, checked again, with no network."""
        self.carrier.ensure()
        return self._open(self.carrier.tip(), record=False)

    def _open(self, tip: str | None, record: bool = True) -> State:
        if tip is None:
            if self.seen.mac_key is not None:
                raise Refused(f"the remote is empty, but this machine has synced with it: "
                              f"the host lost or removed it (if you emptied it on purpose, "
                              f"remove this machine's record of it: rm -r {self.dir})")
            return State()
        files = self.carrier.files(tip)
        if MANIFEST not in files:
            raise Refused("the remote's branch holds no manifest: it was altered")
        manifest, digest = open_sealed(self.carrier.read(files[MANIFEST]), self.device)
        missing = [p.file for p in manifest.packs if p.file not in files]
        if missing:
            raise Refused(f"the remote lacks {len(missing)} pack{'s' * (len(missing) != 1)} "
                          f"its manifest lists: it was altered or cut")
        seen = self.seen
        taken = accept(seen, manifest, digest)
        if record and taken != seen:
            self._save(seen=taken.as_dict())
        return State(tip, manifest, files)

    def fetch_objects(self, state: State) -> int:
        """Apply the packs of `state` this vault lacks; how many. Every one is checked
        (its SHA-256 as listed, then age's own check as it decrypts) before any is
        applied: a pack that fails leaves the vault as it was."""
        m = state.manifest
        if m is None:
            return 0
        # A pack whose commits are here was applied before (or brought them another
        # way). One whose commits went (a forget here pruned them while the host still
        # has them) is applied again: git's fetch asks for them.
        have = carrying.present(self.git_dir, [t for p in m.packs for t in p.tips])
        todo = [p for p in m.packs if not set(p.tips) <= have]
        datas = []
        for p in todo:
            blob = self.carrier.read(state.files[p.file])
            if hashlib.sha256(blob).hexdigest() != p.sha256:
                raise Refused("a pack on the remote is not the one its manifest lists: "
                              "it was altered or swapped")
            try:
                datas.append(pyrage.decrypt(blob, [m.keys[p.key].identity()]))
            except pyrage.DecryptError:
                raise Refused("a pack on the remote does not decrypt: it was altered") from None
        for data in datas:
            carrying.unpack(self.git_dir, data)
        return len(datas)

    # ---- writing ------------------------------------------------------------------------

    def _first(self, name: str | None = None) -> Manifest:
        me = Device(self.device.public, name or socket.gethostname(), now_iso())
        return Manifest(generation=0, keys=[new_data_key()], devices=[me])

    def push(self, state: State, updates: list[Update], atomic_push: bool = False
             ) -> dict[str, str]:
        """Publish `updates` on the remote: each ref's "ok" or why not (git's words:
        "fetch first", "non-fast forward", "stale info"). A host that moved meanwhile
        is read again and the push made again on top, as long as the refs pushed are
        as git saw them."""
        for _ in range(MAX_TRIES):
            m = state.manifest
            new = m.next() if m else self._first().next()
            results: dict[str, str] = {}
            changed: list[Update] = []
            rewrite = False
            for u in updates:
                now = state.refs.get(u.dst)
                if u.lease != _UNSET and now != (u.lease or None):
                    results[u.dst] = "stale info"
                elif now != u.listed and not (
                        now and u.new and carrying.is_ancestor(self.git_dir, now, u.new)):
                    # The host moved it since git decided, and not to a commit this one
                    # builds on (a fast-forward from the host's own state goes through).
                    results[u.dst] = "fetch first"
                elif u.new is None:
                    new.refs.pop(u.dst, None)
                    changed.append(u)
                elif now and now != u.new and not carrying.is_ancestor(self.git_dir, now, u.new):
                    if u.force:
                        rewrite = True
                        new.refs[u.dst] = u.new
                        changed.append(u)
                    else:
                        results[u.dst] = "non-fast forward"
                else:
                    new.refs[u.dst] = u.new
                    changed.append(u)
            if atomic_push and results:
                return {u.dst: results.get(u.dst, "atomic push failed") for u in updates}
            if not changed:
                return results
            if new.head not in new.refs:
                heads = sorted(r for r in new.refs if r.startswith("refs/heads/"))
                new.head = "refs/heads/main" if "refs/heads/main" in new.refs else \
                    (heads[0] if heads else None)
            files, replace = self._pack(state, new, [u.new for u in changed if u.new], rewrite)
            try:
                self._publish(state, new, files, replace=replace, rewrite=rewrite)
            except Rejected:
                state = self.load()
                continue
            results.update({u.dst: "ok" for u in changed})
            return results
        return {u.dst: "fetch first" for u in updates}

    def _pack(self, state: State, new: Manifest, tips: list[str], rewrite: bool
              ) -> tuple[dict[str, str], bool]:
        """The carrier files of `new`: its packs as they are, plus one of what the remote
        lacks (everything, on a `rewrite`), merged with the newest ones when FANOUT of a
        level have piled up. `new.packs` is set to match. And whether the carrier's
        history is replaced (a rewrite, or packs merged: what they replace is then
        reachable from no ref of the host, which drops it in its own time)."""
        if rewrite:
            have = carrying.present(self.git_dir, new.refs.values())
            # A ref whose commits this vault lacks (it pruned them: a rewrite's old
            # history) is not carried into the new history.
            new.refs = {r: s for r, s in new.refs.items() if s in have}
            every = sorted(set(new.refs.values()))
            new.packs = []
            files: dict[str, str] = {}
            if every:
                self._add_pack(new, files, every, [], level=9)
            return files, True
        files = {p.file: state.files[p.file] for p in new.packs}
        before = [t for p in new.packs for t in p.tips] + list(state.refs.values())
        exclude = sorted(carrying.present(self.git_dir, before))
        tips = sorted(set(tips))
        if carrying.has_new(self.git_dir, tips, exclude):
            self._add_pack(new, files, tips, exclude, level=0)
            return files, self._merge_packs(new, files)
        return files, False

    def _add_pack(self, new: Manifest, files: dict[str, str], tips: list[str],
                  exclude: list[str], level: int) -> None:
        data = pyrage.encrypt(carrying.pack(self.git_dir, tips, exclude), [new.key.recipient()])
        name = secrets.token_hex(16)
        files[name] = self.carrier.write(data)
        new.packs.append(Pack(name, hashlib.sha256(data).hexdigest(), tips, len(new.keys) - 1,
                              level, len(data)))

    def _merge_packs(self, new: Manifest, files: dict[str, str]) -> bool:
        """Merge the newest packs while FANOUT of one level end the list; whether any was."""
        merged = False
        while new.packs:
            level = new.packs[-1].level
            run = 0
            for p in reversed(new.packs):
                if p.level != level:
                    break
                run += 1
            if run < FANOUT:
                return merged
            group, before = new.packs[-run:], new.packs[:-run]
            tips = sorted({t for p in group for t in p.tips})
            if carrying.present(self.git_dir, tips) != set(tips):
                return merged       # objects this vault no longer has: left as they are
            exclude = sorted(carrying.present(self.git_dir, [t for p in before for t in p.tips]))
            for p in group:
                files.pop(p.file, None)
            new.packs = before
            self._add_pack(new, files, carrying.independent(self.git_dir, tips), exclude,
                           level=level + 1)
            merged = True
        return merged

    def _publish(self, state: State, new: Manifest, files: dict[str, str],
                 replace: bool = False, rewrite: bool = False) -> None:
        """Seal `new`, commit it with `files` on the carrier and push it (Rejected when
        the host moved since `state`); this machine then records it as accepted. With
        `replace`, as a new root commit (leased); a `rewrite` also prunes a host that is
        a folder on this machine, as a forget on a plain remote on a disk does."""
        data, digest = new.seal()
        files = {**files, MANIFEST: self.carrier.write(data)}
        commit = self.carrier.commit(files, None if replace else state.tip)
        self.carrier.push(self.url, commit, state.tip, self.timeout, replace=replace)
        self._save(seen=Seen(new.fingerprint, new.generation, digest).as_dict())
        if replace:
            self.carrier.prune()
            if rewrite:
                carrying.prune_local_host(self.url)

    # ---- devices ------------------------------------------------------------------------

    def change_devices(self, add: Device | None = None, remove: str | None = None,
                       name: str | None = None) -> Manifest:
        """Trust one more device (`add`) or no longer one (`remove`, a public key): the
        manifest is sealed again for the devices it then lists; an untrust adds a new
        data key, so what is pushed from now on is sealed to a key that device never
        held. Published at once (CarrierError when the host cannot be reached)."""
        for _ in range(MAX_TRIES):
            state = self.load()
            m = state.manifest
            new = m.next() if m else self._first(name).next()
            files = {p.file: state.files[p.file] for p in new.packs}
            if add is not None:
                new.devices = [d for d in new.devices if d.key != add.key] + [add]
            if remove is not None:
                new.devices = [d for d in new.devices if d.key != remove]
                new.keys = [*new.keys, new_data_key()]
            try:
                self._publish(state, new, files)
            except Rejected:
                continue
            return new
        raise CarrierError("the remote kept moving while this machine wrote to it: try again")
