"""The pages: each handler reads its query or form, calls the operation every front-end
calls (the router, agent/ops, the search index, history) and renders a
template. They run in Starlette's thread pool (git and file reads block); the door in
app.py has already checked the login and, for a change, the CSRF token.

Every change answers with a redirect to the page it came from (a plain form works
without JavaScript; htmx, boosting links and forms, swaps the page in place), with what
was done or why not in `msg` or `error`.
"""

from __future__ import annotations

import json
from datetime import datetime
from urllib.parse import urlencode

from agent.errors import UserError
from agent.llm.records import Text, ToolCall
from agent.stores import memory, sessions
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

CHAT = "web/default"          # the page's own session, unless another is picked
SHOWN = 60                    # messages of a conversation shown (the newest)
KINDS = ("chat", "dream", "review", "note", "edit", "sync", "undo", "cron", "heartbeat",
         "archive", "deliver", "receive", "config", "mcp", "forget", "restore", "import")


def _back(path: str, **params):
    from starlette.responses import RedirectResponse

    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return RedirectResponse(path + (f"?{query}" if query else ""), 303)


def _form(request) -> dict:
    return request.state.form


def _now():
    from agent.clock import now
    return now()


# ---- Chat -------------------------------------------------------------------------------


def conversation(root, key: str, n: int = SHOWN) -> list[dict]:
    """The newest `n` messages of session `key`, oldest first, as the page shows them:
    {role, text, tools: [{name, input}], ts, interrupted}; tool results folded into
    the call they answer."""
    s = sessions.Session(root, key)
    picked: list[dict] = []
    for path in reversed(s.files()):
        rel = path.relative_to(root).as_posix()
        for _, obj in sessions.read_backward(path, rel, root):
            if not sessions.is_message(obj) or obj.get("type") == "received":
                continue
            parts = _parts(obj.get("content"))
            if not parts:
                continue                 # a tool result alone: shown with its call
            used = obj.get("used") if obj.get("role") == "assistant" else None
            picked.append({"role": obj.get("role"), "parts": parts,
                           "ts": str(obj.get("ts") or "")[:16].replace("T", " "),
                           "interrupted": bool(obj.get("interrupted")),
                           "source": obj.get("source") or "", "id": str(obj.get("id") or ""),
                           "used": used.get("n") if isinstance(used, dict)
                           and isinstance(used.get("n"), int) else None})
            if len(picked) >= n:
                return picked[::-1]
    return picked[::-1]


def _parts(content) -> list[tuple[str, str, str]]:
    """A message's text and tool calls in the order written: ("text", text, "") or
    ("tool", name, input as JSON)."""
    if isinstance(content, str):
        return [("text", content, "")] if content.strip() else []
    out: list[tuple[str, str, str]] = []
    for b in sessions.blocks(content) if isinstance(content, list) else []:
        if isinstance(b, Text) and b.text.strip():
            if out and out[-1][0] == "text":          # blocks of one answer run on
                out[-1] = ("text", out[-1][1] + b.text, "")
            else:
                out.append(("text", b.text, ""))
        elif isinstance(b, ToolCall):
            out.append(("tool", b.name, json.dumps(b.input, ensure_ascii=False)[:300]))
    return out


def chat(page, request):
    key = request.query_params.get("session") or CHAT
    try:
        sessions.check_key(key)
    except UserError as e:
        return page.render(request, "error.html", 400, title="Chat", problem=str(e))
    root = page.vault.root
    return page.render(request, "chat.html", nav="chat", session=key,
                       messages=conversation(root, key),
                       sessions=sessions.list_sessions(root),
                       running=key in page.conversations.running())


