"""`agent web`: a one-time login link to the page of the running `agent serve`."""

from __future__ import annotations

import json
import os
import time

import click

from agent.cli.common import get_vault, json_option, vault_option


@click.command("web")
@click.option("--no-open", is_flag=True, help="Print the link only; do not open a browser.")
@json_option('{"url": ...} for scripts.')
@vault_option
def web_cmd(no_open, as_json):
    """Open the agent's web page: chat, memory and its history, review, search.

    Prints a login link with a one-time code (it works once, within five minutes) to the
    page `agent serve` serves on its [gateway] port, and opens it in your browser when
    there is a desktop ($DISPLAY or $WAYLAND_DISPLAY). agent serve must be running (one
    still starting is waited for)."""
    from agent.config import load_settings

    vault = get_vault()
    if load_settings(vault.root).gateway_port is None:
        raise click.ClickException(
            "The web page is served by agent serve on its [gateway] port, and none is set: "
            "run `agent config set gateway.port 8765`, start (or restart) `agent serve`, "
            "then `agent web` again.")
    url = _login(vault)
    if as_json:
        click.echo(json.dumps({"url": url}))
        return
    click.echo("Your agent's page (the link logs this browser in; it works once, within "
               "five minutes):\n")
    click.echo(f"  {url}\n")
    if not no_open and (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        import webbrowser

        if webbrowser.open(url):
            click.echo("Opened in your browser.")


STARTING = 60.0         # seconds a serve that holds its lock has to bring its gateway up


def _login(vault) -> str:
    """A login link from the vault's serve; one that is still starting (it holds the
    serve lock, its gateway is not up yet) is waited for, saying so."""
    from agent.serve.lock import holder
    from agent.serve.remote import Remote, RemoteError

    said, deadline = None, time.monotonic() + STARTING
    while True:
        try:
            return Remote.find(vault).web_login()
        except RemoteError:
            pid = holder(vault)
            if pid is None:                 # no serve: the error says how to start one
                if said is None:
                    raise
                raise click.ClickException(
                    f"agent serve (pid {said}) stopped before its web page was up: see "
                    f"{vault.state / 'serve.log'}, start it again, then `agent web`.") from None
            if said is None:
                said = pid or "?"
                click.echo(f"agent serve (pid {said}) is starting; waiting for its web "
                           f"page...", err=True)
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"agent serve (pid {said}) is still starting after {STARTING:.0f} s: see "
                    f"{vault.state / 'serve.log'}, then try `agent web` again.") from None
            time.sleep(0.2)


COMMANDS = [web_cmd]
