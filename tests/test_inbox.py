"""The inbox of a running turn (agent/chat/inbox.py): a message typed while a turn runs is
either seen by the turn or handed back for the next one, never both, never neither."""

from __future__ import annotations

import threading

import pytest

from agent.chat.inbox import Inbox

STEPS = [
    # (name, steps, what each step returned); a step is ("put", text[, source]),
    # ("drain",), ("close",) or ("waiting",)
    ("nothing arrived", [("drain",), ("close",)], [[], []]),
    ("drained oldest first, with the source each came from",
     [("put", "a", "telegram"), ("put", "b"), ("waiting",), ("drain",), ("waiting",)],
     [True, True, 2, [("a", "telegram"), ("b", None)], 0]),
    ("a drained message is the turn's: close does not hand it back",
     [("put", "a"), ("drain",), ("close",)], [True, [("a", None)], []]),
    ("what arrived after the last drain is handed back by close, texts only",
     [("put", "a"), ("drain",), ("put", "b", "web"), ("put", "c"), ("close",)],
     [True, [("a", None)], True, True, ["b", "c"]]),
    ("after close a put is refused and the caller keeps the message",
     [("close",), ("put", "late"), ("waiting",), ("drain",), ("close",)],
     [[], False, 0, [], []]),
    ("an empty text is a message too", [("put", ""), ("drain",)], [True, [("", None)]]),
    ("drain twice: the second finds nothing", [("put", "a"), ("drain",), ("drain",)],
     [True, [("a", None)], []]),
]


@pytest.mark.parametrize("name, steps, returned", STEPS, ids=[s[0] for s in STEPS])
def test_each_step_returns_what_the_contract_says(name, steps, returned):
    inbox = Inbox()
    got = []
    for op, *args in steps:
        if op == "put":
            got.append(inbox.put(args[0], source=args[1] if len(args) > 1 else None))
        else:
            got.append(getattr(inbox, op)())
    assert got == returned


def test_messages_racing_the_turn_end_are_each_seen_once_or_handed_back_once():
    inbox = Inbox()
    texts = [f"m{t}-{i}" for t in range(4) for i in range(500)]
    refused: list[str] = []
    drained: list[str] = []
    go = threading.Barrier(5)

    def sender(t):
        go.wait()
        for i in range(500):
            if not inbox.put(f"m{t}-{i}"):
                refused.append(f"m{t}-{i}")

    senders = [threading.Thread(target=sender, args=(t,)) for t in range(4)]
    for s in senders:
        s.start()
    go.wait()
    while len(drained) < 200:                   # the turn reads some while they arrive
        drained += [text for text, _ in inbox.drain()]
    late = inbox.close()
    for s in senders:
        s.join()
    assert sorted(drained + late + refused) == sorted(texts)
    assert len(set(drained + late + refused)) == len(texts)
