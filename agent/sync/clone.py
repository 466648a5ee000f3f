"""`agent clone`: a vault made on this machine from a remote, checked before it is
checked out, and set up as `agent init` sets one up."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agent.vault import git as gitrun
from agent.vault.identity import check_host
from agent.vault.layout import GIT_ONLY, Layout
from agent.vault.repo import MARKER, GitError, Vault, VaultError
from agent.sync.result import SyncError, first_error
from agent.sync.steps import current_branch


def _check_out_vault(url: str, path: Path) -> None:
    """Check out the branch that holds the vault, whatever the remote's HEAD names (a
    plain `git init --bare` says `master` while the vault pushes `main`), after its
    newest tree was checked (agent.sync.incoming)."""
    def git(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        q = gitrun.run(args, path)
        if check and q.returncode:
            raise GitError(list(args), q.returncode, q.stderr)
        return q

    branches = git("for-each-ref", "--format=%(refname:lstrip=3)", "refs/remotes/origin/"
                   ).stdout.split()
    branches = [b for b in branches if b != "HEAD"]
    head = git("symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD",
               check=False).stdout.strip().removeprefix("origin/")
    order = [b for b in dict.fromkeys([head, "main", "master", *sorted(branches)]) if b in branches]
    vaults = [b for b in order if git("cat-file", "-e", f"refs/remotes/origin/{b}:{MARKER}",
                                      check=False).returncode == 0]
    if not vaults and branches == ["agent-crypt"]:
        from agent.sync.crypt import cloning
        raise cloning.Encrypted(url)
    if not vaults:
        if not branches:
            raise SyncError(f"{url} is not a vault: it is empty. Nothing was made at {path}. To "
                            f"fill it from a vault, run `agent git remote add origin {url}` "
                            f"then `agent sync` in that vault.")
        raise SyncError(f"{url} is not a vault: no branch of it ({', '.join(sorted(branches))}) "
                        f"has an agent.toml. Nothing was made at {path}. Check the URL.")
    branch = vaults[0]
    from agent.sync import incoming
    incoming.check_tree(path, f"refs/remotes/origin/{branch}", url)
    local = git("symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
    git("checkout", "--quiet", "-B", branch, "--track", f"origin/{branch}")
    if local and local != branch:
        git("branch", "-D", local, check=False)   # the remote HEAD's branch, not a vault


def _remove_clone(path: Path, made: bool) -> None:
    import shutil
    if made:
        shutil.rmtree(path, ignore_errors=True)
    else:                        # an empty folder the person named: leave it empty
        for child in path.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()


def clone(url: str, path: Path, host: str | None = None, expect: str | None = None,
          layout: Layout = GIT_ONLY) -> Vault:
    """A vault cloned from `url` into `path`, set up as `agent init` sets one up; `host`
    names this machine (default: its hostname), `layout` what the vault is told of the
    product's files (agent.ops.vaults.LAYOUT). An encrypted remote (agent.sync.crypt)
    is cloned through its helper; `expect`: the fingerprint it must have. What decides
    what runs (agent.toml, skills, heartbeats, cron jobs, ...) is held as `agent
    init`'s until the person accepts the remote's (agent.sync.held.hold_clone)."""
    host = check_host(host) if host else None
    path = Path(path).expanduser().absolute()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise SyncError(f"{path} already exists and is not empty: choose a new folder.")
    made = not path.exists()
    from agent.sync.crypt import cloning
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **cloning.prepare(url, expect)}
    p = gitrun.run(["clone", "--quiet", "--no-checkout", url, str(path)], None, env=env)
    if p.returncode:
        if made and path.exists():     # (what a refusing helper leaves)
            _remove_clone(path, made)
        raise SyncError(cloning.refused(url, first_error(p.stderr)) or
                        f"Could not clone {url}: {first_error(p.stderr)}.")
    try:
        _check_out_vault(url, path)
    except cloning.Encrypted:      # a plain URL of an encrypted remote: through its helper
        _remove_clone(path, made)
        return clone(cloning.PREFIX + url, path, host, expect, layout)
    except VaultError:
        _remove_clone(path, made)
        raise
    vault = Vault.open(path, layout)
    if host:
        vault.identity.set_host(host)
    vault._configure_repo()
    vault.state.mkdir(exist_ok=True)
    from agent.sync import arrivals     # every proposal waiting in a clone came from there
    source = f"origin/{current_branch(vault)}"
    arrivals.note(vault, None, "HEAD", source)
    # What decides what runs waits for the person, as a sync's would (agent.sync.held).
    from agent.sync import held
    held.hold_clone(vault, source)
    return vault
