#!/usr/bin/env python3
"""How many results "close in meaning" `agent search` shows for queries about nothing
in the vault: the check behind the meaning floor (agent/search/fusion.py).

Takes vaults built by scripts/eval_retrieval.py --workdir (or any vaults) and fusion
settings to try; prints each off-topic query's meaning-only results and the total.

    python scripts/eval_retrieval.py DATA.json --conversations 0-2 --workdir /tmp/tune
    python scripts/eval_offtopic.py /tmp/tune/0/vault /tmp/tune/1/vault /tmp/tune/2/vault
    python scripts/eval_offtopic.py /tmp/tune/*/vault --fuse chance=1.0
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).absolute().parent.parent))

from agent.search import fusion as fusion_mod, index  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402

# None of their words occurs in the LoCoMo conversations (checked with grep).
OFF_TOPIC = ["咖啡", "コーヒー", "quantum chromodynamics", "sourdough starter recipe",
             "mortgage interest rate", "kernel panic on boot", "tax return deadline",
             "cricket world cup final", "dentist appointment", "Kubernetes pod eviction",
             "Bitcoin wallet", "Steuererklärung", "impuestos", "vaccine booster side effects",
             "printer out of toner", "parking ticket fine", "volcano eruption in Iceland",
             "plumbing leak under the sink"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("vaults", nargs="+", type=Path)
    ap.add_argument("--fuse", action="append", default=[], metavar="NAME=VALUE",
                    help="override a fusion setting (e.g. --fuse chance=1.0)")
    args = ap.parse_args(argv)
    fusion = fusion_mod.FUSION
    for item in args.fuse:
        name, _, value = item.partition("=")
        fusion = replace(fusion, **{name: type(getattr(fusion, name))(value)})
    vaults = [Vault(p) for p in args.vaults]
    total = hit_queries = 0
    for q in OFF_TOPIC:
        sims = [h.similarity for v in vaults
                for h in index.search(v, q, limit=10, mode="hybrid", fusion=fusion)
                if h.why == "meaning"]
        print(f"{q:<32} {len(sims):>3}  {' '.join(f'{s:.3f}' for s in sims[:5])}")
        total += len(sims)
        hit_queries += bool(sims)
    print(f"fusion: {fusion}")
    print(f"meaning-only results for {len(OFF_TOPIC)} off-topic queries: {total} "
          f"({hit_queries} queries with any)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
