"""Running a shell command in an OS sandbox (bubblewrap), and whether that is possible.

    status = sandbox_status()            # for `agent doctor` and for offering `exec`
    result = run(SandboxSpec(vault_root, command="ls", timeout=60))

What the command sees (deny by default):

- the system read-only: /usr (and /bin, /lib... as the host lays them out), and a short
  list of /etc files programs need (no /etc/shadow, no /root, no /home);
- the vault read-only at /vault, except /vault/workspace/, the scratch folder, writable
  (read-only too for a read-only sub-agent); /vault/.git and /vault/.agent are not there;
- a private /tmp and /dev/shm, each a tmpfs of at most `tmp_size` bytes (memory, so
  bounded: 100 MB by default), /proc of its own pid namespace, a minimal /dev and an
  empty /run, both read-only (else they would be unbounded tmpfs to fill);
- no network unless `network=True` (a new network namespace holds only loopback);
- an empty environment but PATH, HOME (= the scratch folder) and LANG;
- new user, pid, ipc, uts and cgroup namespaces; a new session (no terminal injection);
  inside it is uid 1000, whatever runs the agent, so root-owned files stay unreadable
  where they are not world-readable;
- limits: wall time (the whole process tree is killed with its pid namespace), at most
  NPROC processes (a fork bomb fails to fork), FSIZE bytes per file written, no core
  dumps, `memory` bytes of address space per process (RLIMIT_AS: an allocation past it
  fails inside the command, MemoryError or ENOMEM, rather than the machine swapping;
  it works for any user, where a cgroup needs root or a delegated controller), and
  when the agent runs as root, a memory cgroup holds all its processes together to
  the same `memory` (many processes could add up otherwise; past it the kernel kills
  one); stdout and stderr keep their head and tail, the cut is said.

It never falls back to running a command unsandboxed: when bwrap is missing or cannot
make namespaces, `sandbox_status().ok` is False and `run` raises SandboxUnavailable.
Nothing here knows of models, tools or git.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.errors import UserError

INSIDE_VAULT = "/vault"
WORKSPACE = "workspace"
HIDDEN = (".git", ".agent")
DEFAULT_TIMEOUT = 60
MAX_TIMEOUT = 3600
OUTPUT_CAP = 16_000          # characters kept of each stream (head and tail halves)
NPROC = 256                  # processes the sandbox user may run at once
FSIZE = 256 * 1024 * 1024    # bytes: the largest file a command may write
MEMORY = 1024 ** 3           # bytes of address space a process may map ([exec] memory)
TMP_SIZE = 100 * 1024 ** 2   # bytes each of /tmp and /dev/shm may hold ([exec] tmp_size)
SANDBOX_UID = 1000
PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

# What of /etc a program needs to run (dynamic linker cache, users, time zone, the
# alternatives /usr/bin links through); never shadow, sudoers, ssh keys. Each bind is a
# mount that costs about 1 ms at every command, so the list is short; what only network
# programs need (resolver, certificates) is bound only when the network is on.
ETC = ("alternatives", "ld.so.cache", "localtime", "passwd", "group", "nsswitch.conf")
ETC_NETWORK = ("resolv.conf", "hosts", "host.conf", "gai.conf", "protocols", "services",
               "ssl/certs", "ca-certificates", "ca-certificates.conf")
# Top-level system folders: bound read-only when they are folders, recreated when links.
SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt")

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap; "
                "Fedora: sudo dnf install bubblewrap; Arch: sudo pacman -S bubblewrap)")


class SandboxUnavailable(UserError):
    """bwrap is missing or cannot create namespaces here; commands are not run."""


class SandboxRefused(UserError):
    """The vault is laid out so that the sandbox cannot be made safely."""


# ---- can we sandbox here? --------------------------------------------------------------


@dataclass
class SandboxStatus:
    ok: bool
    bwrap: str | None          # the binary's path, when found
    version: str | None
    message: str               # one line: what works, or what is wrong and how to fix it


_status: SandboxStatus | None = None
_status_lock = threading.Lock()


def sandbox_status(refresh: bool = False) -> SandboxStatus:
    """Whether commands can be sandboxed here: bwrap found and able to make namespaces.

    Probes once per process (about 5 ms), by running `true` in the same kind of
    sandbox `run` makes. For `agent doctor` and for offering the `exec` tool.
    """
    global _status
    with _status_lock:
        if _status is None or refresh:
            _status = _probe()
        return _status


def _probe() -> SandboxStatus:
    path = shutil.which("bwrap")
    if path is None:
        return SandboxStatus(False, None, None, f"bwrap not found: {INSTALL_HINT}")
    try:
        v = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        version = v.stdout.strip().split()[-1] if v.stdout.strip() else None
        p = subprocess.run([path, *_namespace_args(network=False), *_system_args(False),
                            "--proc", "/proc", "--dev", "/dev",
                            "--size", "1048576", "--tmpfs", "/tmp", "--", "true"],
                           capture_output=True, text=True, timeout=10,
                           stdin=subprocess.DEVNULL, env={"PATH": PATH})
    except (OSError, subprocess.TimeoutExpired) as e:
        return SandboxStatus(False, path, None, f"bwrap at {path} does not run: {e}")
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or ["no message"])[-1]
        if "--size" in why:
            return SandboxStatus(False, path, version,
                                 f"bwrap {version} at {path} is too old to bound /tmp's size "
                                 f"(it needs 0.5 or newer): upgrade bubblewrap")
        return SandboxStatus(False, path, version,
                             f"bwrap at {path} cannot create a sandbox here ({why}); it needs "
                             f"unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                             f"or on Ubuntu an AppArmor profile allowing bwrap)")
    return SandboxStatus(True, path, version, f"bwrap {version or ''} at {path} works".replace("  ", " "))


def startup_note(settings) -> str | None:
    """What `agent chat` and `agent serve` say at start when commands cannot run."""
    if settings is not None and not getattr(settings, "exec_enabled", True):
        return None
    status = sandbox_status()
    if status.ok:
        return None
    return f"The exec tool is off: {status.message}."


# ---- building the sandbox --------------------------------------------------------------


def _namespace_args(network: bool) -> list[str]:
    args = ["--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox"]
    if network:
        args.append("--share-net")
    return args


def _system_args(network: bool) -> list[str]:
    args: list[str] = []
    for name in SYSTEM:
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), f"/{name}"]
        elif p.is_dir():
            args += ["--ro-bind", str(p), f"/{name}"]
    for name in ETC + (ETC_NETWORK if network else ()):
        p = Path("/etc") / name
        if p.exists():
            args += ["--ro-bind", str(p), f"/etc/{name}"]
    return args


@dataclass
class SandboxSpec:
    vault_root: Path
    command: str
    timeout: float = DEFAULT_TIMEOUT
    network: bool = False
    writable: bool = True             # False: the scratch folder is read-only too
    output_cap: int = OUTPUT_CAP
    lang: str = "C.UTF-8"
    cancel: threading.Event | None = None     # set -> the command is killed at once
    memory: int = MEMORY              # address space per process, bytes
    tmp_size: int = TMP_SIZE          # bytes each of /tmp and /dev/shm may hold


@dataclass
class ExecResult:
    exit_code: int | None             # None when killed (timeout or cancelled)
    stdout: str
    stderr: str
    timed_out: bool = False
    cancelled: bool = False
    seconds: float = 0.0
    cut: list[str] = field(default_factory=list)   # the streams whose middle was cut
    oom_kills: int = 0                # processes the kernel killed for the memory cgroup

    def render(self, timeout: float) -> str:
        """The tool's answer: exit status, then stdout and stderr."""
        if self.timed_out:
            status = f"killed after the time limit of {timeout:g} s (with every process it started)"
        elif self.cancelled:
            status = "killed: the turn was cancelled"
        elif self.exit_code is not None and self.exit_code < 0:
            status = f"killed by signal {-self.exit_code}"
        else:
            status = str(self.exit_code)
        parts = [f"exit status: {status}"]
        parts.append("stdout:\n" + (self.stdout if self.stdout else "(empty)"))
        parts.append("stderr:\n" + (self.stderr if self.stderr else "(empty)"))
        return "\n".join(parts)


