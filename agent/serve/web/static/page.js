// The chat box: a message is sent with fetch and the reply streams in as it is written
// (server-sent events from POST /chat/send); tool calls show as they run; Stop stops
// the turn. Without this script the same form posts and the page reloads when answered.
"use strict";

function csrf() { return document.body.dataset.csrf || ""; }

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;   // text, never HTML
  return e;
}

function bubble(role) {
  const li = el("li", "msg " + role);
  const who = el("div", "who", role === "user" ? "You" : "Agent");
  li.appendChild(who);
  document.getElementById("messages").appendChild(li);
  const empty = document.querySelector("#messages .empty");
  if (empty) empty.remove();
  return li;
}

function scrollDown() { window.scrollTo(0, document.body.scrollHeight); }

async function send(form) {
  const box = form.querySelector("textarea[name=text]");
  const text = box.value;
  if (!text.trim()) return;
  const session = form.querySelector("input[name=session]").value;
  const mine = bubble("user");
  mine.appendChild(el("div", "text", text));
  const reply = bubble("assistant");
  reply.classList.add("streaming");
  let body = el("div", "text");
  reply.appendChild(body);
  box.value = "";
  const stop = document.getElementById("stop-button");
  const sendButton = document.getElementById("send-button");
  stop.hidden = false;
  sendButton.disabled = true;
  scrollDown();
  const tools = {};
  try {
    const r = await fetch("/chat/send", {
      method: "POST", credentials: "same-origin",
      headers: {"Accept": "text/event-stream", "X-CSRF-Token": csrf(),
                "Content-Type": "application/x-www-form-urlencoded"},
      body: new URLSearchParams({session: session, text: text}),
    });
    if (!r.ok) throw new Error(await r.text());
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let kind = null, data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) kind = line.slice(6).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trim();
        }
        if (!kind) continue;
        const d = data ? JSON.parse(data) : {};
        if (kind === "text") {
          // The turn puts a blank line between the texts of two model calls (for a
          // terminal); here a tool call's own line separates them.
          body.textContent += body.textContent ? d.text : d.text.replace(/^\s+/, "");
        } else if (kind === "tool_start") {
          const t = el("div", "tool running");
          t.appendChild(el("span", "tool-name", d.name));
          t.appendChild(document.createTextNode(" "));
          t.appendChild(el("code", "", JSON.stringify(d.input).slice(0, 300)));
          // In the order written, as the saved reply shows it: the text so far, the call.
          body.textContent = body.textContent.replace(/\s+$/, "");
          if (body.textContent) {
            reply.insertBefore(t, body.nextSibling);
            body = el("div", "text");
            reply.insertBefore(body, t.nextSibling);
          } else {
            reply.insertBefore(t, body);
          }
          tools[d.name] = t;
        } else if (kind === "tool_done") {
          const t = tools[d.name];
          if (t) { t.classList.remove("running"); t.classList.add(d.is_error ? "failed" : "done"); }
        } else if (kind === "reply") {
          reply.classList.remove("streaming");
          reply.dataset.commit = d.commit || "";
          if (d.error) reply.appendChild(el("div", "note bad", d.error));
          if (d.interrupted) reply.appendChild(el("div", "note", "interrupted"));
          if (!d.command && d.turn !== null && d.turn !== undefined) {
            usedUnder(reply, session, d.turn);
          }
        }
        scrollDown();
      }
    }
  } catch (e) {
    reply.classList.remove("streaming");
    reply.appendChild(el("div", "note bad", String(e.message || e)));
  } finally {
    stop.hidden = true;
    sendButton.disabled = false;
    box.focus();
  }
}

// "used N memories" under a reply: the record of what memory it was shown (GET
// /chat/used, agent.ops.used), expandable to the list.
function usedList(list, data) {
  list.replaceChildren();
  for (const item of data.items || []) {
    const li = el("li", "used-item " + item.kind);
    li.appendChild(el("span", "used-where", item.where));
    li.appendChild(document.createTextNode(" "));
    li.appendChild(el("span", "used-text", item.text));
    if (item.taught) {
      const t = item.taught;
      li.appendChild(el("div", "used-taught muted", "taught by " + String(t.sha).slice(0, 7) +
        " " + String(t.date || "").slice(0, 10) + " " + t.kind + ": " + t.subject));
    }
    list.appendChild(li);
  }
  for (const p of data.problems || []) list.appendChild(el("li", "used-item muted", p));
}

async function usedFetch(query) {
  const r = await fetch("/chat/used?" + new URLSearchParams(query),
                        {credentials: "same-origin", headers: {"Accept": "application/json"}});
  return r.ok ? r.json() : null;
}

async function usedUnder(reply, session, turn) {
  const data = await usedFetch({session: session, turn: String(turn)});
  if (!data) return;
  const box = el("details", "used");
  box.dataset.reply = data.reply.id;
  box.dataset.session = session;
  box.dataset.loaded = "1";
  const n = data.count;
  box.appendChild(el("summary", "", "used " + n + " memor" + (n === 1 ? "y" : "ies")));
  const id = el("div", "used-id muted", "reply " + data.reply.id + ": ");
  id.appendChild(el("code", "", "agent why --reply " + data.reply.id));
  box.appendChild(id);
  const list = el("ol", "used-list");
  usedList(list, data);
  box.appendChild(list);
  reply.appendChild(box);
}

document.addEventListener("toggle", async (ev) => {
  const box = ev.target;
  if (!(box instanceof HTMLDetailsElement) || !box.classList.contains("used")) return;
  if (!box.open || box.dataset.loaded) return;
  box.dataset.loaded = "1";
  const data = await usedFetch({session: box.dataset.session, reply: box.dataset.reply});
  const list = box.querySelector(".used-list");
  if (data) usedList(list, data);
  else list.replaceChildren(el("li", "used-item muted", "The record could not be read."));
}, true);

document.addEventListener("submit", (ev) => {
  const form = ev.target;
  if (form.id !== "send") return;
  const stopping = ev.submitter && ev.submitter.id === "stop-button";
  ev.preventDefault();
  if (stopping) {
    fetch("/chat/stop", {method: "POST", credentials: "same-origin",
      headers: {"Accept": "application/json", "X-CSRF-Token": csrf(),
                "Content-Type": "application/x-www-form-urlencoded"},
      body: new URLSearchParams({session: form.querySelector("input[name=session]").value})});
    return;
  }
  send(form);
});

document.addEventListener("keydown", (ev) => {
  const t = ev.target;
  if (t.id === "text" && ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    t.form.requestSubmit(document.getElementById("send-button"));
  }
});

// A line of memory picked: marked while its story shows beside it.
document.addEventListener("click", (ev) => {
  const a = ev.target.closest("a.line");
  if (!a) return;
  document.querySelectorAll("a.line.picked").forEach((x) => x.classList.remove("picked"));
  a.classList.add("picked");
});

function scrollChat() { if (document.getElementById("messages")) scrollDown(); }
document.addEventListener("DOMContentLoaded", scrollChat);
document.addEventListener("htmx:afterSettle", scrollChat);
