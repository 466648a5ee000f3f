"""Explicit-only learning (`[memory] learn = "explicit"`): the dream keeps only what the
person asked it to keep.

What counts as asking is read from the session lines an archive entry covers, never
from the model: words the person typed (`person_said`: a user-role line, but never a
tool result, a web page or a file, where a stranger's words arrive, nor a cron job's
message, a sub-agent's task or an imported message's attachments) that ask to remember
("remember that...", "don't forget...", "note that...", "keep in mind...", and their
German, French, Spanish, Italian, Portuguese, Dutch, Russian, Chinese and Japanese
kin), together with the person's message before it when the ask itself is short ("I
moved to Lisbon." / "Remember that."), and the text of a `remember` call the model
made in that same turn. An entry without such a message is passed over: it is not
sent to the model at all.

After the model replies, every finding and edit is checked against those asks: an add
or update whose line the asks do not state (at least half of its distinctive words
found in them) is dropped, and so is a removal, unless it settles a sync-conflict
block. So an archive entry crafted to steer the model still cannot make the dream keep
something the person never asked for. Pure functions over text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.llm.records import ToolCall
from agent.stores import sessions
from agent.dream.duplicates import words

# A request to keep something: the verb as an imperative (at the start of a sentence,
# after "please", "can you" and the like), never a question ("do you remember...") or a
# memory of one's own ("I remember..."). In English, German, French, Spanish, Italian,
# Portuguese and Dutch the verb must follow such a lead; Russian, Chinese and Japanese
# requests are their own forms (запомни, 请记住, 覚えておいて), found anywhere.
_Q = "['’]"
_LEADS = ("please|pls|and|also|so|can you|could you|would you|will you|"
          "bitte|und|auch|kannst du|könntest du|"
          f"s{_Q}il te pla[iî]t|s{_Q}il vous pla[iî]t|stp|svp|et|aussi|peux-tu|pourrais-tu|"
          "por favor|y|también|puedes|podrías|"
          "per favore|e|anche|puoi|potresti|"
          "pode|podes|poderia|você pode|também|"
          "alsjeblieft|alstublieft|en|ook|kun je|kunt u")
_LEAD = rf"(?:^|[.!?;:,\n]\s*|\b(?:{_LEADS})\s+)"
_VERBS = (
    # English
    rf"remember|memori[sz]e|don{_Q}?t forget|do not forget|never forget|keep in mind|"
    r"bear in mind|make a note|take a note|note (?:that|this|down|it)|"
    r"write (?:that|this|it) down|save (?:that|this|it)\b|"
    r"keep (?:that|this|it) in (?:mind|memory)|add (?:that|this|it) to (?:your )?memory|"
    # German
    r"merk(?:e|t)? (?:dir|euch)|merken sie sich|vergiss (?:das )?nicht|vergesst nicht|"
    r"vergessen sie nicht|denk(?:e|t)? daran|notier(?:e|t)?|schreib(?:e)? (?:dir )?auf|"
    r"behalte (?:das|dies|es) im (?:kopf|ged[äa]chtnis)|speicher(?:e)? (?:das|dies|es)|"
    # French
    r"souviens-toi|souvenez-vous|rappelle-toi|rappelez-vous|retiens|retenez|"
    rf"n{_Q}oublie pas|n{_Q}oubliez pas|note que|notez que|garde(?:z)? en m[ée]moire|"
    rf"garde(?:z)? (?:à|a) l{_Q}esprit|m[ée]morise(?:z)?|"
    # Spanish
    r"recuerda|recu[ée]rdalo|acu[ée]rdate|no (?:te )?olvides|no olvide|memoriza|apunta|"
    r"anota|ten en cuenta|guarda (?:esto|eso) en (?:tu )?memoria|"
    # Italian
    r"ricorda|ricordati|ricordatelo|non dimenticare|non scordare|tieni a mente|annota|"
    r"prendi nota|memorizza|segnati|"
    # Portuguese
    r"lembre-se|lembra-te|lembra|lembre|n[ãa]o (?:se |te )?esque[çc]a[s]?|anote|memorize|"
    r"tenha em mente|guarde (?:isso|isto)|"
    # Dutch
    r"onthoud|vergeet (?:het )?niet|noteer|schrijf (?:dat|dit|het) op|denk eraan|"
    r"houd (?:dat|dit|het) in gedachten")
_ANYWHERE = (r"\b(?:запомни(?:те)?|не забудь(?:те)?|не забывай(?:те)?|имей(?:те)? в виду|"
             r"запиши(?:те)?)\b|"
             r"(?:^|[。！？，、.!?,;:\s]|请|請|麻烦你?|幫我|帮我)(?:记住|記住|记一下|記一下|记下|記下)|"
             r"别忘了|別忘了|不要忘记|不要忘記|"
             r"覚えて(?:おいて|おいてください|ください)|覚えといて|忘れないで|メモして")
ASK = re.compile(rf"{_LEAD}(?:{_VERBS})\b|{_ANYWHERE}", re.IGNORECASE)
_SHORT = 8          # words: an ask this short points at the message before it
REMEMBER_TOOL = "remember"


def asks_to_remember(text: str) -> bool:
    """Whether a message of the person's asks to keep something."""
    return bool(ASK.search(text or ""))


