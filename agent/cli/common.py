"""What every command shares: the --vault option, opening the vault, reporting repairs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agent.errors import UserError
from agent.ops.vaults import init_vault, open_vault
from agent.vault.repo import Vault, resolve_path


class AgentGroup(click.Group):
    """Turns our own user errors into a one-line message and exit status 1, and lists
    each command with its whole one-line description (click cuts them at 45 columns).

    `lazy` names commands that live in other modules, as {name: (module, attribute,
    one-line description)}: a module is imported only when its command runs, so `agent
    note` does not pay for importing every command family, nor `agent --help`, which
    lists them from the descriptions given (tests/test_cli.py checks they match).
    """

    def __init__(self, *args, lazy: dict[str, tuple[str, str, str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx):
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx, name):
        if name not in self.commands and name in self.lazy:
            import importlib

            module, attribute, _ = self.lazy[name]
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        cmd = self.commands.get(name)
        if cmd is not None and cmd.epilog is None and ctx.parent is None:
            from agent.cli.topics import epilog

            cmd.epilog = epilog(name)
        return cmd

    def format_commands(self, ctx, formatter):
        from agent.cli.topics import grouped

        rows = {}
        for name in self.list_commands(ctx):
            if name in self.lazy and name not in self.commands:
                rows[name] = self.lazy[name][2]
                continue
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows[name] = cmd.get_short_help_str(limit=1000)
        # Topics for `agent --help`; a command family's own subcommands are few.
        topics = grouped(list(rows)) if ctx.parent is None else [("Commands", list(rows))]
        for title, names in topics:
            if names:
                with formatter.section(title):
                    formatter.write_dl([(n, rows[n]) for n in names])

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as e:
            err = click.ClickException(str(e))
            err.exit_code = getattr(e, "exit_code", 1)
            raise err from None


def _set_vault(ctx, param, value):
    if value is not None:
        ctx.meta["agent.vault.repo"] = value
    return value


def vault_option(f):
    """`--vault PATH` on a command (also accepted before the command name)."""
    return click.option("--vault", "vault_path", metavar="PATH", expose_value=False,
                        is_eager=True, callback=_set_vault,
                        help="The vault folder (default: the vault containing the current "
                             "folder, else $AGENT_VAULT, else ~/.agent/vault).")(f)


def json_option(what: str):
    """`--json` on a command: `what` says what it prints (the value arrives as as_json)."""
    return click.option("--json", "as_json", is_flag=True, help=what)


def vault_path() -> tuple[Path, str]:
    """The vault's path and where it came from: "option", "cwd", "env" or "default"."""
    ctx = click.get_current_context()
    return resolve_path(ctx.meta.get("agent.vault.repo"))


def get_vault() -> Vault:
    """The vault this command works on; the default one is made on first use."""
    path, source = vault_path()
    ctx = click.get_current_context()
    ctx.meta["agent.vault.source"] = source
    if source == "default" and not path.exists():
        vault, _ = init_vault(path)
        click.echo(f"Created a new vault at {path}", err=True)
        warn_if_identity_guessed(vault)
        ctx.meta["agent.vault.named"] = True
        return vault
    return open_vault(path)


def warn_if_identity_guessed(vault: Vault) -> None:
    """Say, once a vault is made, that hand edits would be committed under a made-up name."""
    if vault.identity.user_guessed():
        who = vault.identity.user()
        click.echo(f"Note: git has no user.name and user.email here, so your own edits will be "
                   f"committed as {who.name} <{who.email}>. Set them with: git config --global "
                   f'user.name "Your Name" && git config --global user.email you@example.org',
                   err=True)


def short_path(path: Path) -> str:
    """A path as a person writes it: ~/... under the home folder."""
    try:
        return "~/" + Path(path).relative_to(Path.home()).as_posix()
    except ValueError:
        return str(path)


def name_vault(vault: Vault) -> None:
    """Say which vault was changed, once, when it is not the current folder's (as chosen
    from $AGENT_VAULT or the default); a vault given with --vault or found from the
    current folder goes without saying."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.meta.get("agent.vault.named"):
        return
    if ctx.meta.get("agent.vault.source") in ("env", "default"):
        ctx.meta["agent.vault.named"] = True
        click.echo(click.style(f"(vault {short_path(vault.root)})", dim=True), err=True)


def read_stdin(what: str) -> str:
    """Text piped on stdin, as UTF-8; a one-line error naming the bad byte otherwise."""
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(f"The {what} piped on stdin is not UTF-8 text (byte 0x{data[e.start]:02x} "
                        f"on line {line}); convert it, e.g. with iconv -f latin1 -t utf-8. "
                        f"Nothing was changed.") from None


def report_recovery(vault: Vault) -> None:
    for line in vault.recovered:
        click.echo(f"Recovered: {line}", err=True)
    vault.recovered = []
    for line in vault.too_big:
        click.echo(f"Warning: {line}", err=True)
    vault.too_big = []


def after_change(vault: Vault, *, index: bool = True,
                 moved: tuple[str, str, list[str]] | None = None) -> None:
    """After a command's commit: bring the search index up to date (unless `index` is
    False), and name the vault when it is not the current folder's.

    `agent note` passes False: every search and every turn refreshes the index first
    (incrementally, from the commit it last saw), so a one-line note need not pay for
    importing and updating it (about 25 ms of its 100 ms budget). `moved`: how HEAD moved
    when the command knows every path it changed (a sync's), for the index.
    """
    name_vault(vault)
    if index:
        # The refresh alone (agent.search.update), not the search it serves: a command
        # that changed files has no query to rank.
        from agent.search import update
        update.refresh(vault, after_commit=True, moved=moved)


def page(text: str, use_pager: bool = True) -> None:
    """Print `text`, through $PAGER (default less) when asked and stdout is a terminal;
    like git, LESS defaults to FRX (quit if one screen, keep colours, leave no blank
    screen), and an empty PAGER or `cat` means no pager."""
    import os
    import subprocess
    import sys

    pager = os.environ.get("AGENT_PAGER", os.environ.get("PAGER", "less")).strip()
    if not use_pager or not sys.stdout.isatty() or pager in ("", "cat"):
        click.echo(text)
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    env.setdefault("LV", "-c")
    try:
        proc = subprocess.Popen(pager, shell=True, stdin=subprocess.PIPE, env=env)
    except OSError:
        click.echo(text)
        return
    try:
        assert proc.stdin is not None            # stdin=PIPE
        proc.stdin.write((text + "\n").encode("utf-8", "replace"))
        proc.stdin.close()
    except BrokenPipeError:          # the person quit the pager early
        pass
    while True:
        try:
            proc.wait()
            break
        except KeyboardInterrupt:    # as git: Ctrl-C is the pager's to handle
            continue


def quiet_logs() -> None:
    """Our modules' log lines are for `agent serve`'s log; a command in the terminal
    reports what matters itself (once), so Python's last-resort printing of warnings
    to stderr is turned off for them."""
    import logging

    logging.getLogger("agent").addHandler(logging.NullHandler())


def settings_of(vault: Vault):
    """The vault's settings (agent.toml), for the provider a command makes."""
    from agent.config import load_settings

    return load_settings(vault.root)