async def chat_send(page, request):
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import StreamingResponse

    from agent.serve.conversations import ServeStopping
    from agent.serve.events import Events

    form = _form(request)
    key = form.get("session") or CHAT
    text = form.get("text", "")
    stream = "text/event-stream" in (request.headers.get("accept") or "")
    events = Events()
    try:
        sessions.check_key(key)
        if text.strip().startswith("/"):
            # A slash command: the table the terminal and Telegram serve (agent.ops.commands),
            # answered on the page and never sent to the model.
            shown, commit = await run_in_threadpool(_command, page, key, text)
            if not stream:
                return _back("/", session=key, msg=shown)
            events.put("text", {"text": shown})
            events.put("reply", {"commit": commit, "command": True})
            return StreamingResponse(events.sse(), media_type="text/event-stream; charset=utf-8",
                                     headers={"Cache-Control": "no-store"})
        await run_in_threadpool(page.conversations.submit, key, text, source="web",
                                on_event=events.put)
    except ServeStopping as e:
        return _back("/", session=key, error=str(e)) if not stream else _sse_error(503, e)
    except UserError as e:
        return _back("/", session=key, error=str(e)) if not stream else _sse_error(400, e)
    if stream:
        return StreamingResponse(events.sse(), media_type="text/event-stream; charset=utf-8",
                                 headers={"Cache-Control": "no-store"})
    data = await events.reply()          # without JavaScript: the page once it is answered
    return _back("/", session=key, error=data.get("error") or "")


def _command(page, key: str, text: str) -> tuple[str, str | None]:
    """A slash command of the chat box run as the terminal and Telegram run it: its
    answer as text, and the commit it made (None: it changed nothing)."""
    from agent.ops import commands

    conversations = page.conversations
    ctx = commands.Context(page.vault, key, "web", provider=conversations.provider,
                           stop=lambda: conversations.cancel(key), hold=conversations.hold)
    reply = commands.run(ctx, text)
    parts = [f"--- {name}\n{body}" for name, body in reply.sections]
    if reply.text:
        parts.append(reply.text)
    if reply.review:
        parts += [f"{item.number}. {item.op} {item.file}: {item.new or item.old}"
                  for item in reply.review]
        parts.append("Decide them on the Review page.")
    return "\n\n".join(parts), (page.vault.head() if reply.changed else None)


def _sse_error(status: int, e: Exception):
    from starlette.responses import PlainTextResponse
    return PlainTextResponse(str(e), status)


def chat_stop(page, request):
    key = _form(request).get("session") or CHAT
    stopped = page.conversations.cancel(key)
    if "application/json" in (request.headers.get("accept") or ""):
        from starlette.responses import JSONResponse
        return JSONResponse({"stopped": stopped})
    return _back("/", session=key, msg="Stopped." if stopped else "Nothing was running.")


def chat_used(page, request):
    """The memories a reply was shown (agent.ops.used), as JSON: by `reply` id or by
    `turn` number, in `session`."""
    from starlette.responses import JSONResponse

    from agent.ops import used

    q = request.query_params
    key = q.get("session") or CHAT
    try:
        if q.get("turn"):
            if not q["turn"].isdigit():
                raise used.NoReply(f"turn must be a number, not {q['turn'][:20]!r}.")
            reply = used.turn_reply(page.vault, key, int(q["turn"]))
        else:
            reply = used.find_reply(page.vault, q.get("reply") or "", key)
        report = used.used(page.vault, reply)
    except UserError as e:
        return JSONResponse({"error": str(e)}, 404, headers={"Cache-Control": "no-store"})
    return JSONResponse(report.to_json(), headers={"Cache-Control": "no-store"})


# ---- Memory -----------------------------------------------------------------------------


def memory_page(page, request):
    from agent.fs import safe

    rel = request.query_params.get("file") or memory.MEMORY
    if rel not in memory.MEMORY_FILES:
        return page.render(request, "error.html", 404, title="Memory",
                           problem=f"{rel!r} is not a memory file (MEMORY.md or USER.md).")
    try:
        text = safe.read_text(page.vault.root, rel) or ""
    except UserError as e:
        return page.render(request, "error.html", 500, title="Memory", problem=str(e))
    lines: list[dict] = []
    for n, line in enumerate(text.splitlines(), 1):
        heading = memory.HEADING.match(line)
        bullet = memory.FACT.match(line)
        prose = not (heading or bullet or not line.strip())
        last = lines[-1] if lines else None
        if prose and last and last["prose"] and last["to"] == n - 1:
            # A paragraph wrapped over lines (the template's, under the title) is one
            # block, as it reads, not two numbered lines.
            last["text"] += " " + line.strip()
            last["to"] = n
            continue
        lines.append({"n": n, "to": n, "text": line[bullet.end() - 1:] if bullet else line,
                      "level": len(heading.group(1)) if heading else 0,
                      "heading": heading.group(2) if heading else "",
                      "fact": bool(bullet), "prose": prose,
                      "blank": not line.strip()})
    return page.render(request, "memory.html", nav="memory", file=rel, lines=lines,
                       files=memory.MEMORY_FILES,
                       facts=sum(1 for x in lines if x["fact"]))


