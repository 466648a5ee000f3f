"""What a chat turn recalls: the memory scheduler's ideas (MemOS), each measured by
scripts/bench_scheduler.py on a scripted 50-turn conversation and kept where it helped.

- A message that needs no memory (a greeting, thanks, "ok") runs no search and adds no
  tokens.
- Candidates are merged with what the turn already holds: a hit whose text the
  conversation window already shows, a near-duplicate of a better hit, and a hit too
  short to carry a fact are dropped.
- A message with no word to search for ("why?", "when was that?", "tell me more") runs
  no search either: a search for its stop words finds noise.
- The retrieved memories are a small working set that lives in the newest user
  message's context block (the session file keeps the person's words, never the
  block, so the cached prefix stays stable) and across the session's turns
  (agent/chat/working.py): a follow-up shows it again, small talk shows nothing, and a
  search that finds memories replaces it, so the prompt stays small.
"""

from __future__ import annotations

import re
import unicodedata

# Whole messages that need no memory, after folding case and dropping punctuation and
# emoji. Kept short on purpose: anything with more substance is searched.
_SMALL_TALK = {
    "hi", "hello", "hey", "hiya", "yo", "morning", "good morning", "good afternoon",
    "good evening", "good night", "night", "gn", "thanks", "thank you", "thanks a lot",
    "thank you so much", "thanks so much", "many thanks", "thx", "ty", "cheers", "ok",
    "okay", "k", "kk", "ok thanks", "okay thanks", "ok thank you", "great", "great thanks",
    "cool", "nice", "awesome", "perfect", "got it", "sounds good", "sure", "yes", "no",
    "yep", "nope", "yeah", "lol", "haha", "hahaha", "bye", "goodbye", "see you",
    "see you later", "later", "np", "no problem", "you're welcome", "welcome",
    "你好", "谢谢", "谢谢你", "好的", "嗯", "再见", "早上好", "晚安",
    "こんにちは", "こんばんは", "おはよう", "おはようございます", "ありがとう",
    "ありがとうございます", "どうも", "はい", "了解", "さようなら", "おやすみ",
}
_FILLER = re.compile(r"^(?:(?:hi|hey|hello|ok|okay|thanks|thank you|great|cool|nice|"
                     r"perfect|awesome)\s*)+$")


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(c if (c.isalnum() or c.isspace() or c == "'") else " " for c in text)
    return " ".join(text.split())


# Words a follow-up is made of besides stop words: a message of only these and stop
# words asks about what the conversation already holds.
_FOLLOW_UP = frozenset("""
tell say said explain elaborate detail details else really exactly again go continue
mean meant sure one ones thing things happened happen ok okay so oh hmm wait
""".split())


def is_small_talk(message: str) -> bool:
    """A greeting, thanks, "ok": a message that needs no memory at all."""
    folded = _fold(message)
    return not folded or folded in _SMALL_TALK or bool(_FILLER.match(folded))


def needs_retrieval(message: str) -> bool:
    """Whether a user message may need a search for memories: not for small talk, nor
    for a follow-up that holds no word to search for."""
    from agent.search.text import STOP_WORDS, tokens

    if is_small_talk(message):
        return False
    return any(w not in STOP_WORDS and w not in _FOLLOW_UP for w in tokens(message, query=True))


def _words(text: str) -> set[str]:
    folded = _fold(text)
    out = set(folded.split())
    # CJK has no spaces: its characters stand in for words.
    out.update(c for c in folded if "\u3040" <= c <= "\u9fff")
    return out


MIN_WORDS = 3          # a hit shorter than this ("Booked.", "ok") carries no fact
SAME = 0.8             # word overlap (Jaccard) from which two texts say the same


def _similar(a: set[str], b: set[str]) -> bool:
    return bool(a) and bool(b) and len(a & b) / len(a | b) >= SAME


def select(hits: list, window_texts: list[str], limit: int) -> list:
    """The hits worth the prompt's tokens, best first: near-duplicates of a better hit or
    of a message the window shows, and hits too short to carry a fact, left out."""
    held = [_words(t) for t in window_texts if t]
    kept: list = []
    kept_words: list[set[str]] = []
    for h in hits:
        words = _words(h.text or "")
        if len(words) < MIN_WORDS and not getattr(h, "context", None):
            continue
        if any(_similar(words, w) for w in held) or any(_similar(words, w) for w in kept_words):
            continue
        kept.append(h)
        kept_words.append(words)
        if len(kept) >= limit:
            break
    return kept


def unseen(memories: list[dict], window_texts: list[str]) -> list[dict]:
    """Working-set records (agent.chat.prompt.hit_record) whose quote the window does
    not show by now."""
    held = [_words(t) for t in window_texts if t]
    return [m for m in memories if not any(_similar(_words(m.get("quote") or ""), w) for w in held)]
