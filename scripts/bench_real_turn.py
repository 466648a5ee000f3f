#!/usr/bin/env python3
"""A chat turn against a real model server beside the same turn against the stand-in.

llama.cpp's llama-server serving SmolLM2-135M-Instruct (built and fetched by
scripts/llama_server.py) answers one turn; then tests/fakeopenai.py, the stand-in the
suite uses, answers the same turn with the same text, so both turns carry the same
output. The two are paired and alternated (which goes first swaps each round), each a new
`agent chat -m` process on a fresh conversation of its own vault. Printed per path:
the wall time of the process, its CPU (user + system, the agent's own process), the
server's CPU during the turn (llama-server's, read from /proc; the stand-in's is
negligible), and the output tokens of the turn's Tokens trailer; medians over the rounds
and the ratio real / stand-in of the medians.

    python scripts/bench_real_turn.py [--rounds 5] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import fakeopenai  # noqa: E402
import realmodel  # noqa: E402

from agent.vault.change import read_tokens  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402

MESSAGE = "I am planning a sailing trip along the coast of Portugal. What should I pack?"
TICKS = os.sysconf("SC_CLK_TCK")


def server_cpu(pid: int) -> float:
    """The CPU seconds (user + system) process `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def vault_for(where: Path, url: str, max_tokens: int) -> Vault:
    vault, _ = Vault.init(where)
    path = vault.root / "agent.toml"
    text = path.read_text()
    start = text.index("[model]\n")
    end = text.index("\n\n", start)
    text = (f'{text[:start]}[model]\nname = "local/{realmodel.ALIAS}"\nfallbacks = []\n'
            f'max_tokens = {max_tokens}{text[end:]}')
    text += f'\n[providers.local]\napi = "openai"\nbase_url = "{url}"\nkey_env = ""\n'
    path.write_text(text)
    return vault


def turn(vault: Vault, session: str, server_pid: int | None) -> dict:
    """One `agent chat -m` process: its wall time, its CPU, the server's, the tokens."""
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    srv0 = server_cpu(server_pid) if server_pid else 0.0
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat",
                        "--session", session, "--new", "-m", MESSAGE],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - start
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(f"agent chat failed: {p.stdout}{p.stderr}")
    trailers = vault.git("log", "-1", "--format=%(trailers:only,unfold)")
    tokens = next(line.split(": ", 1)[1] for line in trailers.splitlines()
                  if line.startswith("Tokens: "))
    added = [json.loads(line[1:]) for line in vault.git("show", "HEAD", "--format=").splitlines()
             if line.startswith("+{")]
    said = [o["content"] for o in added if o.get("role") == "assistant"
            and isinstance(o.get("content"), str)]
    text = said[-1] if said else ""
    return {"wall": wall,
            "cpu": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
            "server": (server_cpu(server_pid) - srv0) if server_pid else 0.0,
            "out": read_tokens(tokens)[""]["output_tokens"], "text": text}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64, help="[model] max_tokens (default 64)")
    a = ap.parse_args()
    why = realmodel.missing()
    if why:
        raise SystemExit(why)
    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
        os.environ.setdefault("GIT_CONFIG_GLOBAL", os.devnull)
        os.environ.update(GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.org",
                          GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.org")
        llama = realmodel.LlamaServer.start(Path(tmp) / "llama")
        fake = fakeopenai.FakeOpenAI().start()
        fake.models = [realmodel.ALIAS]
        try:
            real_vault = vault_for(Path(tmp) / "real", llama.url, a.max_tokens)
            fake_vault = vault_for(Path(tmp) / "fake", fake.url, a.max_tokens)
            rows: dict[str, list[dict]] = {"real": [], "stand-in": []}
            for n in range(a.rounds):
                # The stand-in says what the real model said this round: the same output.
                real_first = n % 2 == 0
                if real_first:
                    rows["real"].append(turn(real_vault, f"bench/r{n}", llama.proc.pid))
                fake.add(fakeopenai.reply(rows["real"][-1]["text"] if rows["real"] else "Pack light."))
                rows["stand-in"].append(turn(fake_vault, f"bench/s{n}", None))
                if not real_first:
                    rows["real"].append(turn(real_vault, f"bench/r{n}", llama.proc.pid))
                    rows["stand-in"][-1]["note"] = "answered the previous round's text"
                r, s = rows["real"][-1], rows["stand-in"][-1]
                print(f"round {n + 1}: real {r['wall']:.2f} s wall, {r['cpu']:.2f} s CPU, "
                      f"server {r['server']:.2f} s, {r['out']} out | stand-in {s['wall']:.2f} s "
                      f"wall, {s['cpu']:.2f} s CPU, {s['out']} out", flush=True)
        finally:
            fake.stop()
            llama.stop()
    print(f"\nmedians over {a.rounds} paired rounds (max_tokens {a.max_tokens}):")
    med = {k: {f: statistics.median(x[f] for x in v) for f in ("wall", "cpu", "server", "out")}
           for k, v in rows.items()}
    for k, m in med.items():
        print(f"  {k:<9} wall {m['wall']:6.2f} s   agent CPU {m['cpu']:5.2f} s   "
              f"server CPU {m['server']:5.2f} s   output tokens {m['out']:.0f}")
    r, s = med["real"], med["stand-in"]
    print(f"  ratio real / stand-in: wall {r['wall'] / s['wall']:.2f}, agent CPU "
          f"{r['cpu'] / s['cpu']:.2f}, agent + server CPU "
          f"{(r['cpu'] + r['server']) / s['cpu']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
