"""The checks of `agent doctor` (and of the web page's Settings): each gives ok, warn or
fail with one line, and for what is not ok one line on how to fix it."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass

from agent.vault.repo import git_version
from agent.vault import gitcmd
from agent.errors import UserError
from typing import Callable, TYPE_CHECKING

if TYPE_CHECKING:
    from agent.config import Settings
    from agent.vault.repo import Vault

# A channel's own check of its settings: (ok, detail, fix).
TelegramCheck = Callable[["Settings"], tuple[bool, str, str]]

MIN_GIT = (2, 31)


@dataclass
class Check:
    name: str
    status: str          # "ok", "warn" or "fail"
    detail: str
    fix: str = ""


def _git() -> Check:
    try:
        out = git_version()
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("git", "fail", f"git does not run ({e})", "install git 2.31 or newer")
    m = re.search(r"(\d+)\.(\d+)", out)
    version = tuple(int(x) for x in m.groups()) if m else (0, 0)
    if version < MIN_GIT:
        return Check("git", "fail", f"{out}: too old", "install git 2.31 or newer")
    return Check("git", "ok", out)


def _sandbox() -> Check:
    try:
        from agent import sandbox          # the `exec` tool's sandbox, where it exists
    except ImportError:
        sandbox_status = None
    else:
        sandbox_status = getattr(sandbox, "sandbox_status", None)
    if sandbox_status is not None:
        st = sandbox_status()
        return Check("sandbox", "ok" if st.ok else "warn", st.message,
                     "" if st.ok else "the agent works without it, but runs no shell commands")
    path = shutil.which("bwrap")
    if path is None:
        return Check("sandbox", "warn", "bwrap (bubblewrap) not found",
                     "install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap) to "
                     "let the agent run commands in a sandbox")
    try:
        v = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("sandbox", "warn", f"bwrap at {path} does not run ({e})",
                     "reinstall bubblewrap")
    return Check("sandbox", "ok", f"{v.stdout.strip() or 'bwrap'} at {path}")


def _settings(vault: Vault) -> tuple[Check, Settings | None]:
    from agent import config as cfg

    path = cfg.path_of(vault.root)
    try:
        data, text = cfg.read_data(vault.root)
    except cfg.SettingsError as e:
        return Check("agent.toml", "fail", str(e), "fix the file (agent edit agent.toml)"), None
    unknown: list[str] = []
    found = cfg.problems(data, unknown=unknown)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        return Check("agent.toml", "fail", f"{found[0]}{more}",
                     "agent config check lists them; agent config set KEY VALUE fixes one"), None
    settings = cfg.from_data(data, str(path))
    from agent import schedule as sched
    try:
        sched.check_cron(settings.dream_schedule)
    except sched.ScheduleError as e:
        return Check("agent.toml", "fail", f"dream.schedule: {e}",
                     "agent config set dream.schedule '0 3 * * *'"), settings
    if unknown:
        return Check("agent.toml", "warn", f"{unknown[0]} (from a newer version?): ignored"
                     f"{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''}",
                     "agent config check lists them; remove a line this version does not "
                     "know, or upgrade agent"), settings
    return Check("agent.toml", "ok", "valid" if text is not None else "none; defaults apply"), settings


def _wanted(settings: Settings) -> list[str]:
    """The models agent.toml names: chat's, its fallbacks, the dream's (no repeats)."""
    wanted = [settings.model, *settings.fallback_models, settings.dream_model]
    return [m for i, m in enumerate(wanted) if m not in wanted[:i]]


def _api(settings: Settings | None) -> list[Check]:
    """Each provider a configured model names: its key, whether it answers, and whether
    it serves the models (Anthropic's own checks keep their names, "API key" and
    "models"). A provider that only a fallback names is a warning when its key is not
    set: a local set-up need not carry a vendor's key for a fallback it may never use.
    A provider whose key this machine has not said may go where it answers is named so,
    and not called (the call would send the key)."""
    from agent.llm.spec import split

    by_provider: dict[str, list[str]] = {}
    needed: set[str] = set()             # providers of the chat or the dream model
    for m in _wanted(settings) if settings is not None else []:
        name, bare = split(m)
        by_provider.setdefault(name, []).append(bare)
        if settings is not None and m in (settings.model, settings.dream_model):
            needed.add(name)
    out = [] if settings is None else _keys(settings)
    blocked = {c.name.removeprefix("key of ") for c in out}
    anthropic = by_provider.pop("anthropic", None)
    if "anthropic" not in blocked:
        out += _anthropic(settings, anthropic,
                          fallback_only=anthropic is not None and "anthropic" not in needed)
    for name, models in by_provider.items():
        if name not in blocked:
            out.append(_provider(settings, name, models, fallback_only=name not in needed))
    return out


def _keys(settings: Settings) -> list[Check]:
    """Each key agent.toml sends where this machine has not approved it (agent.config.keys):
    named `key of PROVIDER` (or `key of telegram`), with the command that approves it."""
    from agent.ops.keys import not_approved

    out = []
    for pair in not_approved(settings):
        who = pair.where.removeprefix("providers.").replace("channels.telegram.api_base",
                                                             "telegram")
        fix = (f"agent keys approve {pair.env} {pair.origin} (if you mean it)"
               if pair.state() == "unapproved" else
               f"give providers.{who} a key variable of its own (agent config set "
               f"providers.{who}.key_env NAME)")
        out.append(Check(f"key of {who}", "fail", f"${pair.env} would go to {pair.origin}, "
                         f"which this machine has not approved", fix))
    return out


def _fallback_without_key(variable: str, models: list[str], name: str) -> Check:
    which = ", ".join(models)
    return Check(name, "warn", f"{variable} is not set: the fallback {which} cannot answer "
                 f"(chat and the dream do not need it)",
                 f"export {variable}=... to fall back to it, or agent config set "
                 f"model.fallbacks \"\" to have no fallback")


def _anthropic(settings: Settings | None, models: list[str] | None, *,
               fallback_only: bool = False) -> list[Check]:
    """The key present and accepted (one authenticated call listing the models), and
    the models of agent.toml known to the API."""
    if settings is not None and models is None:
        return []           # no model of agent.toml is Anthropic's: no key needed
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
    if not key:
        if fallback_only:
            return [_fallback_without_key("ANTHROPIC_API_KEY", models or [], "API key")]
        return [Check("API key", "fail", "ANTHROPIC_API_KEY is not set",
                      "export ANTHROPIC_API_KEY=sk-ant-... (from console.anthropic.com)")]
    from agent.llm import ProviderError, make_provider

    provider = make_provider(settings, max_retries=0, timeout=15, model="anthropic/")
    where = os.environ.get("ANTHROPIC_BASE_URL") or "the Anthropic API"
    try:
        known = set(provider.backend("anthropic").list_models())
    except ProviderError as e:
        if e.status == 401:
            return [Check("API key", "fail", "ANTHROPIC_API_KEY was refused (HTTP 401)",
                          "check ANTHROPIC_API_KEY: a current key from console.anthropic.com")]
        if e.status == 403:
            return [Check("API key", "fail", "ANTHROPIC_API_KEY may not use the API (HTTP 403)",
                          "check the key's workspace and permissions")]
        if e.status is None:
            return [Check("API key", "fail", f"could not reach {where}: {e.detail or e}",
                          "check the network (and ANTHROPIC_BASE_URL if set)")]
        if e.status == 404:     # a wrong address, not a busy one: waiting will not help
            return [Check("API key", "fail", f"{where} answered HTTP 404: no Anthropic API there",
                          "check ANTHROPIC_BASE_URL (unset it for the Anthropic API; it is "
                          "the address without /v1)")]
        return [Check("API key", "warn", f"{where} answered HTTP {e.status}",
                      "try again later")]
    out = [Check("API key", "ok", f"set and accepted by {where}")]
    if settings is None:
        return out
    unknown = [m for m in models or [] if m not in known]
    if unknown:
        out.append(Check("models", "fail", f"unknown to the API: {', '.join(unknown)}",
                         "agent config set model.name NAME (with a model the API lists)"))
    else:
        out.append(Check("models", "ok", ", ".join(models or [])))
    return out


def _provider(settings: Settings | None, name: str, models: list[str], *,
              fallback_only: bool = False) -> Check:
    """One provider of `[providers.NAME]` (or the built-in openai): its key where it
    needs one, reachable, and every model of agent.toml served (agent.ops.models: listed
    by its /v1/models under its name, a file or a tag, or answered by a local server
    that takes any name)."""
    from agent.llm import make_provider
    from agent.ops.models import listing, served

    what = f"provider {name}"
    router = make_provider(settings, max_retries=0, timeout=15, lazy=True)
    spec = router.specs[name]
    found = listing(router, name)
    if found.no_key:
        if fallback_only:
            return _fallback_without_key(f"${spec.key_env}", models, what)
        return Check(what, "fail", f"${spec.key_env} is not set",
                     f"export {spec.key_env}=... (the key of {spec.url})")
    if found.problem is not None:
        if found.status in (401, 403):
            return Check(what, "fail", f"{spec.url} refused the key (HTTP {found.status})",
                         f"check ${spec.key_env}" if spec.key_env else
                         f"agent config set providers.{name}.key_env NAME_OF_ITS_KEY_VARIABLE")
        if found.status is None:
            fix = ("start the server (ollama serve, llama-server -m FILE, ...)" if spec.local
                   else "check the network") + f", or agent config set providers.{name}.base_url URL"
            return Check(what, "fail", f"cannot reach {spec.url}: {found.problem}", fix)
        return Check(what, "fail", f"{spec.url} answered HTTP {found.status} to /models",
                     f"check providers.{name}.base_url (it ends in /v1 for most servers)")
    how = {m: served(router, found, m) for m in models}
    missing = [m for m in models if how[m].how == "missing"]
    if missing:
        fix = (f"ollama pull {missing[0]} (or the server's own way to load it)" if spec.local
               else f"agent config set model.name {name}/NAME with a model it lists")
        return Check(what, "fail", f"{spec.url} does not list {', '.join(missing)}", fix)
    key = f"key from ${spec.key_env}" if spec.key_env else "no key needed"
    said = "; ".join(how[m].describe(m, found.ids) for m in models)
    return Check(what, "ok", f"{spec.url} answers, {said} ({key})")


def _index(vault: Vault) -> Check:
    """Bring the index up to date (as any search would) and say what it holds."""
    from agent.search import index

    try:
        index.refresh(vault)
        st = index.status(vault)
    except (OSError, sqlite3.Error, UserError) as e:     # a damaged index: reported
        return Check("index", "fail", f"{index.db_path(vault)} is unusable ({e})",
                     "agent index rebuild")
    docs = sum(st.documents.values())
    if st.problems:
        return Check("index", "warn", f"{docs} documents; skipped: {st.problems[0]}",
                     "fix the file named")
    return Check("index", "ok", f"{docs} documents, up to date")


def _fsck(vault: Vault) -> Check:
    problem = gitcmd.fsck(vault)
    if problem:
        return Check("git fsck", "fail", problem,
                     "the repository is damaged: restore it from a clone or backup")
    return Check("git fsck", "ok", "the repository is sound")


def _checkout(vault: Vault) -> Check | None:
    """An interrupted sync whose checkout git refuses: every writing command fails
    until it is given up (None when there is none)."""
    from agent.vault.journal import FIX_CHECKOUT

    problem = vault.journal.checkout_problem()
    if problem is None:
        return None
    return Check("sync journal", "fail", problem,
                 f"{FIX_CHECKOUT} (goes back to the commit before that sync; your files "
                 f"and edits are kept)")


def _cron(vault: Vault) -> Check:
    from agent.stores import cronfile
    from agent.errors import UserError

    try:
        cf = cronfile.read(vault.root)
    except UserError as e:
        return Check("cron.json", "fail", str(e), "fix it by hand (agent edit cron.json)")
    n = len(cf.jobs)
    return Check("cron.json", "ok", f"{n} job{'s' * (n != 1)}")


def _heartbeats(vault: Vault) -> Check:
    from agent.stores import heartbeatfile

    beats, problems = heartbeatfile.load_all(vault.root)
    if problems:
        return Check("heartbeats", "fail", problems[0], "fix the file named")
    n = len(beats)
    return Check("heartbeats", "ok", f"{n} parsed ({sum(b.enabled for b in beats)} enabled)")


def _skills(vault: Vault) -> Check:
    from agent.stores import skills

    found = skills.discover(vault.root)
    broken = [s for s in found if s.problem]
    if broken:
        return Check("skills", "fail", broken[0].problem or "", "fix the file named")
    return Check("skills", "ok", f"{len(found)} ({', '.join(s.name for s in found)})")


def _cursor(vault: Vault) -> Check | None:
    """Only when `.dream_cursor` does not parse: what is wrong, and that the commands that
    show where the dream stands read it as far as it is valid."""
    from agent.stores import archive

    _, problem = archive.read_what_parses(vault.root)
    if problem is None:
        return None
    return Check(".dream_cursor", "warn", f"{problem}; read as far as it is valid",
                 "agent edit .dream_cursor: one archive id or range (1-41) a line, or "
                 "restore it with git checkout HEAD~1 -- .dream_cursor")


def _held(vault: Vault) -> Check:
    from agent.sync import held

    items = held.pending(vault)
    if not items:
        return Check("held", "ok", "none: every change a sync brought in was taken")
    n = len(items)
    return Check("held", "warn",
                 f"{n} incoming change{'s' * (n != 1)} a sync did not take: "
                 f"{', '.join(h.key for h in items)}",
                 "review them with `agent sync held`, then `agent sync accept FILE` or "
                 "`agent sync reject FILE`")


def _telegram(settings: Settings | None, check: TelegramCheck | None) -> list[Check]:
    """Only when [channels.telegram] is enabled: the token accepted, who may talk (the
    channel's own `check`, given by the front-end: the channel lives in serve)."""
    if settings is None or not getattr(settings, "telegram_enabled", False) or check is None:
        return []
    from agent.config import keys
    if keys.telegram_pair(settings.telegram_api_base).refusal() is not None:
        return []               # named by _keys, and not sent there to find out
    ok, detail, fix = check(settings)
    return [Check("telegram", "ok" if ok else "fail", detail, fix)]


def _mcp(vault: Vault, settings: Settings | None) -> list[Check]:
    """Only when agent.toml names MCP servers: the enabled ones not approved here."""
    if settings is None or not (settings.raw.get("mcp") or {}).get("servers"):
        return []
    from agent.chat.mcp_client import approval
    from agent.chat.mcp_client.client import load_configs

    configs = [c for c in load_configs(settings.raw) if c.enabled]
    waiting = [c.name for c in configs if approval.status(vault.root, c) != "approved"]
    if waiting:
        return [Check("MCP servers", "warn", f"not approved on this machine: {', '.join(waiting)}",
                      f"review agent.toml, then run agent mcp approve {waiting[0]}")]
    return [Check("MCP servers", "ok", f"{len(configs)} approved on this machine")]


def _identity(vault: Vault) -> Check | None:
    """Warn when hand edits would be committed under a name made from the login."""
    if not vault.identity.user_guessed():
        return None
    who = vault.identity.user()
    return Check("identity", "warn", f"git has no user.name and user.email: your edits are "
                 f"committed as {who.name} <{who.email}>",
                 'git config --global user.name "Your Name" && '
                 'git config --global user.email you@example.org')


def _encrypted_remotes(vault: Vault) -> list[Check]:
    """Only for a vault with an encrypted remote: this machine's key, and each such
    remote read from its host (checked as a sync checks it) and the devices it lists."""
    from agent.sync.crypt import vaultremotes

    if not gitcmd.has_remote(vault):
        return []
    remotes = vaultremotes.encrypted(vault)
    if not remotes:
        return []
    from agent.sync.crypt import keys
    from agent.sync.crypt.manifest import Refused
    from agent.vault.carrier import CarrierError

    path = keys.key_path()
    try:
        device = keys.load(path)
    except keys.KeyProblem as e:
        return [Check("key", "fail", str(e), "restore the file from your copy, or make a "
                      "new key (`agent key`) and trust it from a machine that syncs")]
    if device is None:
        return [Check("key", "fail", f"this machine has no key ({path}): it cannot read "
                      f"{', '.join(remotes)}", "restore the file from your copy, or run "
                      "`agent key` and trust it from a machine that syncs the vault")]
    checks = [Check("key", "warn", f"{path} can be read by other users of this machine",
                    f"chmod 600 {path}") if keys.loose_permissions(path) else
              Check("key", "ok", f"{path} ({keys.short(device.public)})")]
    for name in sorted(remotes):
        remote = vaultremotes.open_remote(vault, name, device)
        label = f"remote {name}"
        try:
            with remote.locked():
                state = remote.load()
        except Refused as e:
            checks.append(Check(label, "fail", str(e), "do not sync with it until you know "
                                "why; `agent remote list` shows what this machine trusted"))
            continue
        except CarrierError as e:
            checks.append(Check(label, "warn", f"its host cannot be read now: {e}",
                                "check the network and the URL (`agent remote list`)"))
            continue
        m = state.manifest
        if m is None:
            checks.append(Check(label, "ok", "encrypted, empty: `agent sync` fills it"))
            continue
        n = len(m.devices)
        detail = (f"encrypted for {n} device{'s' * (n != 1)}, fingerprint {m.fingerprint}, "
                  f"{len(m.packs)} pack{'s' * (len(m.packs) != 1)}")
        if n == 1:
            checks.append(Check(label, "warn", f"{detail}: only this machine can read it, "
                                f"and if its key is lost what it holds is unrecoverable",
                                f"trust a second machine (`agent remote trust {name} FILE`) "
                                f"or keep a copy of {path} somewhere safe"))
        else:
            checks.append(Check(label, "ok", detail))
    return checks


def run_checks(vault: Vault, telegram: TelegramCheck | None = None) -> list[Check]:
    """Every check; `telegram(settings) -> (ok, detail, fix)` checks the Telegram
    channel when it is enabled."""
    settings_check, settings = _settings(vault)
    checks = [*_api(settings), settings_check, _git(), _identity(vault), _sandbox(), _fsck(vault),
              _checkout(vault), _index(vault), _cron(vault), _heartbeats(vault),
              _skills(vault), _cursor(vault), _held(vault), *_encrypted_remotes(vault), *_telegram(settings, telegram),
              *_mcp(vault, settings)]
    return [c for c in checks if c is not None]