def story(page, request):
    from agent.ops import why

    rel = request.query_params.get("file") or memory.MEMORY
    try:
        n = int(request.query_params.get("line") or "0")
    except ValueError:
        n = 0
    text = None
    if rel in memory.MEMORY_FILES:
        from agent.fs import safe
        lines = (safe.read_text(page.vault.root, rel) or "").splitlines()
        text = lines[n - 1] if 0 < n <= len(lines) else None
    if text is None or not text.strip():
        return page.render(request, "error.html", 404, title="Story",
                           problem=f"{rel} has no line {n} with text.")
    found = why.Story(text.strip(), why.Candidate(rel, n, text, 1.0),
                      why.walk(page.vault, rel, n, text))
    fragment = request.headers.get("hx-target") == "story"
    return page.render(request, "story_part.html" if fragment else "story.html",
                       nav="memory", file=rel, line=n, text=text, story=why.render(found),
                       steps=found.steps)


def memory_edit(page, request):
    from agent.ops import handedit

    try:
        opened = handedit.open_file(page.vault, request.query_params.get("file") or "")
    except UserError as e:
        return page.render(request, "error.html", 404, title="Edit", problem=str(e))
    return page.render(request, "edit.html", nav="memory", file=opened.rel,
                       text=opened.text, base=opened.base)


def memory_save(page, request):
    from agent.ops import handedit

    form = _form(request)
    rel = form.get("file", "")
    try:
        sha = handedit.save(page.vault, rel, form.get("text", ""), form.get("base", ""))
    except UserError as e:
        if rel not in handedit.FILES:
            return page.render(request, "error.html", 400, title="Edit", problem=str(e))
        return page.render(request, "edit.html", 409, nav="memory", file=rel,
                           text=form.get("text", ""), base=form.get("base", ""),
                           error=str(e))
    if sha:
        from agent.search import index
        index.refresh(page.vault, after_commit=True)
    return _back("/memory", file=rel, msg=f"Committed {sha[:7]} edit: {rel} by hand."
                 if sha else f"{rel} unchanged; nothing committed.")


# ---- Review -----------------------------------------------------------------------------


def _reviewer(vault: Vault) -> str:
    who = vault.identity.user()
    return f"{who.name} <{who.email}>"


def review_page(page, request):
    from agent.ops import review

    review.tidy(page.vault)
    items = review.pending(page.vault)
    edit = request.query_params.get("edit")
    return page.render(request, "review.html", nav="review", items=items, editing=edit)


def review_decide(page, request, decision: str):
    from agent.ops import review

    form = _form(request)
    picks = None if form.get("all") else [form.get("id", "")]
    new_text = form.get("text") if decision == "accept" and "text" in form else None
    if new_text is not None:
        new_text = " ".join(new_text.split())
    try:
        out = review.decide(page.vault, picks, decision, _now(), _reviewer(page.vault),
                            because=form.get("because", "").strip(), new_text=new_text)
    except UserError as e:
        return _back("/review", error=str(e))
    if out.commits:
        from agent.search import index
        index.refresh(page.vault, after_commit=True)
    verb = "Accepted" if decision == "accept" else "Rejected"
    said = [f"{verb} {len(out.done)}." if out.done else "Nothing was decided."]
    said += [f"Committed {sha[:7]} {subject}" for sha, subject in zip(out.commits, out.subjects)]
    said += [f"Not applied {i.number} (stale: {i.stale})." for i in out.stale]
    return _back("/review", msg=" ".join(said))


# ---- Timeline ---------------------------------------------------------------------------


def timeline_page(page, request):
    from agent.ops.undo import undoable
    from agent.vault import history

    q = request.query_params
    kind, path, before = q.get("kind") or "", q.get("file") or "", q.get("before") or None
    try:
        entries, more = history.timeline(page.vault, limit=50, path=path or None,
                                         kinds={kind} if kind else None, before=before)
    except UserError as e:
        return page.render(request, "error.html", 404, title="Timeline", problem=str(e))
    agent_email = page.vault.agent_identity().email
    return page.render(request, "timeline.html", nav="timeline", entries=entries, more=more,
                       kind=kind, path=path, kinds=KINDS,
                       undoable={e.sha for e in entries if undoable(e, agent_email)})


