#!/usr/bin/env python3
"""Reach: what a channel of `agent serve` adds to a turn beyond the model, and how soon a
message sent during a turn reaches the model. One function per channel (`CHANNELS`).

Against the fake Anthropic server (tests/fakeanthropic.py), in a fresh vault, prints for
the gateway (agent/serve/gateway.py, through agent/serve/conversations.py):

- turn overhead beyond the model, median and p95 over --turns turns: the wall time of
  the request (POST .../messages, JSON answer; then the same streamed as SSE) minus the
  time the fake server spent answering its model call; and the same for the router
  alone (Conversations.submit + wait, no HTTP), so the HTTP part shows by difference;
- injection: a message POSTed while a turn's first model call runs (the model answers
  with a tool call --delay seconds later): whether the very next model call saw it
  (target: every time), the time from the POST to that call's request reaching the
  server, and of that the part after the first call ended (tool + the turn's step).

and for Telegram (agent/serve/channels/telegram.py, with the fake Bot API of
tests/faketelegram.py answering too): turn overhead beyond the model, median and p95 over
--turns turns: from a message being queued at the fake Bot API to the reply's
sendMessage reaching it (the long poll waking, the update parsed, the turn run through
the router, persisted and committed, the reply sent), minus the time the fake Anthropic
server spent answering the model call. Target: under 60 ms median.

    python scripts/bench_reach.py [--turns 50] [--injections 20] [--delay 0.2] [--channel gateway]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT))
# Words alone, as these figures were set; scripts/bench_search.py measures search by
# meaning (with the embed extra, `index rebuild` here would embed every message).
os.environ.setdefault("AGENT_EMBED", "off")
sys.path.insert(0, str(ROOT / "tests"))

import fakeanthropic  # noqa: E402
from fakeanthropic import FakeAnthropic, reply, tool_use  # noqa: E402

from agent.config import load_settings  # noqa: E402
from agent.llm import make_provider  # noqa: E402
from agent.serve.conversations import Conversations  # noqa: E402
from agent.serve.gateway import Gateway  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402
from agent.clock import now as vault_now  # noqa: E402


# ---- shared -----------------------------------------------------------------------------


class ModelClock:
    """Time the fake server spends answering each model call (request read to answer sent)."""

    def __init__(self):
        self.spent: list[float] = []
        self._orig = fakeanthropic._Handler._messages
        clock = self

        def timed(handler, rec):
            t = time.perf_counter()
            try:
                clock._orig(handler, rec)
            finally:
                clock.spent.append(time.perf_counter() - t)
        fakeanthropic._Handler._messages = timed

    def restore(self):
        fakeanthropic._Handler._messages = self._orig


def ms(values: list[float]) -> str:
    v = sorted(values)
    p95 = v[min(len(v) - 1, int(round(0.95 * (len(v) - 1))))]
    return f"median {statistics.median(v) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms   (n={len(v)})"


def fresh_vault(tmp: Path) -> Vault:
    home = tmp / "home"
    home.mkdir()
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[user]\n\tname = Bench\n\temail = bench@example.com\n"
                         "[init]\n\tdefaultBranch = main\n")
    os.environ.update(HOME=str(home), GIT_CONFIG_GLOBAL=str(gitconfig), GIT_CONFIG_NOSYSTEM="1",
                      GIT_CEILING_DIRECTORIES=str(tmp))
    vault, _ = Vault.init(tmp / "vault", LAYOUT)
    return vault


def post(url: str, token: str, path: str, body: dict, *, stream: bool = False) -> bytes:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    if stream:
        req.add_header("Accept", "text/event-stream")
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


# ---- the gateway ------------------------------------------------------------------------


def bench_gateway(args) -> None:
    with tempfile.TemporaryDirectory() as d, FakeAnthropic() as fake:
        os.environ.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="bench-key")
        vault = fresh_vault(Path(d))
        settings = load_settings(vault.root)
        conv = Conversations(vault, make_provider(), clock=vault_now, settings_fn=lambda: settings)
        gw = Gateway(vault, conv, port=0).start()
        clock = ModelClock()
        fake.default_reply = reply("Noted, thank you; that is all for now.")
        try:
            def overhead(send) -> list[float]:
                out = []
                send(0)                                   # warm: SDK, index, first commit
                for i in range(1, args.turns + 1):
                    before = len(clock.spent)
                    t = time.perf_counter()
                    send(i)
                    wall = time.perf_counter() - t
                    out.append(wall - sum(clock.spent[before:]))
                return out

            router = overhead(lambda i: conv.submit("bench/router", f"message {i}").wait())
            http_json = overhead(lambda i: post(gw.url, gw.token, "/v1/sessions/bench/json/messages",
                                                {"text": f"message {i}"}))
            http_sse = overhead(lambda i: post(gw.url, gw.token, "/v1/sessions/bench/sse/messages",
                                               {"text": f"message {i}"}, stream=True))
            print(f"gateway turn overhead beyond the model ({args.turns} turns each):")
            print(f"  router only (submit+wait)  {ms(router)}")
            print(f"  HTTP, JSON answer          {ms(http_json)}")
            print(f"  HTTP, SSE stream           {ms(http_sse)}")

            seen_next, latency, after_call = 0, [], []
            for i in range(args.injections):
                marker = f"also this, number {i}"
                started, first_done, next_at = threading.Event(), {}, {}

                def first(_req):
                    started.set()
                    time.sleep(args.delay)                # the model still writing
                    first_done["t"] = time.perf_counter()
                    return reply(tool_use("memory_search", {"query": "bench"}))

                def second(req):
                    next_at["t"] = time.perf_counter()
                    next_at["seen"] = marker in json.dumps(req["messages"][-1])
                    return reply("Done, both.")
                fake.add(first, second)
                runner = threading.Thread(target=post, args=(
                    gw.url, gw.token, "/v1/sessions/bench/inject/messages", {"text": f"turn {i}"}))
                runner.start()
                started.wait(30)
                t0 = time.perf_counter()
                post(gw.url, gw.token, "/v1/sessions/bench/inject/messages", {"text": marker})
                runner.join(60)
                seen_next += bool(next_at.get("seen"))
                latency.append(next_at["t"] - t0)
                after_call.append(next_at["t"] - first_done["t"])
            print(f"injection ({args.injections} turns; the model answers {args.delay:g}s after "
                  f"the message is posted):")
            print(f"  seen at the very next model call: {seen_next}/{args.injections}")
            print(f"  POST -> next model request     {ms(latency)}")
            print(f"  first call's end -> next request (tool + step) {ms(after_call)}")
        finally:
            clock.restore()
            gw.close(5)
            conv.drain(30)


# ---- Telegram ---------------------------------------------------------------------------


def bench_telegram(args) -> None:
    from faketelegram import FakeTelegram

    from agent.serve.channels.telegram import TelegramChannel

    with tempfile.TemporaryDirectory() as d, FakeAnthropic() as fake, FakeTelegram() as tg:
        os.environ.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="bench-key")
        vault = fresh_vault(Path(d))
        (vault.root / "agent.toml").write_text(
            f'[channels.telegram]\nenabled = true\nallow_from = [42]\napi_base = "{tg.url}"\n')
        settings = load_settings(vault.root)
        provider = make_provider()
        conv = Conversations(vault, provider, clock=vault_now, settings_fn=lambda: settings)
        # When the channel hands a message to the router, and when the router answers it:
        # the channel's own time is before the one and after the other.
        handed, answered = [], []
        submit = conv.submit

        def timed_submit(*a, **kw):
            handed.append(time.monotonic())
            ticket = submit(*a, **kw)
            threading.Thread(target=lambda: (ticket.wait(), answered.append(time.monotonic())),
                             daemon=True).start()
            return ticket
        conv.submit = timed_submit
        channel = TelegramChannel(vault, conv, provider, token=tg.token, settings=settings,
                                  clock=vault_now)
        clock = ModelClock()
        fake.default_reply = reply("Noted, thank you; that is all for now.")
        channel.start()
        try:
            if not channel.connected.wait(30):
                raise SystemExit("the channel did not connect to the fake Bot API")
            out, own = [], []
            for i in range(args.turns + 1):           # the first one warms up
                before = len(clock.spent)
                queued = time.monotonic()
                tg.message(42, f"message {i}")
                tg.wait_sent(42, i + 1, timeout=60)
                arrived = [r for r in tg.calls("sendMessage") if r.status == 200][i].at
                if i:
                    out.append((arrived - queued) - sum(clock.spent[before:]))
                    own.append((handed[-1] - queued) + (arrived - answered[-1]))
            conv.submit = submit
            # The same turns through the router alone, for comparison.
            router = []
            for i in range(args.turns):
                before = len(clock.spent)
                t = time.perf_counter()
                conv.submit("bench/router", f"message {i}").wait()
                router.append(time.perf_counter() - t - sum(clock.spent[before:]))
            print(f"telegram turn overhead beyond the model ({args.turns} turns; target: "
                  f"median < 60 ms):")
            print(f"  update queued -> sendMessage  {ms(out)}")
            print(f"  of which the channel's own    {ms(own)}")
            print("    (queued -> handed to the router, answered -> sendMessage at the fake)")
            print(f"  router only (submit+wait)     {ms(router)}")
        finally:
            clock.restore()
            channel.stop_polling()
            conv.drain(30)
            channel.close()


CHANNELS = {"gateway": bench_gateway, "telegram": bench_telegram}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--injections", type=int, default=20)
    ap.add_argument("--delay", type=float, default=0.2,
                    help="seconds the fake model takes for the call a message is injected during")
    ap.add_argument("--channel", choices=sorted(CHANNELS), action="append",
                    help="which channel (default: all)")
    args = ap.parse_args()
    for name in args.channel or sorted(CHANNELS):
        CHANNELS[name](args)


if __name__ == "__main__":
    main()
