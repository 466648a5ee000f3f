#!/usr/bin/env python3
"""Reach: what talking to the agent through a channel costs beyond the model.

`telegram`: with the fake Bot API (tests/faketelegram.py) and the fake Anthropic API
(tests/fakeanthropic.py) answering at once, the Telegram channel and the router of
`agent serve` run in this process on a fresh vault. For each of N turns a message is
queued at the fake Bot API; the time from then until the reply's sendMessage reaches the
fake, minus the time spent inside the model call (provider.stream), is the channel's
overhead: the long poll waking, the update parsed, the turn started in the router, the
prompt built, the turn persisted and committed, the reply sent. Prints the median and
95th percentile. Target: under 60 ms median.

    python scripts/bench_reach.py [--turns 50] [telegram]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))


class TimedProvider:
    """The provider, with the time spent inside its model calls added up."""

    def __init__(self, provider):
        self.provider = provider
        self.spent = 0.0

    def stream(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return self.provider.stream(*args, **kwargs)
        finally:
            self.spent += time.perf_counter() - t

    def __getattr__(self, name):
        return getattr(self.provider, name)


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def telegram(turns: int = 50) -> dict:
    """Median and p95 (ms) of a Telegram turn's overhead beyond the model."""
    from fakeanthropic import FakeAnthropic, reply
    from faketelegram import FakeTelegram

    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic() as anth, FakeTelegram() as tg:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / ".gitconfig").write_text("[user]\n\tname = Bench\n\temail = bench@example.com\n"
                                         "[init]\n\tdefaultBranch = main\n")
        os.environ.update({"HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
                           "GIT_CONFIG_NOSYSTEM": "1", "ANTHROPIC_BASE_URL": anth.url,
                           "ANTHROPIC_API_KEY": "bench-key", "GIT_CEILING_DIRECTORIES": tmp})
        from agent.channels.telegram import TelegramChannel
        from agent.config import load_settings
        from agent.llm import make_provider
        from agent.serve.conversations import Conversations
        from agent.vault.repo import Vault
        from agent.vault.repo import now as vault_now

        vault, _ = Vault.init(Path(tmp) / "vault")
        (vault.root / "agent.toml").write_text(
            f'[channels.telegram]\nenabled = true\nallow_from = [42]\napi_base = "{tg.url}"\n'
            f"[serve]\nidle_compact_minutes = 0\n")
        settings = load_settings(vault.root)
        provider = TimedProvider(make_provider(eager=True))
        router = Conversations(vault, provider, clock=vault_now, settings_fn=lambda: settings)
        channel = TelegramChannel(vault, router, provider, token=tg.token, settings=settings,
                                  clock=vault_now)
        anth.default_reply = reply("Noted, thanks.")
        channel.start()
        assert channel.connected.wait(20), "the channel did not connect to the fake Bot API"
        # one warm-up turn (imports, the first commit, the index)
        tg.message(42, "warm up")
        tg.wait_sent(42, 1)
        overheads = []
        for i in range(turns):
            before_model = provider.spent
            queued = time.monotonic()
            tg.message(42, f"message number {i}: the plan for day {i}")
            tg.wait_for(lambda: len(tg.sent(42)) >= i + 2, 30, "the reply")
            arrived = [r for r in tg.calls("sendMessage") if r.status == 200][i + 1].at
            overheads.append((arrived - queued) - (provider.spent - before_model))
        channel.stop_polling()
        router.drain(20)
        channel.close()
    ms = [o * 1000 for o in overheads]
    return {"turns": turns, "median_ms": statistics.median(ms), "p95_ms": _pct(ms, 95)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("parts", nargs="*", default=["telegram"], help="telegram")
    ap.add_argument("--turns", type=int, default=50)
    args = ap.parse_args()
    if "telegram" in args.parts:
        r = telegram(args.turns)
        print(f"telegram turn overhead beyond the model ({r['turns']} turns): "
              f"median {r['median_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms (target: median < 60 ms)")


if __name__ == "__main__":
    main()