# Sessions whose user lines nobody typed: a sub-agent's task is the model's words, a
# heartbeat's prompt a file's, the dream's its own.
MODEL_SESSIONS = ("agent/", "heartbeat/", "dream/")


def person_said(session: str, obj: object) -> str:
    """The words of the session line `obj` (of `session`) that the person typed: ""
    for anything else. A user-role line is not always that: a cron job's run (`job`)
    is the job's message, a sub-agent's is the model's, and the attachments of an
    imported message (`attached`: its last content blocks) are a file's. Tool results
    never count."""
    if not isinstance(obj, dict) or obj.get("role") != "user" or session.startswith(
            MODEL_SESSIONS) or obj.get(sessions.JOB) is not None:
        return ""
    content = obj.get("content", "")
    attached = obj.get(sessions.ATTACHED)
    if isinstance(content, list) and isinstance(attached, int) and attached > 0:
        content = content[:max(0, len(content) - attached)]
    return sessions.message_text(content, sep=" ")


def requests(lines: Iterable[dict], session: str = "") -> list[str]:
    """The person's asks to remember in an entry's session lines (in order; `session`:
    theirs): each asking message (with the one before it when the ask is short) and the
    `remember` calls of its turn."""
    out: list[str] = []
    before = ""
    asked_turns: set[object] = set()
    rows = [o for o in lines if isinstance(o, dict) and o.get("role") in ("user", "assistant")]
    for obj in rows:
        if obj.get("role") != "user":
            continue
        text = person_said(session, obj)
        if not text.strip():
            continue            # tool results only, or words nobody typed
        if asks_to_remember(text):
            if len(text.split()) <= _SHORT and before:
                out.append(before)
            out.append(text)
            asked_turns.add(obj.get("turn"))
        before = text
    for obj in rows:
        if obj.get("role") != "assistant" or obj.get("turn") not in asked_turns:
            continue
        content = obj.get("content")
        for block in sessions.blocks(content) if isinstance(content, list) else []:
            if isinstance(block, ToolCall) and block.name == REMEMBER_TOOL:
                said = (block.input or {}).get("text")
                if isinstance(said, str) and said.strip():
                    out.append(said)
    return out


def stated(line: str, asked: set[str]) -> bool:
    """Whether the person's asks (`asked`: their words) state `line`: at least half of
    its words are in them."""
    mine = words(line)
    return bool(mine) and 2 * len(mine & asked) >= len(mine)


def asked_words(asks: list[str]) -> set[str]:
    return set().union(*(words(a) for a in asks)) if asks else set()


def keep_findings(findings: list[dict], asks: list[str]) -> tuple[list[dict], int]:
    """The findings the asks state (a "stale" finding removes, never keeps: dropped),
    and how many were dropped."""
    theirs = asked_words(asks)
    kept = [f for f in findings if f.get("kind") != "stale"
            and stated(str(f.get("statement", "")), theirs)]
    return kept, len(findings) - len(kept)


def unasked(op: dict, asks: set[str], in_conflict: bool) -> str | None:
    """Why an editor operation is not what the person asked to keep, or None."""
    if in_conflict:
        return None             # settling a sync-conflict block keeps a version they wrote
    kind = str(op.get("op", ""))
    if kind == "delete":
        return "a removal nobody asked for ([memory] learn = explicit)"
    if not stated(str(op.get("new", "")), asks):
        return "not something the person asked to remember ([memory] learn = explicit)"
    return None