def commit_page(page, request):
    from agent.vault import history

    sha = request.path_params["sha"]
    try:
        text = history.show(page.vault, sha)
    except UserError as e:
        return page.render(request, "error.html", 404, title="Commit", problem=str(e))
    rows = []
    in_diff = False
    for line in text.splitlines():
        if line.startswith("diff --git"):
            in_diff = True
        cls = ""
        if in_diff:
            if line.startswith(("diff --git", "index ", "--- ", "+++ ", "new file", "deleted file")):
                cls = "meta"
            elif line.startswith("@@"):
                cls = "hunk"
            elif line.startswith("+"):
                cls = "add"
            elif line.startswith("-"):
                cls = "del"
        rows.append((cls, line))
    c = history.find(page.vault, sha)
    from agent.ops.undo import undoable
    return page.render(request, "commit.html", nav="timeline", sha=c.sha, subject=c.subject,
                       rows=rows, undo=undoable(c, page.vault.agent_identity().email))


def undo(page, request):
    from agent.ops import undo as undoing

    sha = _form(request).get("sha") or None
    try:
        done = undoing.undo(page.vault, sha)
    except UserError as e:
        return _back("/timeline", error=str(e))
    c = done.commit
    if done.sha is None:
        return _back("/timeline", msg=f"Nothing to undo: {c.short} ({c.subject}) changes "
                                      f"nothing any more.")
    return _back("/timeline", msg=f"Reverted {c.short} ({c.subject}) in {done.sha[:7]}")


# ---- Search -----------------------------------------------------------------------------


def search_page(page, request):
    from agent.ops import search as labels

    q = request.query_params
    text = (q.get("q") or "").strip()
    since, until, kind = q.get("since") or "", q.get("until") or "", q.get("in") or ""
    hits, problem = [], ""
    if text:
        from agent.search import index
        try:
            first = labels.parse_day(page.vault, since or None, "since")
            last = labels.parse_day(page.vault, until or None, "until")
            found = index.search(page.vault, text, 20, since=first, until=last,
                                 kinds={kind} if kind else None)
            problem = index.LAST.get("problem") or ""
        except UserError as e:
            found, problem = [], str(e)
        hits = [{"where": labels.where(h), "when": labels.when(h.ts), "who": labels.who(h),
                 "snippet": _marked(h.snippet), "meaning": h.why == "meaning", "path": h.path,
                 "line": h.line, "kind": h.kind,
                 "context": [{"where": labels.where(c), "who": c.speaker or "",
                              "text": " ".join(c.text.split())[:160]} for c in h.context]}
                for h in found]
    return page.render(request, "search.html", nav="search", q=text, since=since,
                       until=until, kind=kind, hits=hits, problem=problem,
                       kinds=("sessions", "memory", "notes", "archive"))


def _marked(snippet: str) -> list[tuple[str, bool]]:
    """A snippet's pieces, each with whether it is a match (the index marks them [so])."""
    import re

    out, at = [], 0
    for m in re.finditer(r"\[([^\[\]\n]+)\]", snippet):
        out += [(snippet[at:m.start()], False), (m.group(1), True)]
        at = m.end()
    return out + [(snippet[at:], False)]


# ---- the routes -------------------------------------------------------------------------


def routes(page, sync, direct) -> list:
    from starlette.routing import Route

    return [
        Route("/", sync(chat)),
        Route("/chat/send", direct(chat_send), methods=["POST"]),
        Route("/chat/stop", sync(chat_stop), methods=["POST"]),
        Route("/chat/used", sync(chat_used)),
        Route("/memory", sync(memory_page)),
        Route("/memory/story", sync(story)),
        Route("/memory/edit", sync(memory_edit)),
        Route("/memory/edit", sync(memory_save), methods=["POST"]),
        Route("/review", sync(review_page)),
        Route("/review/accept", sync(review_decide, "accept"), methods=["POST"]),
        Route("/review/reject", sync(review_decide, "reject"), methods=["POST"]),
        Route("/timeline", sync(timeline_page)),
        Route("/timeline/{sha:str}", sync(commit_page)),
        Route("/undo", sync(undo), methods=["POST"]),
        Route("/search", sync(search_page)),
    ]


def stamp(t: datetime | None) -> str:
    return t.astimezone().strftime("%Y-%m-%d %H:%M") if t else "-"
