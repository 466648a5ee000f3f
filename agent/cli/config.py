"""`agent config check|get|set|list`: the settings of agent.toml, by the one schema of
agent.config. `set` changes one line with tomlkit, so the file's comments and layout
stay as the person wrote them, and commits it."""

from __future__ import annotations

import json

import click

from agent import config as cfg
from agent.cli import complete
from agent.cli.common import (AgentGroup, after_change, get_vault, json_option, report_recovery,
                              vault_option)
from agent.vault.change import Change
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.vault.repo import Vault


def _show(value) -> str:
    """A value as `config get` prints it: strings bare, the rest as TOML."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(v, ensure_ascii=False) for v in value) + "]"
    return str(value)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (str, list)) else str(value)


def _effective(data: dict, k: cfg.Key):
    """(value, set in the file?) of a setting."""
    table = cfg.table_of(data, k.section)
    if isinstance(table, dict) and k.name in table:
        return table[k.name], True
    if k.key == "dream.model":
        model = (data.get("model") or {}).get("name") if isinstance(data.get("model"), dict) else None
        return model or cfg.DEFAULT_MODEL, False
    return k.default, False


@click.group(cls=AgentGroup)
@vault_option
def config():
    """Check, show and change the settings of agent.toml (keeping its comments)."""


@config.command("check")
@vault_option
def config_check():
    """Validate agent.toml: every key known, every value of the right type and range, and
    every key it sends going where this machine approved."""
    vault = get_vault()
    path = cfg.path_of(vault.root)
    data, text = cfg.read_data(vault.root)
    if text is None:
        click.echo(f"{path}: none; the defaults apply (agent config list shows them).")
        return
    found = cfg.findings(data)
    for p in found:             # the findings are this command's result: on stdout, as a linter's
        click.echo(f"{path}: {p}")
    # An unknown key may be a newer version's setting, synced from another machine.
    for w in cfg.unknown(data):
        click.echo(f"{path}: warning: {w}; ignored")
    if found:
        raise SystemExit(1)
    # Sound as a file, but a key it sends somewhere this machine has not approved does
    # not go: not ok here yet (agent.config.keys).
    from agent.ops.keys import not_approved
    waiting = [p.refusal() for p in not_approved(cfg.load_settings(vault.root))]
    for line in waiting:
        click.echo(f"{path}: {line}")
    if waiting:
        raise SystemExit(1)
    n = sum(len(t) for t in data.values() if isinstance(t, dict))
    click.echo(f"{path}: ok ({n} setting{'s' * (n != 1)}, the rest default)")


@config.command("list")
@json_option("One JSON object per setting (JSON Lines): key, value, set.")
@vault_option
def config_list(as_json):
    """Every setting, its value and whether it is the default."""
    vault = get_vault()
    data, _ = cfg.read_data(vault.root)
    if as_json:
        from agent.cli.output import records

        records({"key": k.key, "value": value, "set": is_set}
                for k in cfg.SCHEMA for value, is_set in [_effective(data, k)])
        return
    width = max(len(k.key) for k in cfg.SCHEMA)
    for k in cfg.SCHEMA:
        value, is_set = _effective(data, k)
        # As `config get`: a default with a value is shown as the value; a setting with
        # none (whose absence means something, as "serve does not sync") is unset.
        if value is None:
            click.echo(f"{k.key:<{width}}  (unset)")
        else:
            click.echo(f"{k.key:<{width}}  {_toml(value)}{'' if is_set else '  (default)'}")


@config.command("get")
@click.argument("key", shell_complete=complete.settings)
@vault_option
def config_get(key):
    """Print one setting's value (the default when agent.toml does not set it); exit
    status 1, as git config, for a setting that is unset and has no default value."""
    k = cfg.find_key(key)
    vault = get_vault()
    data, _ = cfg.read_data(vault.root)
    bad = [p for p in cfg.problems(data) if p.startswith((f"{key} ", f"[{k.section}]"))]
    if bad:
        raise cfg.SettingsError(f"{cfg.path_of(vault.root)}: {bad[0]}")
    value, _ = _effective(data, k)
    if value is None:       # as git config: nothing on stdout, exit 1; what that means on stderr
        click.echo(f"{key} is not set: {k.help}.", err=True)
        raise SystemExit(1)
    click.echo(_show(value))


@config.command("set")
@click.argument("key", shell_complete=complete.settings)
@click.argument("value")
@vault_option
def config_set(key, value):
    """Set one setting: agent config set chat.window_tokens 32000 (one commit)."""
    import tomlkit
    import tomllib

    k = cfg.find_key(key)
    new = cfg.parse_value(k, value)
    wrong = cfg.check_value(k, new)
    if wrong:
        raise cfg.SettingsError(f"{key} {wrong}")
    vault = get_vault()
    path = cfg.path_of(vault.root)
    identity_despite_problems(vault)
    with vault.locked():
        report_recovery(vault)
        before, text = cfg.read_data(vault.root)
        doc = tomlkit.parse(text or "")
        table = doc
        for n, part in enumerate(k.section.split(".")):
            if not isinstance(table, dict):
                break
            if table.get(part) is None:
                # [channels.telegram] alone, not an empty [channels] above it
                table[part] = tomlkit.table(is_super_table=n < k.section.count("."))
            table = table[part]
        if not isinstance(table, dict):
            raise cfg.SettingsError(f"{path}: [{k.section}] is not a table; fix it by hand "
                                    f"(agent edit agent.toml)")
        if table.get(k.name) == new and text is not None:
            click.echo(f"{key} is already {_toml(new)}; nothing changed.")
            return
        table[k.name] = new
        out = tomlkit.dumps(doc)
        worse = set(cfg.problems(tomllib.loads(out))) - set(cfg.problems(before))
        if worse:
            raise cfg.SettingsError(f"{path}: {sorted(worse)[0]}")
        vault.write_text(cfg.FILE, out)
        sha = vault.commit(Change("config", f"set {key} = {_toml(new)}"))
    after_change(vault)
    click.echo(f"{key} = {_toml(new)}  ({(sha or '')[:7]})")


def identity_despite_problems(vault: Vault) -> None:
    """The lock reads the agent's identity from agent.toml and refuses a broken file; to
    let `config set` repair one, take the identity from what of it is sound."""
    try:
        vault.agent_identity()
    except cfg.SettingsError:
        from agent.vault.change import Identity

        data, _ = cfg.read_data(vault.root)       # a syntax error is still refused
        name_key, email_key = cfg.KEYS["identity.name"], cfg.KEYS["identity.email"]
        found = data.get("identity")
        ident: dict[str, Any] = found if isinstance(found, dict) else {}
        name = ident.get("name", name_key.default)
        email = ident.get("email", email_key.default)
        if cfg.check_value(name_key, name) or cfg.check_value(email_key, email):
            name, email = name_key.default, email_key.default
        vault.identity.assume_agent(Identity(name, email))


COMMANDS = [config]
