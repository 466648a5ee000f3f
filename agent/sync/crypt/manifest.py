"""The manifest of an encrypted remote: what it holds, sealed so the host can neither read
nor alter nor roll it back unnoticed.

The manifest says which refs the remote has (branch -> commit), which encrypted packs
hold their objects, the remote's data keys and the devices it is encrypted for. On the
remote it is one file, the age encryption (to every trusted device's public key) of

    <the body as canonical JSON>\\n<HMAC-SHA256 of those bytes, hex>

- **Read only by the devices.** age (through pyrage) encrypts it; no device key, no
  plaintext. The packs are age-encrypted to the newest *data key*, an X25519 identity
  held only inside the manifest: trusting a device re-encrypts the manifest (small),
  never the packs; untrusting one adds a new data key, so whatever is pushed after it
  is sealed to a key that device never sees.
- **Made only by the devices.** age alone does not say who encrypted: anyone who knows
  a public key can encrypt to it. So the body carries the remote's MAC keys (random,
  one per data key) and is authenticated with the newest; a device accepts a manifest
  only when it lists the MAC key this device last accepted (the host never saw one). A
  device untrusted since can still forge with an old key, but not for a device that
  has seen the new one.
- **Never rolled back.** Every manifest pushed has a generation one above the one it
  replaces; a device refuses a lower generation than it has accepted, and a different
  manifest with the same one (agent.sync.crypt.remote keeps what it accepted).
- Each pack is listed with the SHA-256 of its ciphertext: a pack swapped, cut or
  altered is refused before a byte of it is decrypted.

A new device has accepted nothing yet: it takes the first manifest it can decrypt,
unless given the remote's fingerprint to expect (`agent clone … --expect`), which
`agent remote trust` prints. Only standard constructions are used: age for secrecy,
HMAC-SHA256 (Python's hmac) for the authenticity of the plaintext inside it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import pyrage

from agent.fs import boundedjson
from agent.sync.crypt import keys

FORMAT = 1


class Refused(Exception):
    """A manifest or pack this device does not take; str() is the one line to show."""


@dataclass
class Pack:
    file: str            # its opaque name on the remote
    sha256: str          # of its ciphertext
    tips: list[str]      # the commits it brings (with all they need beyond earlier packs)
    key: int             # the data key it is encrypted to (index into Manifest.keys)
    level: int = 0       # how many merges of packs made it (agent.sync.crypt.remote)
    size: int = 0        # ciphertext bytes

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "sha256": self.sha256, "tips": self.tips, "key": self.key,
                "level": self.level, "size": self.size}


@dataclass
class Device:
    key: str             # its public key (age1…, or an ssh public key)
    name: str
    added: str

    def as_dict(self) -> dict[str, str]:
        return {"key": self.key, "name": self.name, "added": self.added}


@dataclass
class DataKey:
    age: str             # AGE-SECRET-KEY-1…: decrypts the packs sealed to it
    mac: str             # hex: authenticates the manifests made while it is the newest

    def as_dict(self) -> dict[str, str]:
        return {"age": self.age, "mac": self.mac}

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.mac)

    def recipient(self) -> pyrage.x25519.Recipient:
        return pyrage.x25519.Identity.from_str(self.age).to_public()

    def identity(self) -> pyrage.x25519.Identity:
        return pyrage.x25519.Identity.from_str(self.age)


def new_data_key() -> DataKey:
    return DataKey(str(pyrage.x25519.Identity.generate()), secrets.token_hex(32))


def fingerprint(mac_hex: str) -> str:
    """What a person compares between two machines: 64 bits of the MAC key's SHA-256."""
    h = hashlib.sha256(b"agent-crypt fingerprint\0" + bytes.fromhex(mac_hex)).hexdigest()[:16]
    return "-".join(h[i:i + 4] for i in range(0, 16, 4))


