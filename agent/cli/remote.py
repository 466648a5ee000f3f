"""`agent remote` (a vault's remotes; the devices an encrypted one is encrypted for) and
`agent key` (this machine's key)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agent.cli.common import get_vault, json_option, vault_option


@click.group("remote")
def remote_group():
    """The vault's remotes, and the devices an encrypted one is readable by.

    An encrypted remote (--encrypt) sends its host only ciphertext: no file, name,
    commit message, author or history it can read. Each machine has its own key
    (`agent key`); another machine is trusted with `agent remote trust`."""


@remote_group.command("add")
@click.argument("name")
@click.argument("url")
@click.option("--encrypt", is_flag=True, help="Keep the vault on this host encrypted: the "
              "host stores and sees only ciphertext (start with an empty repository).")
@vault_option
def add_cmd(name, url, encrypt):
    """Add a remote to sync with (a path, ssh or https URL)."""
    from agent.clock import now
    from agent.ops import remotes

    added = remotes.add(get_vault(), name, url, encrypt, now())
    if not added.encrypted:
        click.echo(f"Added {name} ({added.url}). `agent sync` sends the vault there; its "
                   f"host can read everything (`--encrypt` for a host that cannot).")
        return
    key = added.key
    assert key is not None
    click.echo(f"Added {name}, encrypted ({added.url}): its host sees only ciphertext.")
    if added.key_made:
        click.echo(f"Made this machine's key, {key.path}: without it (or another trusted "
                   f"machine) the remote cannot be read by anyone. Keep a copy somewhere safe.")
    click.echo(f"This machine: {key.public}. `agent sync` fills the remote; `agent remote "
               f"trust {name} FILE` lets another machine read it.")


@remote_group.command("list")
@json_option("One JSON object a remote (JSON Lines).")
@vault_option
def list_cmd(as_json):
    """List the remotes; for an encrypted one, the devices it is encrypted for."""
    from agent.ops import remotes

    infos = remotes.listing(get_vault())
    if as_json:
        from agent.cli.output import records
        records(i.as_dict() for i in infos)
        return
    if not infos:
        click.echo("No remotes: `agent remote add origin URL [--encrypt]` adds one.")
        return
    from agent.sync.crypt import keys
    mine = keys.load()
    for i in infos:
        kind = "encrypted" if i.encrypted else "plain: its host reads everything"
        click.echo(f"{i.name}\t{i.url}\t({kind})")
        if i.problem:
            click.echo(f"  {i.problem}")
        if i.fingerprint:
            click.echo(f"  fingerprint {i.fingerprint}")
        for d in i.devices:
            this = " (this machine)" if mine is not None and d.key == mine.public else ""
            click.echo(f"  device {d.name}{this}: {keys.short(d.key)}, trusted {d.added[:10]}")


@remote_group.command("trust")
@click.argument("name")
@click.argument("keyfile", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option("--name", "label", default="", help="What to call that device (default: the "
              "key file's name).")
@vault_option
def trust_cmd(name, keyfile, label):
    """Let another machine read the encrypted remote NAME (KEYFILE: its `agent key`)."""
    from agent.clock import now
    from agent.ops import remotes

    if str(keyfile) == "-":
        text, where, default = sys.stdin.read(100_000), "standard input", ""
    else:
        text, where = remotes.read_key_file(keyfile), str(keyfile)
        default = keyfile.name.split(".")[0]
    done = remotes.trust(get_vault(), name, text, label or default, now(), where)
    n = len(done.manifest.devices)
    click.echo(f"Trusted {done.device.name} ({done.device.key}) for {name}: its manifest is "
               f"now encrypted for {n} device{'s' * (n != 1)}.")
    click.echo(f"On that machine: {done.clone_command()}")


@remote_group.command("untrust")
@click.argument("name")
@click.argument("key")
@vault_option
def untrust_cmd(name, key):
    """Stop encrypting the remote NAME for a device (its key, or its name)."""
    from agent.ops import remotes

    done = remotes.untrust(get_vault(), name, key)
    n = len(done.manifest.devices)
    click.echo(f"Untrusted {done.device.name} ({done.device.key}) for {name}: what is "
               f"pushed from now on is sealed to a new key it never had ({n} device"
               f"{'s' * (n != 1)} left). It could read what it synced before; remove its "
               f"access to the host too.")


@click.command("key")
@click.option("--path", "show_path", is_flag=True, help="Print where the key file is instead.")
def key_cmd(show_path):
    """Print this machine's public key (made on first use), for `agent remote trust`.

    The key file (AGENT_KEY_FILE, else ~/.config/agent/key.txt) stays on this machine,
    readable by you only, never in the vault. If every machine that can read an
    encrypted remote loses its key, what the remote holds is unrecoverable: trust a
    second machine, or keep a copy of the file somewhere safe."""
    from agent.clock import now
    from agent.ops import remotes
    from agent.sync.crypt import keys

    if show_path:
        click.echo(str(keys.key_path()))
        return
    key, made = remotes.device_key(now())
    click.echo(key.public)
    if made:
        click.echo(f"Made this machine's key: {key.path} (keep a copy somewhere safe). On a "
                   f"machine that syncs the vault, save the line above to a file and run "
                   f"`agent remote trust NAME FILE`.", err=True)


COMMANDS = [remote_group, key_cmd]
