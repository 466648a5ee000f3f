"""This machine's device key, kept under the person's home and never in the vault.

An encrypted remote (agent.sync.crypt) is readable by the devices it is encrypted for.
Each device holds one age X25519 identity in a file of its own (`age-keygen`'s format,
so `age -d -i FILE` reads it too):

    # created: 2026-11-20T10:00:00+00:00
    # public key: age1…
    AGE-SECRET-KEY-1…

It lives at $AGENT_KEY_FILE, else $XDG_CONFIG_HOME/agent/key.txt, else
~/.config/agent/key.txt: readable by its owner only (0600, in a 0700 folder). An ssh
key pair the person already has serves too (AGENT_KEY_FILE=~/.ssh/id_ed25519, its .pub
beside it; without a passphrase: age cannot ask for one here). `agent
key` prints its public half, which another device trusts (`agent remote trust`). The
file is never copied into the vault, a commit, a log or a model request; losing it on
every device makes what the remote holds unreadable, by anyone.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pyrage

from agent.errors import UserError

ENV = "AGENT_KEY_FILE"
SECRET_PREFIX = "AGE-SECRET-KEY-1"
PUBLIC_PREFIX = "age1"
SSH_PREFIXES = ("ssh-ed25519 ", "ssh-rsa ")
SSH_PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----"


class KeyProblem(UserError):
    """A key file that cannot be used; the message says why and what to do."""


def key_path() -> Path:
    """Where this machine's device key is (it may not exist yet)."""
    given = os.environ.get(ENV)
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "agent" / "key.txt"


@dataclass(frozen=True)
class DeviceKey:
    """This machine's identity: what decrypts, and the public key others trust (an age
    key, or an ssh key pair the person already has: AGENT_KEY_FILE=~/.ssh/id_ed25519)."""
    path: Path
    secret: str
    public: str

    def identity(self) -> pyrage.x25519.Identity | pyrage.ssh.Identity:
        if self.secret.startswith(SSH_PRIVATE):
            return pyrage.ssh.Identity.from_buffer(self.secret.encode())
        return pyrage.x25519.Identity.from_str(self.secret)


def load(path: Path | None = None) -> DeviceKey | None:
    """This machine's key, or None when there is none yet (KeyProblem when the file is
    there but unusable: its bytes are never echoed)."""
    path = path or key_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise KeyProblem(f"This machine's key {path} cannot be read ({type(e).__name__}). "
                        f"Fix its permissions; if it is lost, see `agent key --help`.") from None
    if text.lstrip().startswith(SSH_PRIVATE):
        return _ssh_key(path, text.strip() + "\n")
    secret = next((line.strip() for line in text.splitlines()
                   if line.strip().startswith(SECRET_PREFIX)), None)
    if secret is None:
        raise KeyProblem(f"{path} holds no age secret key (a line starting {SECRET_PREFIX}). "
                        f"Move it aside and run `agent key` to make a new one.")
    try:
        ident = pyrage.x25519.Identity.from_str(secret)
    except pyrage.IdentityError:
        raise KeyProblem(f"{path} holds a damaged age secret key. Move it aside and run "
                        f"`agent key` to make a new one (the remotes must then trust it).") from None
    return DeviceKey(path, secret, str(ident.to_public()))


def _ssh_key(path: Path, text: str) -> DeviceKey:
    """An ssh private key used as this machine's key; its public half beside it (.pub)."""
    try:
        pyrage.ssh.Identity.from_buffer(text.encode())
    except pyrage.IdentityError:
        raise KeyProblem(f"{path} is an ssh key age cannot use (one with a passphrase, or "
                         f"not ed25519 or rsa): point AGENT_KEY_FILE at an age key instead "
                         f"(unset it and run `agent key`).") from None
    pub = path.with_name(path.name + ".pub")
    try:
        public = parse_public(pub.read_text(encoding="utf-8"), str(pub))
    except OSError:
        raise KeyProblem(f"{path} is an ssh key but {pub} (its public half) is missing.") from None
    return DeviceKey(path, text, public)


def ensure(now_iso: str, path: Path | None = None) -> tuple[DeviceKey, bool]:
    """This machine's key, made now when there is none: (key, whether it was made)."""
    path = path or key_path()
    have = load(path)
    if have is not None:
        return have, False
    ident = pyrage.x25519.Identity.generate()
    public = str(ident.to_public())
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = f"# created: {now_iso}\n# public key: {public}\n{ident}\n"
    # O_EXCL: two commands making the key at once keep the first one made, never mix.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        made = load(path)
        assert made is not None
        return made, False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    key = load(path)
    assert key is not None
    return key, True


def loose_permissions(path: Path) -> bool:
    """Whether users other than the owner may read the key file."""
    try:
        return bool(path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    except OSError:
        return False


def parse_public(text: str, where: str = "the key file") -> str:
    """The one public key in `text` (an `age1…` key, or an ssh-ed25519/ssh-rsa public
    key line): KeyProblem when there is none, or when it is a secret key."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(SECRET_PREFIX) or "PRIVATE KEY" in line:
            raise KeyProblem(f"{where} holds a secret key: give the public key instead "
                            f"(`agent key` on that machine prints it). Keep that file private.")
        token = line.split()[0]
        if token.startswith(PUBLIC_PREFIX):
            try:
                pyrage.x25519.Recipient.from_str(token)
            except pyrage.RecipientError:
                raise KeyProblem(f"{where} holds a damaged age public key ({token[:16]}…).") from None
            return token
        if line.startswith(SSH_PREFIXES):
            key = " ".join(line.split()[:2])
            try:
                pyrage.ssh.Recipient.from_str(key)
            except pyrage.RecipientError:
                raise KeyProblem(f"{where} holds an ssh public key age cannot use.") from None
            return key
    raise KeyProblem(f"{where} holds no public key: copy the line `agent key` prints on the "
                    f"other machine (it starts with {PUBLIC_PREFIX}).")


def recipient(public: str) -> pyrage.x25519.Recipient | pyrage.ssh.Recipient:
    """The age recipient of a public key parse_public accepted."""
    if public.startswith(SSH_PREFIXES):
        return pyrage.ssh.Recipient.from_str(public)
    return pyrage.x25519.Recipient.from_str(public)


def short(public: str) -> str:
    """A public key as a person compares it: its start and end."""
    body = public.split()[1] if public.startswith(SSH_PREFIXES) else public
    return f"{body[:10]}…{body[-6:]}"