@dataclass
class Manifest:
    generation: int = 0
    refs: dict[str, str] = field(default_factory=dict)
    head: str | None = None
    packs: list[Pack] = field(default_factory=list)
    keys: list[DataKey] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)

    @property
    def key(self) -> DataKey:
        return self.keys[-1]

    @property
    def fingerprint(self) -> str:
        return self.key.fingerprint

    def body(self) -> dict[str, Any]:
        return {"format": FORMAT, "generation": self.generation, "refs": self.refs,
                "head": self.head, "packs": [p.as_dict() for p in self.packs],
                "keys": [k.as_dict() for k in self.keys],
                "devices": [d.as_dict() for d in self.devices]}

    def next(self) -> Manifest:
        """A copy to change, one generation on."""
        return Manifest(self.generation + 1, dict(self.refs), self.head,
                        [Pack(**p.as_dict()) for p in self.packs], list(self.keys),
                        [Device(**d.as_dict()) for d in self.devices])

    def seal(self) -> tuple[bytes, str]:
        """The file as stored on the remote, and the SHA-256 of its plaintext (what a
        device records as accepted)."""
        body = _canonical(self.body())
        tag = hmac.new(bytes.fromhex(self.key.mac), body, hashlib.sha256).hexdigest()
        plain = body + b"\n" + tag.encode()
        recipients = [keys.recipient(d.key) for d in self.devices]
        return pyrage.encrypt(plain, recipients), hashlib.sha256(plain).hexdigest()


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def open_sealed(data: bytes, device: keys.DeviceKey) -> tuple[Manifest, str]:
    """The manifest in a remote's file, checked as far as it can be alone (decrypts, its
    body is well formed and its MAC matches its newest key), and the SHA-256 of its
    plaintext. Refused, with the one line to show, otherwise. Whether this device may
    take it (its MAC key, its generation) is `accept`'s."""
    try:
        plain = pyrage.decrypt(data, [device.identity()])
    except pyrage.DecryptError as e:
        if "No matching keys" in str(e):
            raise Refused(f"this machine's key ({device.public}) cannot open the remote's "
                          f"manifest: it is not trusted there") from None
        raise Refused("the remote's manifest is damaged or was altered (it does not "
                      "decrypt)") from None
    body_bytes, _, tag = plain.rpartition(b"\n")
    try:
        doc = boundedjson.loads(body_bytes)     # (read before its MAC is checked)
        manifest = _from_body(doc)
    except (ValueError, KeyError, TypeError, IndexError):
        raise Refused("the remote's manifest is not one this version reads (malformed "
                      "or from a newer version)") from None
    want = hmac.new(bytes.fromhex(manifest.key.mac), body_bytes, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want.encode(), tag):
        raise Refused("the remote's manifest fails its authentication check: it was "
                      "altered") from None
    return manifest, hashlib.sha256(plain).hexdigest()


def _from_body(doc: Any) -> Manifest:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError("format")
    refs = doc["refs"]
    if not isinstance(refs, dict) or not all(
            isinstance(k, str) and k.startswith("refs/") and _is_sha(v) for k, v in refs.items()):
        raise ValueError("refs")
    packs = []
    for p in doc["packs"]:
        pack = Pack(str(p["file"]), str(p["sha256"]), [str(t) for t in p["tips"]],
                    int(p["key"]), int(p.get("level", 0)), int(p.get("size", 0)))
        if not pack.file.isalnum() or not all(_is_sha(t) for t in pack.tips):
            raise ValueError("pack")
        packs.append(pack)
    data_keys = [DataKey(str(k["age"]), str(k["mac"])) for k in doc["keys"]]
    for k in data_keys:
        bytes.fromhex(k.mac)
        pyrage.x25519.Identity.from_str(k.age)
    if not data_keys or any(not 0 <= p.key < len(data_keys) for p in packs):
        raise ValueError("keys")
    devices = [Device(str(d["key"]), str(d["name"]), str(d["added"])) for d in doc["devices"]]
    head = doc.get("head")
    return Manifest(int(doc["generation"]), dict(refs), head if isinstance(head, str) else None,
                    packs, data_keys, devices)


def _is_sha(v: Any) -> bool:
    return isinstance(v, str) and len(v) in (40, 64) and all(c in "0123456789abcdef" for c in v)


# ---- what this device accepted --------------------------------------------------------


@dataclass
class Seen:
    """What this device last accepted from one remote (kept by agent.sync.crypt.remote)."""
    mac_key: str | None = None        # fingerprint of the newest MAC key accepted
    generation: int = -1
    digest: str | None = None         # SHA-256 of that manifest's plaintext
    expect: str | None = None         # a fingerprint the person said to expect (a clone)

    def as_dict(self) -> dict[str, Any]:
        return {"mac_key": self.mac_key, "generation": self.generation, "digest": self.digest,
                "expect": self.expect}

    @classmethod
    def from_dict(cls, d: Any) -> Seen:
        if not isinstance(d, dict):
            return cls()
        gen = d.get("generation")
        return cls(d.get("mac_key") if isinstance(d.get("mac_key"), str) else None,
                   gen if isinstance(gen, int) else -1,
                   d.get("digest") if isinstance(d.get("digest"), str) else None,
                   d.get("expect") if isinstance(d.get("expect"), str) else None)


def accept(seen: Seen, manifest: Manifest, digest: str) -> Seen:
    """Whether this device takes `manifest` after what it `seen`: the new record, or
    Refused with the one line to show."""
    prints = [k.fingerprint for k in manifest.keys]
    if seen.mac_key is None and seen.expect and seen.expect not in prints:
        raise Refused(f"the remote's fingerprint is {manifest.fingerprint}, not the "
                      f"{seen.expect} you said to expect: it is not the vault you trusted, "
                      f"or the host replaced it")
    if seen.mac_key is not None and seen.mac_key not in prints:
        raise Refused("the remote's manifest was not made by a device that holds its "
                      "keys (a forgery, or a remote this machine was untrusted from)")
    if manifest.generation < seen.generation:
        raise Refused(f"the remote offered an older state (generation {manifest.generation}; "
                      f"this machine has seen {seen.generation}): a host replaying old data")
    if manifest.generation == seen.generation and digest != seen.digest:
        raise Refused(f"the remote offered a different state under a generation this "
                      f"machine has already seen ({manifest.generation}): a host altering "
                      f"what it serves")
    return Seen(manifest.fingerprint, manifest.generation, digest, None)
