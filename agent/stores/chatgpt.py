"""ChatGPT's export: one conversation of `conversations.json` (or of the split
`conversations-000.json`, `-001`...) as the thread the person saw.

A conversation is `{id | conversation_id, title, create_time, update_time,
current_node, default_model_slug, mapping}`, `mapping` a tree of nodes `{id, parent,
children, message}`. The visible thread is the path from `current_node` up through
`parent`: edits and regenerations sit on other branches and are left out. Hidden
messages are left out too (`weight` 0, system messages, ones marked visually hidden,
ones with no text); a tool's output is kept as the assistant's side with the tool
named as speaker; an image or file in a `multimodal_text` message becomes a one-line
note; `code` and `execution_output` are kept as their text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agent.stores.exports import CHATGPT, Imported, Message, Unreadable, epoch, title, wanted

ROLES = {"user": "user", "assistant": "assistant", "tool": "assistant"}


def _obj(value: object) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (a field of the wrong shape)."""
    return value if isinstance(value, dict) else {}


def conversation(obj: object) -> Imported:
    """The visible thread of one exported conversation; Unreadable when it has none."""
    obj = wanted(obj, dict, "not a conversation (an object expected)")
    cid = wanted(obj.get("conversation_id") or obj.get("id"), str, "it has no id")
    mapping = wanted(obj.get("mapping"), dict, "it has no mapping")
    created = epoch(obj.get("create_time"))
    out = Imported(CHATGPT, cid, title(obj.get("title")), created,
                   epoch(obj.get("update_time")),
                   model=obj.get("default_model_slug") if isinstance(
                       obj.get("default_model_slug"), str) else None)
    for node in thread(mapping, obj.get("current_node")):
        msg = _message(node.get("message"), created or out.updated)
        if msg is not None:
            out.messages.append(msg)
    return out


def thread(mapping: dict[str, Any], current: object) -> list[dict[str, Any]]:
    """The nodes from the root to `current_node`, oldest first; Unreadable for a cycle
    or a parent the mapping does not hold."""
    if current is None:
        current = _newest_leaf(mapping)
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    node_id = current
    while node_id is not None:
        if not isinstance(node_id, str) or node_id not in mapping:
            raise Unreadable(f"its thread names a node {str(node_id)[:40]!r} the mapping "
                             f"does not hold (a missing parent)")
        if node_id in seen:
            raise Unreadable(f"its thread runs in a cycle at node {node_id[:40]!r}")
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, dict):
            raise Unreadable(f"node {node_id[:40]!r} is not an object")
        path.append(node)
        node_id = node.get("parent")
    return path[::-1]


def _newest_leaf(mapping: dict[str, Any]) -> str | None:
    """An export without current_node (older ones): the newest node with no children."""
    best: str | None = None
    when = -1.0
    for key, node in mapping.items():
        if isinstance(node, dict) and not node.get("children"):
            t = _obj(node.get("message")).get("create_time")
            t = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0
            if t >= when:
                best, when = key, t
    return best


def _message(m: object, fallback: datetime | None) -> Message | None:
    if not isinstance(m, dict) or not isinstance(m.get("id"), str):
        return None
    author = _obj(m.get("author"))
    role = ROLES.get(str(author.get("role")))
    meta = _obj(m.get("metadata"))
    if role is None or m.get("weight", 1) == 0 or meta.get("is_visually_hidden_from_conversation"):
        return None
    text = content_text(m.get("content"), meta)
    ts = epoch(m.get("create_time")) or fallback
    if not text.strip() or ts is None:
        return None
    speaker = None
    if author.get("role") == "tool":
        speaker = f"tool {author['name']}" if isinstance(author.get("name"), str) else "tool"
    return Message(m["id"], role, ts, text, speaker)


def content_text(content: object, meta: dict[str, Any] | None = None) -> str:
    """A message's words: its text parts; a note for each image, audio or file."""
    if not isinstance(content, dict):
        return ""
    kind = content.get("content_type")
    out: list[str] = []
    if kind in ("code", "execution_output") or (
            kind not in ("text", "multimodal_text") and isinstance(content.get("text"), str)):
        text = content.get("text")
        if isinstance(text, str) and text.strip():
            out.append(text)
    for part in content.get("parts") or [] if isinstance(content.get("parts"), list) else []:
        if isinstance(part, str):
            if part.strip():
                out.append(part)
        elif isinstance(part, dict):
            out.append(_part_note(part))
    for att in (meta or {}).get("attachments") or []:
        if isinstance(att, dict) and isinstance(att.get("name"), str):
            out.append(f"[file: {att['name']}]")
    return "\n\n".join(p for p in out if p)


def _part_note(part: dict[str, Any]) -> str:
    """One line for a part that is not words: what it was, so the thread still reads."""
    if isinstance(part.get("text"), str):
        return part["text"]
    kind = str(part.get("content_type") or "attachment")
    if "image" in kind:
        size = (f" {part['width']}x{part['height']}"
                if isinstance(part.get("width"), int) and isinstance(part.get("height"), int)
                else "")
        return f"[image{size}]"
    if "audio" in kind:
        return "[audio]"
    name = part.get("name") or part.get("file_name")
    return f"[{kind.replace('_', ' ')}{': ' + name if isinstance(name, str) else ''}]"
