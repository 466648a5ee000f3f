#!/usr/bin/env python3
"""Kills: messages lost when `agent serve` is SIGKILLed while it answers Telegram and the
gateway. Against the fake Anthropic server (tests/fakeanthropic.py) and the fake Bot API
(tests/faketelegram.py), in a fresh vault:

for each of --kills rounds: serve starts, one Telegram message and one gateway message
are sent, and serve is SIGKILLed at a random moment from 0 to --window seconds after the
messages went out (the model answers each call after a random delay of up to --delay
seconds, so the kill lands before, during or after turns). Then serve runs once more
until every message has its answer. Printed:

- lost: messages with no user line in their session's transcript (the person's words
  gone); target 0 for Telegram (an update is confirmed only once written) and for
  gateway messages whose client got its answer; a gateway client whose connection
  closed with no answer was not told its message was kept, and sends it again;
- unanswered: messages with no reply in the transcript at the end; target 0;
- twice: messages with more than one user line (an update taken again); target 0;
- sent: Telegram replies sent, and how many messages got more than one.

    python scripts/bench_kills.py [--kills 20] [--window 1.5] [--delay 0.4]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AGENT_EMBED", "off")
sys.path.insert(0, str(ROOT / "tests"))

from fakeanthropic import FakeAnthropic, reply  # noqa: E402
from faketelegram import FakeTelegram  # noqa: E402

from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

USER = 42


def start(root: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "agent", "--vault", str(root), "serve",
                          "--tick", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read():
        for line in p.stdout:
            lines.append(line)
            if "agent serve on" in line:
                ready.set()
    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60):
        raise SystemExit("serve did not start:\n" + "".join(lines))
    p.lines = lines
    return p


ANSWERED: set[str] = set()      # gateway messages whose client got a 200


def post(root: Path, text: str) -> None:
    """POST a gateway message; the answer (or serve's death) is not waited for here."""
    try:
        info = json.loads((root / ".agent/gateway.json").read_text())
        token = (root / ".agent/gateway-token").read_text().strip()
    except OSError:
        return
    req = urllib.request.Request(f"{info['url']}/v1/sessions/gateway/bench/messages",
                                 data=json.dumps({"text": text}).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}"})

    def send():
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
                if r.status == 200:
                    ANSWERED.add(text)
        except OSError:
            pass
    threading.Thread(target=send, daemon=True).start()


def lines_of(root: Path, key: str) -> list[dict]:
    out = []
    for f in sorted((root / "sessions" / key).glob("*.jsonl")):
        out += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--window", type=float, default=1.5)
    ap.add_argument("--delay", type=float, default=0.4)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as d, FakeAnthropic() as fake, FakeTelegram() as tg:
        os.environ.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="bench-key",
                          TELEGRAM_BOT_TOKEN=tg.token, GIT_CEILING_DIRECTORIES=d)
        fake.default_reply = lambda _req: reply("Answered.", delay=rnd.random() * args.delay)
        root = Path(d) / "vault"
        Vault.init(root, LAYOUT)
        (root / "agent.toml").write_text(
            f"[channels.telegram]\nenabled = true\nallow_from = [{USER}]\n"
            f"api_base = \"{tg.url}\"\n\n[gateway]\nport = 0\n")
        sent_texts = []
        for i in range(args.kills):
            serve = start(root)
            tg.wait_for(lambda: tg.calls("getUpdates"), what="a poll")
            text = f"message {i}"
            tg.message(USER, f"tg {text}")
            post(root, f"gw {text}")
            sent_texts.append(text)
            time.sleep(rnd.random() * args.window)      # the kill lands anywhere
            serve.send_signal(signal.SIGKILL)
            serve.wait(10)
        serve = start(root)                             # the last run: answers what is left
        end = time.monotonic() + 120
        tg_key, gw_key = f"telegram/{USER}", "gateway/bench"

        def unanswered(key: str) -> int:
            """Messages after the session's last reply."""
            lines = lines_of(root, key)
            last = max((i for i, x in enumerate(lines) if x.get("role") == "assistant"),
                       default=-1)
            return sum(1 for x in lines[last + 1:] if x.get("role") == "user"
                       or x.get("type") == "received")

        def outstanding() -> int:
            try:
                return len(json.loads((root / ".agent/received.json").read_text()))
            except OSError:
                return 0
        while (unanswered(tg_key) or unanswered(gw_key) or outstanding()) \
                and time.monotonic() < end:
            time.sleep(0.2)
        serve.send_signal(signal.SIGTERM)
        serve.wait(60)
        for key, prefix in ((tg_key, "tg"), (gw_key, "gw")):
            lines = lines_of(root, key)
            users = [x["content"] for x in lines if x.get("role") == "user"]
            lost = [t for t in sent_texts if f"{prefix} {t}" not in users]
            twice = [t for t in sent_texts if users.count(f"{prefix} {t}") > 1]
            turns = sum(1 for x in lines if x.get("role") == "user" and x.get("received"))
            print(f"{key}: {len(sent_texts)} messages, {args.kills} kills: lost {len(lost)}, "
                  f"taken twice {len(twice)}, unanswered {unanswered(key)}, turns {turns}"
                  + (f" (lost: {lost})" if lost else ""))
            if prefix == "gw":
                told = [t for t in lost if f"gw {t}" in ANSWERED]
                print(f"  lost after their client got a 200: {len(told)} (target 0); the "
                      f"other {len(lost) - len(told)} lost were never answered: their "
                      f"client saw the connection close, before serve had written them")
            if prefix == "tg":
                sent = len(tg.sent(USER))
                print(f"  telegram replies sent: {sent} for {turns} turns answering them "
                      f"(a message that joined a running turn is answered by its reply)")
        print(f"receipts left open: {outstanding()}")
        if os.environ.get("BENCH_SHOW"):
            for x in lines_of(root, gw_key):
                print(json.dumps({k: x.get(k) for k in ("type", "id", "role", "content",
                                                        "received", "injected", "turn")}))
            print(subprocess.run(["git", "-C", str(root), "log", "--oneline", "-60"],
                                 capture_output=True, text=True).stdout)


if __name__ == "__main__":
    main()
