"""Who a vault's commits are by and which machine it is on: `VaultIdentity`, the part a
`Vault` owns as `vault.identity`.

The agent's name and email come from agent.toml (remembered in .agent/identity.json
while the file is unchanged), the person's from git's config, and this machine's name
for the vault from `git config agent.host` (the cron jobs and heartbeats marked with it
run here).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import stat
import time
from pathlib import Path

from agent.fs import atomic
from agent.schedule import HOST_NAME
from agent.vault.change import Identity
from agent.vault.git import VaultError
from agent.vault.parts import Repository

IDENTITY_FILE = "identity.json"     # in .agent/: what agent.toml said, and its stamp
HOST_KEY = "agent.host"


def check_host(name: str) -> str:
    """A machine name as jobs and heartbeats store it; VaultError says what is allowed."""
    name = str(name).strip()
    if not HOST_NAME.match(name):
        raise VaultError(f"{name!r} is not a machine name: use letters, digits, '.', '_' "
                         f"and '-' (as in laptop or home-server)")
    return name


def default_host() -> str:
    """The hostname's first label, as a machine name ("machine" if it has none)."""
    import socket
    label = (socket.gethostname() or "").split(".")[0]
    label = re.sub(r"[^A-Za-z0-9._-]", "-", label).strip("-._")[:63]
    return label or "machine"


def _stamp(path: Path) -> list[int] | None:
    """A regular file's inode, size, modification and change times (None: no such file,
    or not a regular one): what changes whenever its content does."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class VaultIdentity:
    """The agent's and the person's identities and this machine's name (module doc)."""

    def __init__(self, vault: Repository):      # the Vault that owns this part
        self.vault = vault
        self._agent: Identity | None = None
        self._host: str | None = None

    def agent(self) -> Identity:
        """The agent's name and email from agent.toml; a SettingsError when agent.toml is
        broken. An agent.toml unchanged (same size and times) since it was last read
        whole here is not parsed again: what it said is kept in .agent/identity.json, so
        a command that commits nothing (a sync with nothing to do) loads no TOML parser."""
        if self._agent is not None:
            return self._agent
        root, state = self.vault.root, self.vault.state
        stamp = _stamp(root / "agent.toml")
        cached = atomic.read_json(state / IDENTITY_FILE) if stamp else None
        if isinstance(cached, dict) and cached.get("stamp") == stamp and \
                isinstance(cached.get("name"), str) and isinstance(cached.get("email"), str):
            self._agent = Identity(cached["name"], cached["email"])
            return self._agent
        from agent.config import load_settings  # local: config reads agent.toml
        s = load_settings(root)
        self._agent = Identity(s.agent_name, s.agent_email)
        # A file changed within the last seconds might change again within the same
        # clock tick, unseen by its times: it is read whole until it is older.
        if stamp and time.time() - stamp[2] / 1e9 > 2 and state.is_dir():
            with contextlib.suppress(OSError):     # a cache: the next read tries again
                atomic.write_json(state / IDENTITY_FILE, {
                    "stamp": stamp, "name": s.agent_name, "email": s.agent_email})
        return self._agent

    def assume_agent(self, identity: Identity) -> None:
        """Commit as `identity` in this process, whatever agent.toml says (`agent config`
        repairing a broken agent.toml commits its fix under the identity it can read)."""
        self._agent = identity

    def user_guessed(self) -> bool:
        """True when git has no user.name or user.email for this vault, so hand edits are
        committed under a name made from the login (root <root@host>)."""
        return not all(os.environ.get(f"GIT_AUTHOR_{k.upper()}", "").strip()
                       or self.vault.git("config", f"user.{k}", check=False).strip()
                       for k in ("name", "email"))

    def user(self) -> Identity:
        """The user's git identity, or a fallback named after the login when none is set."""
        # $GIT_AUTHOR_NAME / $GIT_AUTHOR_EMAIL first, as git itself honours them.
        name = (os.environ.get("GIT_AUTHOR_NAME", "").strip()
                or self.vault.git("config", "user.name", check=False).strip())
        email = (os.environ.get("GIT_AUTHOR_EMAIL", "").strip()
                 or self.vault.git("config", "user.email", check=False).strip())
        if name and email:
            return Identity(name, email)
        login = getpass.getuser() or "user"
        import socket
        return Identity(name or login, email or f"{login}@{socket.gethostname() or 'localhost'}")

    def host(self, known: str | None = None) -> str:
        """This machine's name for the vault (`git config agent.host` in the vault's own,
        unversioned config): the cron jobs and heartbeats marked with it run here.
        Set from the hostname the first time it is asked for. `known`: the value the
        caller already read from the vault's config."""
        if self._host is None and known and known.strip():
            self._host = known.strip()
        if self._host is None:
            name = self.vault.git("config", "--local", HOST_KEY, check=False).strip()
            if not name:
                name = default_host()
                # Saved so that renaming the computer later does not orphan its jobs.
                self.vault.git("config", "--local", HOST_KEY, name, check=False)
            self._host = name
        return self._host

    def set_host(self, name: str) -> str:
        """Name this machine `name` for the vault (VaultError when it is no machine name)."""
        name = check_host(name)
        self.vault.git("config", "--local", HOST_KEY, name)
        self._host = name
        return name
