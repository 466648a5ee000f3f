"""Claude.ai's export: `conversations.json`, an array of `{uuid, name, summary,
created_at, updated_at, chat_messages[]}`, each message `{uuid, sender: human |
assistant, text, content[], attachments[{file_name, extracted_content}], files[]}`;
and `memories.json`, what Claude remembered of the person.

An attachment's extracted text is kept with the message it came with (it is what the
person showed Claude), apart from what the person typed (`Message.attached`: the
person did not write it, so it never counts as their ask to remember); a file without
extracted text becomes a one-line note. The
memories are returned as text, for the dream to turn into proposals for review: they
are never written to MEMORY.md or USER.md as they are.
"""

from __future__ import annotations

from agent.stores.exports import CLAUDE, Imported, Message, iso, title, wanted

SENDERS = {"human": "user", "user": "user", "assistant": "assistant"}
ATTACHMENT_CHARS = 200_000          # of one attachment's text kept with its message


def conversation(obj) -> Imported:
    """One exported conversation; Unreadable when it has no uuid or messages list."""
    obj = wanted(obj, dict, "not a conversation (an object expected)")
    uuid = wanted(obj.get("uuid"), str, "it has no uuid")
    msgs = wanted(obj.get("chat_messages"), list, "it has no chat_messages")
    created = iso(obj.get("created_at"))
    out = Imported(CLAUDE, uuid, title(obj.get("name")), created, iso(obj.get("updated_at")))
    for m in msgs:
        msg = _message(m, created)
        if msg is not None:
            out.messages.append(msg)
    return out


def _message(m, fallback) -> Message | None:
    if not isinstance(m, dict) or not isinstance(m.get("uuid"), str):
        return None
    role = SENDERS.get(str(m.get("sender")))
    ts = iso(m.get("created_at")) or fallback
    if role is None or ts is None:
        return None
    words, attached = _parts(m)
    if not words.strip() and not attached:
        return None
    return Message(m["uuid"], role, ts, words if words.strip() else "", attached=attached)


def message_text(m: dict) -> str:
    """The message's words (its text blocks, else `text`), then each attachment's text."""
    words, attached = _parts(m)
    return "\n\n".join(([words] if words.strip() else []) + attached)


def _parts(m: dict) -> tuple[str, list[str]]:
    """(the words the sender typed, the text of each attachment and file note)."""
    blocks = [b["text"] for b in m.get("content") or []
              if isinstance(b, dict) and b.get("type") == "text"
              and isinstance(b.get("text"), str)] if isinstance(m.get("content"), list) else []
    words = "\n\n".join(t for t in blocks if t.strip()) or (
        m["text"] if isinstance(m.get("text"), str) else "")
    out: list[str] = []
    for att in m.get("attachments") or []:
        if not isinstance(att, dict):
            continue
        name = att.get("file_name") if isinstance(att.get("file_name"), str) else "attachment"
        text = att.get("extracted_content")
        if isinstance(text, str) and text.strip():
            out.append(f"[attachment: {name}]\n{text[:ATTACHMENT_CHARS]}")
        else:
            out.append(f"[attachment: {name}]")
    for f in m.get("files") or []:
        if isinstance(f, dict) and isinstance(f.get("file_name"), str):
            out.append(f"[file: {f['file_name']}]")
    return words, out


def memories(data) -> list[str]:
    """The memory texts of a memories.json (`[{conversations_memory, project_memories}]`
    or any nesting of those): every non-empty string, in order."""
    out: list[str] = []

    def walk(x):
        if isinstance(x, str):
            if x.strip():
                out.append(x.strip())
        elif isinstance(x, dict):
            for k, v in x.items():
                if k not in ("uuid", "account_uuid", "created_at", "updated_at"):
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(data)
    return out