def vault_args(root: Path, writable: bool) -> list[str]:
    """Bind the vault's top-level entries at /vault, but .git/ and .agent/.

    Each entry is bound on its own so that nothing hidden is reachable; a top-level
    symlink is recreated as a symlink (it then resolves inside the sandbox, never to the
    host path it names). The scratch folder must be a real folder, not a link.
    """
    root = Path(root)
    ws = root / WORKSPACE
    if ws.is_symlink() or (ws.exists() and not ws.is_dir()):
        raise SandboxRefused(f"{ws}: the scratch folder must be a plain folder (it is a link "
                             f"or a file); remove it and the next command recreates it.")
    ws.mkdir(exist_ok=True)
    args = ["--dir", INSIDE_VAULT]
    for entry in sorted(os.listdir(root)):
        if entry in HIDDEN:
            continue
        src = root / entry
        dst = f"{INSIDE_VAULT}/{entry}"
        if src.is_symlink():
            args += ["--symlink", os.readlink(src), dst]
        elif entry == WORKSPACE:
            args += ["--bind" if writable else "--ro-bind", str(src), dst]
        else:
            args += ["--ro-bind", str(src), dst]
    return args


def command_line(spec: SandboxSpec, bwrap: str = "bwrap") -> list[str]:
    """The bwrap argument list for `spec` (public so tests and doctor can show it)."""
    home = f"{INSIDE_VAULT}/{WORKSPACE}"
    return [bwrap, *_namespace_args(spec.network), *_system_args(spec.network),
            "--proc", "/proc", "--dev", "/dev",
            "--size", str(spec.tmp_size), "--tmpfs", "/tmp",
            "--size", str(spec.tmp_size), "--tmpfs", "/dev/shm",
            "--tmpfs", "/run", "--dir", "/var/tmp",
            *vault_args(spec.vault_root, spec.writable),
            # The root, /dev and /run are tmpfs too: read-only, so only the two sized
            # ones above take writes.
            "--remount-ro", "/", "--remount-ro", "/dev", "--remount-ro", "/run",
            "--chdir", home, "--clearenv",
            "--setenv", "PATH", PATH, "--setenv", "HOME", home, "--setenv", "LANG", spec.lang,
            "--setenv", "TMPDIR", "/tmp",
            "--", "/bin/sh", "-c", spec.command]


