"""A vault's remotes as `agent remote` sees them: plain or encrypted, added, opened.

An encrypted remote is a git remote whose URL is `agent-crypt::URL` (git then runs
agent.sync.crypt.helper for it); nothing else in the vault's config marks it.
"""

from __future__ import annotations

import re

from agent.errors import UserError
from agent.sync.crypt import keys
from agent.sync.crypt.remote import PREFIX, CryptRemote, address
from agent.vault.repo import Vault

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def remote_urls(vault: Vault) -> dict[str, str]:
    """Every remote of the vault: name -> URL as configured."""
    out = vault.git("config", "--get-regexp", r"^remote\..*\.url$", check=False)
    urls = {}
    for line in out.splitlines():
        key, _, url = line.partition(" ")
        urls[key[len("remote."):-len(".url")]] = url
    return urls


def add(vault: Vault, name: str, url: str, encrypt: bool) -> str:
    """Add the remote `name` (its URL as configured, `agent-crypt::URL` when encrypted)."""
    if not _NAME.fullmatch(name):
        raise UserError(f"'{name}' is not a remote name: use letters, digits, '.', '_' or '-'.")
    have = remote_urls(vault)
    if name in have:
        raise UserError(f"This vault already has a remote named '{name}' ({have[name]}): "
                        f"choose another name, or remove it with `agent git remote remove {name}`.")
    bare = address(url)
    if bare is not None and not encrypt:
        encrypt = True                 # the URL says so already
    url = bare if bare is not None else url
    if not url.strip():
        raise UserError("Give the remote's URL (a path, ssh or https).")
    configured = PREFIX + url if encrypt else url
    vault.git("remote", "add", name, configured)
    return configured


def open_remote(vault: Vault, name: str, device: keys.DeviceKey | None = None) -> CryptRemote:
    """The encrypted remote `name`, read with this machine's key (UserError when there
    is no such remote, it is a plain one, or this machine has no key)."""
    urls = remote_urls(vault)
    if name not in urls:
        raise UserError(f"There is no remote named '{name}' in this vault (remotes: "
                        f"{', '.join(sorted(urls)) or 'none'}).")
    bare = address(urls[name])
    if bare is None:
        raise UserError(f"'{name}' is a plain remote ({urls[name]}): its host reads everything, "
                        f"and it has no devices to trust. `agent remote add NAME URL --encrypt` "
                        f"adds an encrypted one.")
    device = device or keys.load()
    if device is None:
        raise UserError("This machine has no key yet: run `agent key`.")
    return CryptRemote(vault.git_dir, bare, device, name)


def encrypted(vault: Vault) -> dict[str, str]:
    """The encrypted remotes: name -> the host's URL."""
    return {n: a for n, u in remote_urls(vault).items() if (a := address(u)) is not None}
