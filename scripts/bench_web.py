#!/usr/bin/env python3
"""What the web stack costs `agent serve`, and how fast each page of the web page is.

1. start-up (`--startup`): `agent serve` with `[gateway] port = 0`, from the process's
   start until its gateway answers GET /v1/health, and its resident memory (VmRSS) then,
   for this checkout (Starlette + uvicorn) against another checkout given with
   `--before` (say the main branch's, on http.server): the two alternate, `--runs`
   times each, medians printed. The fake Anthropic server stands in for the API.
2. pages (`--pages`): a vault of `--messages` messages (scripts/bench_vault.py's, in
   6 sessions over years) with a history of `--commits` agent turns (fast-import, as
   scripts/bench_history.py makes it), the search index built; a real `agent serve`
   with the page, logged in as a browser is (`agent web`), then each page fetched
   `--runs` times: the median time to the last byte. Target: under 200 ms each.
   With `--like-million` the vault is built as scripts/bench_million.py builds it (one
   imported session whose every message holds "garden" and "trip"), and the Search
   page asks for those words (issue 36: under 100 ms at 100,000 messages).

    python scripts/bench_web.py --startup --before /work/main [--runs 7]
    python scripts/bench_web.py --pages [--messages 100000] [--commits 5000] [--runs 7]
    python scripts/bench_web.py --pages --like-million [--messages 100000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from fakeanthropic import FakeAnthropic, reply  # noqa: E402


def _env(fake_url: str, code: Path) -> dict:
    env = dict(os.environ, ANTHROPIC_API_KEY="sk-ant-bench", ANTHROPIC_BASE_URL=fake_url,
               PYTHONPATH=str(code), AGENT_EMBED="off")
    env.pop("TELEGRAM_BOT_TOKEN", None)
    return env


def _vault(root: Path, code: Path, env: dict) -> Path:
    subprocess.run([sys.executable, "-m", "agent", "init", str(root)], env=env, check=True,
                   capture_output=True)
    with open(root / "agent.toml", "a") as f:
        f.write("\n[gateway]\nport = 0\n")
    subprocess.run(["git", "-C", str(root), "commit", "-qam", "gateway on"], check=True,
                   env=env)
    return root


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _health(info: Path) -> bool:
    try:
        data = json.loads(info.read_text())
        token = (info.parent / "gateway-token").read_text().strip()
    except (OSError, ValueError):
        return False
    try:
        conn = http.client.HTTPConnection("127.0.0.1", data["port"], timeout=2)
        conn.request("GET", "/v1/health", headers={"Authorization": f"Bearer {token}"})
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


def start_once(vault: Path, env: dict) -> tuple[float, int]:
    """(seconds until the gateway answers, RSS in kB then) of one `agent serve`."""
    info = vault / ".agent" / "gateway.json"
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(vault), "serve"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not _health(info):
            if p.poll() is not None:
                raise SystemExit(f"serve exited ({p.returncode}) before its gateway answered")
            time.sleep(0.005)
        took = time.perf_counter() - t
        rss = _rss_kb(p.pid)
    finally:
        p.terminate()
        p.wait(30)
    return took, rss


def startup(before: Path, runs: int) -> None:
    fake = FakeAnthropic().start()
    fake.default_reply = reply("ok")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results: dict[str, list[tuple[float, int]]] = {"before": [], "after": []}
            setups = {}
            for name, code in (("before", before), ("after", ROOT)):
                env = _env(fake.url, code)
                setups[name] = (_vault(Path(tmp) / name, code, env), env)
                subprocess.run([sys.executable, "-c", "import agent.cli.app"], env=env)
                start_once(*setups[name])             # warm: bytecode, page cache
            for _ in range(runs):
                for name in ("before", "after"):
                    results[name].append(start_once(*setups[name]))
            print(f"agent serve start-up, until its gateway answers ({runs} runs each, median)")
            for name, code in (("before", before), ("after", ROOT)):
                t = statistics.median(x[0] for x in results[name])
                rss = statistics.median(x[1] for x in results[name])
                print(f"  {name:<6} {str(code):<24} {t * 1000:7.0f} ms   RSS {rss / 1024:6.1f} MB")
            b, a = (statistics.median(x[0] for x in results[k]) for k in ("before", "after"))
            rb, ra = (statistics.median(x[1] for x in results[k]) for k in ("before", "after"))
            print(f"  difference: {(a - b) * 1000:+.0f} ms, {(ra - rb) / 1024:+.1f} MB")
    finally:
        fake.stop()


# ---- pages ------------------------------------------------------------------------------


def _get(port: int, path: str, cookie: str) -> tuple[int, float, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t = time.perf_counter()
    conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", "Cookie": cookie})
    r = conn.getresponse()
    body = r.read()
    took = time.perf_counter() - t
    conn.close()
    return r.status, took, len(body)


def pages(messages: int, commits: int, runs: int, keep: str | None,
          like_million: bool = False) -> None:
    from bench_history import add_history
    from bench_vault import build
    if like_million:
        from bench_million import build

    fake = FakeAnthropic().start()
    fake.default_reply = reply("ok")
    tmp = tempfile.mkdtemp(prefix="bench-web-")
    root = Path(keep or tmp) / "vault"
    env = _env(fake.url, ROOT)
    try:
        t = time.perf_counter()
        os.environ.update({k: env[k] for k in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")})
        vault = build(root, messages)
        if not like_million:
            add_history(vault, commits)
        with open(root / "agent.toml", "a") as f:
            f.write("\n[gateway]\nport = 0\n")
        subprocess.run(["git", "-C", str(root), "commit", "-qam", "gateway on"], check=True)
        subprocess.run([sys.executable, "-m", "agent", "--vault", str(root), "index",
                        "rebuild"], env=env, check=True, capture_output=True)
        print(f"vault: {messages} messages, {0 if like_million else commits} agent commits, "
              f"index built "
              f"({time.perf_counter() - t:.0f} s) at {root}")
        serve = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(root), "serve"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            info = root / ".agent" / "gateway.json"
            while not _health(info):
                if serve.poll() is not None:
                    raise SystemExit("serve exited")
                time.sleep(0.05)
            out = subprocess.run([sys.executable, "-m", "agent", "--vault", str(root), "web",
                                  "--json"], env=env, check=True, capture_output=True,
                                 text=True).stdout
            url = json.loads(out)["url"]
            port = int(re.search(r":(\d+)/", url).group(1))
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", url.split(str(port), 1)[1],
                         headers={"Host": f"127.0.0.1:{port}"})
            r = conn.getresponse()
            r.read()
            cookie = r.getheader("set-cookie").split(";", 1)[0]
            biggest = max((root / "sessions").glob("*/*"),
                          key=lambda d: sum(f.stat().st_size for f in d.glob("*.jsonl")))
            key = "/".join(biggest.parts[-2:])
            lines = (root / "MEMORY.md").read_text().splitlines()
            fact = next(i for i, x in enumerate(lines, 1) if x.startswith("- "))
            head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                                  capture_output=True, text=True).stdout.strip()
            paths = [("Chat (the page's session)", "/"),
                     (f"Chat ({key}, {messages // 6} messages)", f"/?session={key}"),
                     ("Memory", "/memory"),
                     ("Memory: a fact's story", f"/memory/story?file=MEMORY.md&line={fact}"),
                     ("Review", "/review"),
                     ("Timeline", "/timeline"),
                     ("Timeline, kind chat, file MEMORY.md",
                      "/timeline?kind=chat&file=MEMORY.md"),
                     ("Timeline: a commit's diff", f"/timeline/{head}"),
                     ("Search", "/search?q=garden+plan+topic"),
                     ("Search, a word in every message", "/search?q=garden+trip"),
                     ("Search since/until", "/search?q=plan&since=2021-06-01&until=2022-01-01"),
                     ("Schedules", "/schedules"),
                     ("Settings", "/settings"),
                     ("Settings: doctor (its own request)", "/settings/doctor")]
            print(f"page render time, {runs} runs each (median; first run apart)")
            for name, path in paths:
                status, first, size = _get(port, path, cookie)
                times = [_get(port, path, cookie)[1] for _ in range(runs)]
                med = statistics.median(times) * 1000
                mark = "" if med < 200 else "  over 200 ms"
                print(f"  {name:<42} {med:7.1f} ms  (first {first * 1000:6.1f} ms, "
                      f"{status}, {size // 1024} kB){mark}")
            # The operations two pages call, alone (what `agent why` and `agent search`
            # pay too): what is left is the page's own cost.
            from agent.ops import why
            from agent.search import index
            from agent.vault.repo import Vault

            os.environ["AGENT_EMBED"] = "off"
            v = Vault.open(root)
            alone = {
                "why.walk (the story)": lambda: why.walk(v, "MEMORY.md", fact, lines[fact - 1]),
                "index.search (Search)": lambda: index.search(v, "garden plan topic", 20)}
            for name, fn in alone.items():
                times = []
                for _ in range(runs):
                    t = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - t)
                print(f"  the operation alone: {name:<24} {statistics.median(times) * 1000:7.1f} ms")
        finally:
            serve.terminate()
            serve.wait(30)
    finally:
        fake.stop()
        if not keep:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--startup", action="store_true")
    ap.add_argument("--before", type=Path, help="another checkout to compare start-up with")
    ap.add_argument("--pages", action="store_true")
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--commits", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--keep", help="build the vault under this folder and keep it")
    ap.add_argument("--like-million", action="store_true",
                    help="build the vault as scripts/bench_million.py does")
    args = ap.parse_args()
    if not (args.startup or args.pages):
        args.startup = args.pages = True
    if args.startup:
        startup(args.before or ROOT, args.runs)
    if args.pages:
        pages(args.messages, args.commits, args.runs, args.keep, args.like_million)


if __name__ == "__main__":
    main()
