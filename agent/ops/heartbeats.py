"""Heartbeats turned on and off: the one implementation `agent heartbeat enable|disable`
and the web page's Schedules call."""

from __future__ import annotations

from agent.errors import UserError, did_you_mean
from agent.stores import heartbeat as hbmod
from agent.vault.change import Change


def find(vault, name: str):
    """The heartbeat `name` (UserError naming the known ones, or its file's problem)."""
    beats, problems = hbmod.load_all(vault.root)
    hb = next((b for b in beats if b.name == name), None)
    if hb is None:
        broken = [p for p in problems if p.startswith(f"{hbmod.FOLDER}/{name}.md")]
        if broken:
            raise UserError(broken[0])
        known = ", ".join(b.name for b in beats) or "none"
        raise UserError(f"No heartbeat {name!r} in heartbeat/."
                        f"{did_you_mean(name, [b.name for b in beats])} Heartbeats: {known}")
    return hb


def set_enabled(vault, name: str, enabled: bool):
    """(the heartbeat, the commit's sha or None when it already was so): `enabled:` set
    in its file, nothing else changed; on a vault with a remote, enabling it marks it
    as this machine's."""
    with vault.locked():
        hb = find(vault, name)
        if hb.enabled == enabled:
            return hb, None
        text = hbmod.with_enabled(vault.read_text(hb.path), enabled, hb.path)
        if enabled and hb.host is None and vault.has_remote():
            # A vault on several machines: it runs on this one only.
            text = hbmod.with_field(text, "host", vault.host(), hb.path)
        vault.write_text(hb.path, text)
        word = "enable" if enabled else "disable"
        sha = vault.commit(Change("heartbeat", f'{word} "{hb.name}"'))
    return hb, sha
