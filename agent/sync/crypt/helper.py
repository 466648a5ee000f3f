"""`git-remote-agent-crypt`: the git remote helper of an encrypted remote.

For a remote whose URL is `agent-crypt::URL`, git runs this helper and speaks
gitremote-helpers(7) with it on stdin and stdout: `capabilities`, `option`, `list`,
`fetch` and `push`. So every git command the sync already runs (its fetch and push,
the proposal branches' exchange, a forget's leased push, `agent clone`, and a person's
own `agent git fetch`) goes through the encryption unchanged; agent.sync.crypt.remote
does the work. The vault's own agent (`python -m agent.sync.crypt.helper`, through the
alias agent.vault.git sets) or the package's console script starts it.

A refusal (the host altered or replayed something, this machine is not trusted, the
host stalled) is one line on stderr, the first line git's caller sees, and the helper
ends before git updates any ref: nothing is applied.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import BinaryIO

from agent.errors import UserError
from agent.sync.crypt import keys
from agent.sync.crypt.manifest import Refused
from agent.sync.crypt.remote import CryptRemote, State, Update
from agent.vault import carrier as carrying
from agent.vault.carrier import CarrierError

_OPTIONS_OK = {"verbosity", "progress", "cas", "followtags", "cloning", "atomic"}


class Session:
    """One conversation with git: the state `list` read is what `fetch` and `push` use."""

    def __init__(self, remote: CryptRemote, out: BinaryIO) -> None:
        self.remote = remote
        self.out = out
        self.state: State | None = None
        self.leases: dict[str, str] = {}
        self.atomic = False

    def say(self, text: str) -> None:
        self.out.write(text.encode())
        self.out.flush()

    def option(self, name: str, value: str) -> str:
        if name not in _OPTIONS_OK:
            return "unsupported"
        if name == "cas":
            ref, _, expect = value.partition(":")
            self.leases[ref] = expect
        elif name == "atomic":
            self.atomic = value == "true"
        return "ok"

    def listing(self, for_push: bool = False) -> None:
        # Before a push, the state as this machine last fetched it (a sync fetched it a
        # moment ago): the host's own ref update refuses a push from a state it has
        # moved on from, and the push then reads it again.
        self.state = self.remote.cached() if for_push else self.remote.load()
        m = self.state.manifest
        lines = [f"{sha} {ref}\n" for ref, sha in sorted(self.state.refs.items())]
        if m is not None and m.head in self.state.refs:
            lines.append(f"@{m.head} HEAD\n")
        self.say("".join(lines) + "\n")

    def fetch(self) -> None:
        if self.state is None:
            self.state = self.remote.load()
        self.remote.fetch_objects(self.state)
        self.say("\n")

    def push(self, specs: list[str]) -> None:
        if self.state is None:
            self.state = self.remote.load()
        updates = []
        for spec in specs:
            force = spec.startswith("+")
            src, _, dst = spec.removeprefix("+").partition(":")
            new = None
            if src:
                new = carrying.resolve(self.remote.git_dir, src)
                if new is None:
                    self.say(f"error {dst} cannot read {src}\n")
                    continue
            update = Update(dst, new, force, self.state.refs.get(dst))
            if dst in self.leases:
                update.lease = self.leases[dst]
                update.force = True
            updates.append(update)
        results = self.remote.push(self.state, updates, atomic_push=self.atomic)
        lines = []
        for u in updates:
            why = results.get(u.dst, "ok")
            lines.append(f"ok {u.dst}\n" if why == "ok" else f"error {u.dst} {why}\n")
        self.say("".join(lines) + "\n")


def serve(remote: CryptRemote, inp: BinaryIO, out: BinaryIO) -> None:
    session = Session(remote, out)
    pushes: list[str] = []
    while True:
        raw = inp.readline()
        if not raw:
            return
        line = raw.decode("utf-8", "surrogateescape").rstrip("\n")
        if pushes and not line.startswith("push "):
            session.push(pushes)           # a batch of pushes ends with a blank line
            pushes = []
            continue
        if line == "capabilities":
            session.say("fetch\npush\noption\n\n")
        elif line.startswith("option "):
            name, _, value = line[len("option "):].partition(" ")
            session.say(session.option(name, value) + "\n")
        elif line in ("list", "list for-push"):
            session.listing(for_push=line == "list for-push")
        elif line.startswith("fetch "):
            while line.startswith("fetch "):      # a batch: read to its blank line
                line = inp.readline().decode("utf-8", "surrogateescape").rstrip("\n")
            session.fetch()
        elif line.startswith("push "):
            pushes.append(line[len("push "):])
        elif line == "":
            return
        else:
            session.say("unsupported\n")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stderr.write("usage: git-remote-agent-crypt REMOTE [URL] (git runs it for an "
                         "agent-crypt:: URL)\n")
        return 2
    url = args[1] if len(args) > 1 else args[0]
    url = url.removeprefix("agent-crypt::")
    git_dir = os.environ.get("GIT_DIR")
    try:
        if not git_dir:
            raise UserError("git ran the encrypted remote's helper outside a repository")
        device = keys.load()
        if device is None:
            raise UserError("this machine has no key for encrypted remotes yet: run `agent "
                            "key`, then trust it on a machine that syncs this vault")
        remote = CryptRemote(Path(git_dir).absolute(), url, device, args[0])
        with remote.locked():
            serve(remote, sys.stdin.buffer, sys.stdout.buffer)
    except (Refused, CarrierError, UserError) as e:
        sys.stderr.write(f"fatal: {e}\n")
        sys.stderr.flush()
        return 1
    except BrokenPipeError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
