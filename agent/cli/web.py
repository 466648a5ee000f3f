"""`agent web`: a one-time login link to the page of the running `agent serve`."""

from __future__ import annotations

import json
import os

import click

from agent.cli.common import get_vault, vault_option


@click.command("web")
@click.option("--no-open", is_flag=True, help="Print the link only; do not open a browser.")
@click.option("--json", "as_json", is_flag=True, help='{"url": ...} for scripts.')
@vault_option
def web_cmd(no_open, as_json):
    """Open the agent's web page: chat, memory and its history, review, search.

    Prints a login link with a one-time code (it works once, within five minutes) to the
    page `agent serve` serves on its [gateway] port, and opens it in your browser when
    there is a desktop ($DISPLAY or $WAYLAND_DISPLAY). agent serve must be running."""
    from agent.serve.remote import Remote

    from agent.config import load_settings

    vault = get_vault()
    if load_settings(vault.root).gateway_port is None:
        raise click.ClickException(
            "The web page is served by agent serve on its [gateway] port, and none is set: "
            "run `agent config set gateway.port 8765`, start (or restart) `agent serve`, "
            "then `agent web` again.")
    remote = Remote.find(vault)           # RemoteError: no serve, and how to start one
    url = remote.web_login()
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


COMMANDS = [web_cmd]
