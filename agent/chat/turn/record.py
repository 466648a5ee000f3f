"""What a finished turn leaves: its transcript lines, its commit's trailers, the commit
itself (agent.chat.turn.save) and the TurnResult its caller hears, notes and all; or, for
a quiet heartbeat's answer that changed nothing, no trace."""

from __future__ import annotations

import logging
import secrets
from datetime import datetime
from typing import Any

from agent import redact
from agent.chat.subjects import shorten
from agent.chat.turn import save
from agent.chat.turn.options import TurnResult
from agent.chat.turn.state import Turn
from agent.llm.records import Text
from agent.stores import sessions
from agent.vault.change import Change, tokens

log = logging.getLogger("agent.chat.turn")


def _line(turn: int, n: int, now: datetime, role: str, content: Any,
          **extra: Any) -> sessions.Line:
    return sessions.Line.new(turn, role, content, now, id=f"{turn}.{n}-{secrets.token_hex(3)}",
                             **extra)


def leaves_no_trace(turn: Turn) -> bool:
    """A `discard_reply` answer from a turn that changed nothing (a quiet heartbeat)."""
    return (turn.opts.discard_reply is not None and turn.error is None
            and not turn.interrupted and turn.reply.strip() == turn.opts.discard_reply
            and not turn.staged.changed() and not turn.ctx.runs and not turn.injected)


def transcript(turn: Turn) -> list[sessions.Line]:
    """The turn's session lines: the user's message, then what the turn said and did."""
    number, now, used, reply = turn.number, turn.now, turn.used, turn.reply
    lines = [_line(number, 0, now, "user", turn.text)]
    for n, m in enumerate(turn.new, 1):
        content = m["content"]
        if m["role"] == "assistant" and len(content) == 1 and isinstance(content[0], Text):
            content = content[0].text
        extra = {"model": used} if m["role"] == "assistant" else m.get("extra", {})
        lines.append(_line(number, n, now, m["role"], content, **extra))
    if turn.interrupted:
        if reply:
            lines.append(_line(number, len(lines), now, "assistant", reply, model=used,
                               interrupted=True))
        else:
            lines[-1].extra["interrupted"] = True
    if turn.error and not turn.interrupted:
        lines[0].extra["error"] = turn.error
    if turn.cut is not None:
        # The reply as far as it went (or, cut between two calls, the turn's last
        # line), marked as cut and why.
        lines[-1].extra["cut"] = turn.cut.why
    answer = next((line for line in reversed(lines) if line.role == "assistant"), None)
    if answer is not None and turn.ctx.used is not None:
        # What memory the model was shown, by ids (agent.stores.used): never sent back.
        answer.extra["used"] = turn.ctx.used.record()
    if turn.opts.line_extra:
        lines[0].extra.update(turn.opts.line_extra)
    return lines


def error_line(turn: Turn) -> str | None:
    """The error in one line, as the Error trailer and `on_save` say it."""
    return " ".join(turn.error.split())[:200] if turn.error else None


def trailers(turn: Turn) -> dict[str, str]:
    out = {"Session": turn.session, "Turn": str(turn.number), "Model": turn.used,
           "Tokens": tokens(turn.usage)}
    if turn.interrupted:
        out["Interrupted"] = "yes"
    if turn.cut is not None:
        out["Cut"] = turn.cut.why
    error = error_line(turn)
    if error:
        out["Error"] = error
    if turn.ctx.runs:
        out["Runs"] = ", ".join(turn.ctx.runs)
    if turn.injected:
        out["Injected"] = str(len(turn.injected))
    out.update(turn.opts.extra_trailers or {})
    return out


def saved(turn: Turn, lines: list[sessions.Line]) -> TurnResult:
    """Write and commit the turn (save.persist), and what the caller hears of it."""
    on_save, error = turn.opts.on_save, error_line(turn)
    change = Change(turn.opts.kind, shorten(turn.text), scope=turn.opts.scope or turn.session,
                    trailers=trailers(turn))
    stopped = False
    sha: str | None
    try:
        # Through the module, so scripts/bench_turn.py can time it.
        sha = save.persist(turn.vault, turn.staged, turn.session, turn.now, lines, change,
                           before_commit=(lambda: on_save(error, turn.interrupted))
                           if on_save else None)
    except save.NotCommitted as e:
        # The reply was shown (streamed) already: it must not read as a saved turn.
        sha, turn.unsaved = None, str(e)
        log.error("turn of %s: %s", turn.session, turn.unsaved)
    except save.SavedThenInterrupted as e:
        sha, stopped = e.sha, True
    number = lines[0].turn if lines and lines[0].turn is not None else turn.number
    failed, unsaved = turn.error, turn.unsaved
    result = TurnResult(turn.reply, sha, turn.session, number, turn.usage, turn.used,
                        f"{failed} {unsaved}" if failed and unsaved else failed or unsaved,
                        turn.interrupted or stopped, replies=turn.texts,
                        injected=turn.injected,
                        cut=turn.cut.why if turn.cut is not None else None)
    result.notes.extend(notes(turn))
    turn.lines = lines
    return result


def notes(turn: Turn) -> list[str]:
    """What the person should hear of besides the reply, in one line each."""
    out = [turn.cut.line] if turn.cut is not None else []
    for failed, answered in zip(turn.fell_back_from, turn.fell_back):
        out.append(f"{failed} did not answer (agent doctor says why); "
                   f"{answered}, its fallback, did.")
    out.extend(turn.fit_notes)
    out.extend(filter(None, [redact.summary(turn.kept + turn.staged.removed)]))
    out.extend(f"Warning: {w}" for w in turn.prompt.warnings)
    out.extend(turn.staged.problems)
    out.extend(turn.mcp_notes + (turn.mcp.problems() if turn.mcp is not None else []))
    return out
