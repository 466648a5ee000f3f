"""`agent remote` and `agent key`: a vault's remotes, and the devices an encrypted one is
encrypted for.

    added = add(vault, "origin", "https://host/vault.git", encrypt=True, now=now)
    key = device_key(now)                         # this machine's public key, made if none
    done = trust(vault, "origin", key_text, "laptop", now)
    done = untrust(vault, "origin", "laptop")

The encryption is agent.sync.crypt's; this module is what every front-end calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from agent.errors import UserError
from agent.sync.crypt import keys, vaultremotes
from agent.sync.crypt.manifest import Device, Manifest, Refused
from agent.vault.carrier import CarrierError
from agent.vault.repo import Vault


class RemoteError(UserError):
    """An `agent remote` operation that could not be done; the message says why."""


@dataclass
class Added:
    name: str
    url: str                     # as configured (`agent-crypt::URL` when encrypted)
    encrypted: bool
    key: keys.DeviceKey | None = None
    key_made: bool = False


@dataclass
class RemoteInfo:
    name: str
    url: str
    encrypted: bool
    devices: list[Device] = field(default_factory=list)   # as last read (encrypted only)
    fingerprint: str | None = None
    problem: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "url": self.url, "encrypted": self.encrypted,
                "devices": [d.as_dict() for d in self.devices],
                "fingerprint": self.fingerprint, "problem": self.problem}


@dataclass
class Devices:
    """What a trust or an untrust published."""
    remote: str
    url: str                      # the host's
    device: Device
    manifest: Manifest

    @property
    def fingerprint(self) -> str:
        return self.manifest.fingerprint

    def clone_command(self) -> str:
        return f"agent clone agent-crypt::{self.url} PATH --expect {self.fingerprint}"


def device_key(now: datetime) -> tuple[keys.DeviceKey, bool]:
    """This machine's key, made now if it has none: (key, whether it was made)."""
    return keys.ensure(now.isoformat(timespec="seconds"))


def add(vault: Vault, name: str, url: str, encrypt: bool, now: datetime) -> Added:
    """Add a remote; an encrypted one makes this machine's key first if it has none.
    The host is not reached: the first `agent sync` fills it."""
    key, made = device_key(now) if encrypt or url.startswith("agent-crypt::") else (None, False)
    configured = vaultremotes.add(vault, name, url, encrypt)
    return Added(name, configured, configured.startswith("agent-crypt::"), key, made)


def listing(vault: Vault) -> list[RemoteInfo]:
    """Every remote; an encrypted one with its devices as last read from its host (no
    network: `agent sync` or `agent doctor` reads it again)."""
    out = []
    device = keys.load()
    for name, url in sorted(vaultremotes.remote_urls(vault).items()):
        info = RemoteInfo(name, url, url.startswith("agent-crypt::"))
        if info.encrypted:
            if device is None:
                info.problem = "this machine has no key (`agent key`)"
            else:
                try:
                    remote = vaultremotes.open_remote(vault, name, device)
                    with remote.locked():
                        state = remote.cached()
                except (Refused, CarrierError, UserError) as e:
                    info.problem = str(e)
                else:
                    if state.manifest is None:
                        info.problem = "not synced yet"
                    else:
                        info.devices = state.manifest.devices
                        info.fingerprint = state.manifest.fingerprint
        out.append(info)
    return out


def _published(vault: Vault, name: str, *, add: Device | None = None,
               remove: str | None = None) -> Manifest:
    remote = vaultremotes.open_remote(vault, name)
    try:
        with remote.locked():
            return remote.change_devices(add=add, remove=remove, name=vault.host())
    except (Refused, CarrierError) as e:
        raise RemoteError(f"Nothing was changed: {e}.") from None


def trust(vault: Vault, name: str, key_text: str, label: str, now: datetime,
          where: str = "the key file") -> Devices:
    """Encrypt the remote `name` for one more device (its public key in `key_text`),
    published on the host at once."""
    public = keys.parse_public(key_text, where)
    label = label.strip() or keys.short(public)
    device = Device(public, label, now.isoformat(timespec="seconds"))
    manifest = _published(vault, name, add=device)
    url = vaultremotes.encrypted(vault)[name]
    return Devices(name, url, device, manifest)


def untrust(vault: Vault, name: str, which: str) -> Devices:
    """No longer encrypt the remote `name` for a device (its public key, its name, or the
    start of its key): a new data key seals everything pushed from now on."""
    remote = vaultremotes.open_remote(vault, name)
    with remote.locked():
        try:
            state = remote.load()
        except (Refused, CarrierError) as e:
            raise RemoteError(f"Nothing was changed: {e}.") from None
    if state.manifest is None:
        raise RemoteError(f"'{name}' holds nothing yet: no device to untrust.")
    found = [d for d in state.manifest.devices
             if which in (d.key, d.name) or (len(which) >= 8 and d.key.startswith(which))]
    if not found:
        listed = ", ".join(f"{d.name} ({keys.short(d.key)})" for d in state.manifest.devices)
        raise RemoteError(f"No device of '{name}' is {which!r} (devices: {listed}).")
    if len(found) > 1:
        raise RemoteError(f"{len(found)} devices of '{name}' match {which!r}: give the whole key.")
    device = found[0]
    if device.key == remote.device.public:
        raise RemoteError("That is this machine: untrust it from another machine that syncs "
                          "the vault (this one would lock itself out).")
    manifest = _published(vault, name, remove=device.key)
    return Devices(name, remote.url, device, manifest)


def read_key_file(path: Path) -> str:
    """The text of a KEYFILE a person names (`-`: standard input is the CLI's): a
    regular file of at most 100 kB (a public key is one line)."""
    from agent.fs import safe
    return safe.read_given(path, 100_000).decode("utf-8", "replace")
