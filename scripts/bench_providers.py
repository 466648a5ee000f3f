#!/usr/bin/env python3
"""A turn through the OpenAI-compatible path against one through the Anthropic path,
each against its stand-in server answering at once (tests/fakeopenai.py,
tests/fakeanthropic.py), so what differs is the agent's own work and the SDK's.

Prints:
- the wall time of `agent chat --local -m` as a new process (start-up, SDK import, the
  turn, the commit), the two paths interleaved, median and best of the repeats and the
  ratio of the medians in this run;
- tokens per turn over the same 30-turn conversation on each path: the input tokens
  each server's usage reports (the Anthropic stand-in simulates its prompt cache, the
  OpenAI one has none), and the request body's size in tokens (characters / 4, the same
  estimate for both), median and at the last turn.

    python scripts/bench_providers.py [--repeats 7] [--turns 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import fakeanthropic  # noqa: E402
import fakeopenai  # noqa: E402

from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

REPLY = ("That sounds good. Kyoto in early December is quiet, the maples are late, and the "
         "temples open at eight; book the ryokan near Gion and take the train from Osaka.")
ASKS = ["I am planning a trip to Kyoto.", "When do the temples open?", "Where should I stay?",
        "How do I get there from Osaka?", "Is December a good month?"]


def make_vault(where: Path, model: str, openai_url: str | None) -> Vault:
    vault, _ = Vault.init(where, LAYOUT)
    path = vault.root / "agent.toml"
    text = path.read_text()
    start = text.index("[model]\n")
    end = text.index("\n\n", start)
    text = f'{text[:start]}[model]\nname = "{model}"\nmax_tokens = 1024{text[end:]}'
    if openai_url:
        text += f'\n[providers.local]\napi = "openai"\nbase_url = "{openai_url}"\nkey_env = ""\n'
    path.write_text(text)
    vault.git("add", "-A")
    vault.git("commit", "-q", "-m", "edit: agent.toml by hand")
    return vault


def process_turn(vault: Vault, env: dict) -> float:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault.root), "chat",
                        "--local", "-m", "When do the temples open?"],
                       env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"agent chat failed: {p.stderr or p.stdout}")
    return took


def wall_times(tmp: Path, repeats: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ANTHROPIC_API_KEY": "bench",
           "AGENT_EMBED": "off"}
    with fakeanthropic.FakeAnthropic() as fa, fakeopenai.FakeOpenAI() as fo:
        fa.default_reply = fakeanthropic.reply(REPLY)
        fo.default_reply = fakeopenai.reply(REPLY)
        env["ANTHROPIC_BASE_URL"] = fa.url
        va = make_vault(tmp / "wall-anthropic", "claude-sonnet-5-5", None)
        vo = make_vault(tmp / "wall-openai", "local/qwen3:8b", fo.url)
        process_turn(va, env), process_turn(vo, env)          # warm the disk caches
        a, o = [], []
        for _ in range(repeats):                               # interleaved: same load
            a.append(process_turn(va, env))
            o.append(process_turn(vo, env))
    ma, mo = statistics.median(a), statistics.median(o)
    print(f"`agent chat --local -m` as a new process, {repeats} runs each, interleaved:")
    print(f"  anthropic path   median {ma * 1000:7.0f} ms   best {min(a) * 1000:7.0f} ms")
    print(f"  openai path      median {mo * 1000:7.0f} ms   best {min(o) * 1000:7.0f} ms")
    print(f"  ratio openai/anthropic (medians, this run): {mo / ma:.2f}")


def conversation(tmp: Path, turns: int) -> None:
    from agent.chat.turn import run_turn
    from agent.config import load_settings
    from agent.llm import make_provider

    os.environ["ANTHROPIC_API_KEY"] = "bench"
    os.environ["AGENT_EMBED"] = "off"
    t0 = datetime(2030, 1, 1, 9, 0, tzinfo=timezone.utc)
    rows = {}
    with fakeanthropic.FakeAnthropic() as fa, fakeopenai.FakeOpenAI() as fo:
        fa.default_reply = fakeanthropic.reply(REPLY)
        fo.default_reply = fakeopenai.reply(REPLY)
        os.environ["ANTHROPIC_BASE_URL"] = fa.url
        for label, model, url, server, path in (
                ("anthropic", "claude-sonnet-5-5", None, fa, "/v1/messages"),
                ("openai", "local/qwen3:8b", fo.url, fo, "/v1/chat/completions")):
            vault = make_vault(tmp / f"talk-{label}", model, url)
            provider = make_provider(load_settings(vault.root))
            reported = []
            for n in range(turns):
                result = run_turn(vault, provider, "cli/bench", ASKS[n % len(ASKS)],
                                  t0 + timedelta(minutes=n))
                u = result.usage
                reported.append(u.get("input_tokens", 0) + u.get("cache_read_input_tokens", 0)
                                + u.get("cache_creation_input_tokens", 0))
            bodies = [len(json.dumps(c.body, ensure_ascii=False)) // 4
                      for c in server.calls(path)]
            rows[label] = (reported, bodies)
    print(f"\nTokens per turn over the same {turns}-turn conversation (input, per turn):")
    for label, (reported, bodies) in rows.items():
        print(f"  {label:<9} usage: median {statistics.median(reported):7.0f}, last "
              f"{reported[-1]:7.0f}   request body/4: median {statistics.median(bodies):7.0f}, "
              f"last {bodies[-1]:7.0f}")
    ba, bo = rows["anthropic"][1], rows["openai"][1]
    print(f"  ratio openai/anthropic (request body, medians): "
          f"{statistics.median(bo) / statistics.median(ba):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--turns", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GIT_CONFIG_GLOBAL"] = str(Path(tmp) / "gitconfig")
        (Path(tmp) / "gitconfig").write_text("[user]\n\tname = Bench\n\temail = b@example.com\n"
                                             "[init]\n\tdefaultBranch = main\n")
        os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
        wall_times(Path(tmp), args.repeats)
        conversation(Path(tmp), args.turns)


if __name__ == "__main__":
    main()
