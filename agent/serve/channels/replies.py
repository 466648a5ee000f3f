"""What a chat is sent for a turn: the reply (marked when it was stopped or failed),
cut to fit the chat's message limit (Telegram's: 4096 UTF-16 code units) at a paragraph
break, else a line break, else a space."""

from __future__ import annotations

LIMIT = 4096                 # characters (UTF-16 code units) in one message


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def split_message(text: str, limit: int = LIMIT) -> list[str]:
    """`text` in pieces of at most `limit` UTF-16 units, cut at a paragraph break, else a
    line break, else a space, else anywhere."""
    text = text.strip("\n") or "(no reply)"
    out: list[str] = []
    while utf16_len(text) > limit:
        # the longest prefix within the limit
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if utf16_len(text[:mid]) <= limit:
                lo = mid
            else:
                hi = mid - 1
        head = text[:lo]
        cut = -1
        for sep in ("\n\n", "\n", " "):
            cut = head.rfind(sep)
            if cut > lo // 2:
                break
        if cut <= 0:
            cut = lo
        out.append(text[:cut].rstrip())
        text = text[cut:].lstrip("\n ")
    if text:
        out.append(text)
    return [p for p in out if p] or ["(no reply)"]


def reply_text(ticket: object, result: object) -> str:
    """What the chat is sent for a message: the reply, marked when it was stopped, and
    the error when the turn failed."""
    reply = (getattr(ticket, "reply", "") or getattr(result, "reply", "") or "").strip()
    if getattr(result, "interrupted", False):
        reply = (reply + "\n\n[stopped]").strip()
    error = getattr(ticket, "error", None) or getattr(result, "error", None)
    if error:
        reply = (reply + f"\n\n(Error: {error})").strip()
    return reply or "(no reply)"