def _cgroup_parent(controller: str) -> Path | None:
    """Where a cgroup with `controller` ("pids", "memory") can be made for one command
    (v1 hierarchy of that name, or v2 with the controller delegated), else None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            base = Path("/sys/fs/cgroup") / controller / path.lstrip("/")
            if (base / "cgroup.procs").exists() and os.access(base, os.W_OK):
                return base
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            try:
                if controller in (base / "cgroup.subtree_control").read_text().split() \
                        and os.access(base, os.W_OK):
                    return base
            except OSError:
                pass
    return None


def _pids_parent() -> Path | None:
    """Where a pids cgroup can be made for one command, when we may (root), else None.

    RLIMIT_NPROC does not bind root's processes (the kernel exempts uid 0 even inside a
    user namespace), so when the agent runs as root a fork bomb is held by a pids
    cgroup instead (v1 `pids` hierarchy, or v2 with the pids controller delegated).
    """
    return _cgroup_parent("pids") if os.geteuid() == 0 else None


class _PidsGroup:
    """The cgroups holding one command's processes, where they can be made (root): a
    cap on their number (pids, see _pids_parent) and on the memory they hold together
    (memory: RLIMIT_AS binds each process alone, so many processes could still add up),
    and a way to kill every one of them. Nothing when no cgroup may be made here."""

    def __init__(self, memory: int | None = None):
        self.paths: list[Path] = []
        name = f"agent-exec-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
        root = os.geteuid() == 0
        wanted = {"pids": _pids_parent(),
                  "memory": _cgroup_parent("memory") if memory and root else None}
        made: dict[Path, Path] = {}                 # parent -> group (v2: one for both)
        for controller, parent in wanted.items():
            if parent is None:
                continue
            path = made.get(parent) or parent / name
            try:
                path.mkdir(exist_ok=True)
                if controller == "pids":
                    (path / "pids.max").write_text(str(NPROC))
                elif (path / "memory.max").exists():             # v2
                    (path / "memory.max").write_text(str(memory))
                    with contextlib.suppress(OSError):
                        (path / "memory.swap.max").write_text("0")
                else:                                              # v1
                    (path / "memory.limit_in_bytes").write_text(str(memory))
                    with contextlib.suppress(OSError):
                        (path / "memory.memsw.limit_in_bytes").write_text(str(memory))
            except OSError:
                with contextlib.suppress(OSError):
                    if path not in self.paths:
                        path.rmdir()
                continue
            made[parent] = path
            if path not in self.paths:
                self.paths.append(path)

    @property
    def path(self) -> Path | None:
        return self.paths[0] if self.paths else None

    def oom_kills(self) -> int:
        """How many of the command's processes the kernel killed for its memory cgroup."""
        for path in self.paths:
            for name in ("memory.events", "memory.oom_control"):        # v2, v1
                try:
                    text = (path / name).read_text()
                except OSError:
                    continue
                for line in text.splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit():
                        return int(value)
        return 0

    def join(self) -> None:
        """In the child before exec: move into the groups."""
        for path in self.paths:
            (path / "cgroup.procs").write_text(str(os.getpid()))

    def kill_all(self) -> None:
        if self.path is None:
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except OSError:
                return
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill_all()
        for path in self.paths:
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _limits(group: _PidsGroup | None = None, memory: int | None = None) -> None:
    """In the child before exec: its own process group and the resource limits."""
    os.setsid()
    if group is not None:
        group.join()
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_NPROC, (NPROC, NPROC))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE, FSIZE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class _Capture:
    """Reads a stream to its end, keeping its first and last `cap/2` characters."""

    def __init__(self, stream, cap: int):
        self.stream, self.half = stream, max(1, cap // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = self.stream.read1(65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            self.total += len(chunk)
            room = self.half * 4 - len(self.head)      # bytes: up to 4 per character
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > self.half * 8:
                    del self.tail[:len(self.tail) - self.half * 4]

    def text(self) -> tuple[str, bool]:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        whole = head + tail
        if len(whole) <= self.half * 2:
            return whole, False
        kept_head, kept_tail = whole[:self.half], whole[-self.half:]
        cut = self.total - len(kept_head.encode()) - len(kept_tail.encode())
        return (f"{kept_head}\n[... {cut} bytes cut from the middle of this output ...]\n"
                f"{kept_tail}"), True


def run(spec: SandboxSpec) -> ExecResult:
    """Run `spec.command` in the sandbox; kill its whole tree at the time limit."""
    status = sandbox_status()
    if not status.ok:
        raise SandboxUnavailable(f"Commands cannot run: {status.message}.")
    assert status.bwrap is not None          # found, as status.ok says
    args = command_line(spec, status.bwrap)
    group = _PidsGroup(spec.memory)
    start = time.monotonic()
    try:
        result = _run(spec, args, group, start)
        result.oom_kills = group.oom_kills()
        return result
    finally:
        # Its processes are gone (or killed here); removing the empty group can wait
        # for the kernel to reap them, so it is done off the caller's time.
        group.kill_all()
        threading.Thread(target=group.remove, daemon=True).start()


def _run(spec: SandboxSpec, args: list[str], group: _PidsGroup, start: float) -> ExecResult:
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={"PATH": PATH},
                            preexec_fn=lambda: _limits(group, spec.memory), close_fds=True)
    out, err = _Capture(proc.stdout, spec.output_cap), _Capture(proc.stderr, spec.output_cap)
    timed_out = cancelled = False
    deadline = start + spec.timeout if spec.timeout else None
    while True:
        try:
            proc.wait(timeout=0.02)
            break
        except subprocess.TimeoutExpired:
            pass
        if spec.cancel is not None and spec.cancel.is_set():
            cancelled = True
        elif deadline is not None and time.monotonic() >= deadline:
            timed_out = True
        if timed_out or cancelled:
            # bwrap and the pid namespace's init are in this group; when the init dies
            # the kernel kills every process left in the namespace.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            group.kill_all()
            proc.wait()
            break
    seconds = time.monotonic() - start
    for c in (out, err):
        c.thread.join(timeout=1)
    stdout, cut_out = out.text()
    stderr, cut_err = err.text()
    code = None if (timed_out or cancelled) else proc.returncode
    cut = [name for name, c in (("stdout", cut_out), ("stderr", cut_err)) if c]
    return ExecResult(code, stdout, stderr, timed_out, cancelled, seconds, cut)
