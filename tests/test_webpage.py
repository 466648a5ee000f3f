"""The web page of `agent serve` (issue 25), driven as a person uses it: a real serve
process with the fake Anthropic server, `agent web` for the login link, and Debian's
headless Chromium through Selenium (chromedriver from the system: Selenium Manager
downloads nothing). One browser is shared by the module.

What is asserted is what a person relies on: what the page shows, the files on disk,
`git log`, the requests the fake model received; and that the page refuses a stranger
(a cross-site POST, a foreign Host, a used login code).

Screenshots of every page, at a laptop's and a phone's width, are saved under
$AGENT_SCREENSHOTS (default: a folder in the system's temp dir, printed)."""

from __future__ import annotations

import http.client
import json
import re
import threading

import pytest

from conftest import agent_proc, subjects
from dreamkit import set_review
from fakeanthropic import reply, tool_use
from helpers import KYOTO, LISBON, USER, read, script, seed
from helpers import after, transcript  # noqa: F401
from helpers import SIZES, Page, css, enable_gateway, shoot, wait


def fits_a_phone(driver, words: str | None = None) -> None:
    """At a phone's width nothing is wider than the screen, and the text of `words` (a CSS
    selector) is laid out in lines of more than one word, not a column of broken words."""
    driver.set_window_size(*SIZES["phone"])
    try:
        wide = driver.execute_script(
            "const w = document.documentElement.clientWidth;"
            "return [...document.querySelectorAll('main *')]"
            ".filter(e => e.getBoundingClientRect().right > w + 1)"
            ".map(e => e.tagName + '.' + e.className);")
        assert wide == [], wide
        if words:
            widths = driver.execute_script(
                "return [...document.querySelectorAll(arguments[0])]"
                ".map(e => e.getBoundingClientRect().width);", words)
            assert widths and min(widths) > SIZES["phone"][0] / 2, widths
    finally:
        driver.set_window_size(*SIZES["laptop"])


def parts_of(driver, bubble) -> list[list[str]]:
    """A reply bubble's texts (as laid out: its textContent) and tool calls, in order."""
    return driver.execute_script(
        "return [...arguments[0].children].filter(c => c.matches('.text, .tool') &&"
        " c.textContent.trim()).map(c => c.matches('.tool') ?"
        " ['tool', c.querySelector('.tool-name').textContent] : ['text', c.textContent]);",
        bubble)


@pytest.fixture
def page(vault, browser, procs, fake_anthropic):
    p = Page(vault, browser, procs)
    p.login()
    yield p
    p.serve.stop()


def raw(page, method, path, *, body=b"", headers=None):
    """(status, headers, text) of one request to serve's port, as any program sends it."""
    conn = http.client.HTTPConnection("127.0.0.1", page.port, timeout=30)
    h = {"Host": f"127.0.0.1:{page.port}"}
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    out = r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read().decode()
    conn.close()
    return out


# ---- chat -------------------------------------------------------------------------------


def test_chat_streams_the_reply_shows_tool_calls_and_keeps_script_as_text(page, fake_anthropic):
    d = page.driver
    shoot(d, "chat-empty")
    cue = threading.Event()
    fake_anthropic.add(reply("Let me look.", tool_use("memory_search", {"query": "kyoto"})),
                       after(cue, reply("Nothing about Kyoto yet, ", "but I can plan it.",
                                        chunk_delay=0.05, chunk_size=6)))
    box = css(d, "#text")[0]
    box.send_keys("<script>document.title='pwned'</script> plan Kyoto")
    css(d, "#send-button")[0].click()
    # The tool call shows while the turn runs, and Stop is offered.
    wait(d, lambda d: css(d, ".msg.assistant .tool .tool-name"))
    assert css(d, ".msg.assistant .tool .tool-name")[0].text == "memory_search"
    assert css(d, "#stop-button")[0].is_displayed()
    cue.set()
    wait(d, lambda d: css(d, ".msg.assistant:not(.streaming)"))
    bubble = css(d, ".msg.assistant")[-1]
    assert "Let me look." in bubble.text and "Nothing about Kyoto yet, but I can plan it." in bubble.text
    assert bubble.get_attribute("data-commit") == page.vault.head()
    # Streamed, it reads as the saved reply reads: the text, the call, the text, no blank
    # lines around the call (the turn's separator for a terminal).
    streamed = parts_of(d, bubble)
    assert streamed == [["text", "Let me look."], ["tool", "memory_search"],
                        ["text", "Nothing about Kyoto yet, but I can plan it."]], streamed
    # What the person typed is text, never markup: the script did not run.
    mine = css(d, ".msg.user")[-1]
    assert "<script>document.title='pwned'</script> plan Kyoto" in mine.text
    assert d.title != "pwned"
    # Saved as a turn of the page's session, through the router, like any channel.
    assert subjects(page.vault)[0].startswith("chat(web/default): <script>")
    lines = transcript(page.vault, "web/default")
    assert lines[0]["content"].startswith("<script>") and lines[0]["source"] == "web"
    assert "plan Kyoto" in json.dumps(fake_anthropic.calls()[0].body["messages"])
    # Rendered by the server too, after a reload: still text.
    page.open("/")
    texts = [e.text for e in css(d, ".msg.user .text")]
    assert "<script>document.title='pwned'</script> plan Kyoto" in texts
    assert d.title != "pwned" and not css(d, ".msg script")
    saved = d.execute_script("return [...document.querySelectorAll('.msg.user ~ .msg.assistant')]")
    assert [p for b in saved for p in parts_of(d, b)] == streamed
    shoot(d, "chat")


# ---- review, memory and its stories, the timeline ----------------------------------------


def test_review_accept_and_reject_then_a_facts_story_and_the_timeline(vault, browser, procs,
                                                                      run, fake_anthropic):
    seed(vault)
    set_review(vault, "all")
    script(fake_anthropic)
    assert run("dream", "--sync").exit_code == 0
    page = Page(vault, browser, procs)
    page.login()
    d = page.driver
    page.open("/review")
    ops = [e.get_attribute("data-op") for e in css(d, "[data-op]")]
    assert ops == ["1..2#1", "1..2#2"]
    shoot(d, "review")
    fits_a_phone(d)
    # Accept the trip, reject the move with a reason.
    css(d, '[data-op="1..2#1"] button.accept')[0].click()
    wait(d, lambda d: [e.get_attribute("data-op") for e in css(d, "[data-op]")] == ["1..2#2"])
    assert "Accepted 1." in css(d, ".flash.ok")[0].text
    css(d, '[data-op="1..2#2"] input[name=because]')[0].send_keys("I still live in Berlin")
    css(d, '[data-op="1..2#2"] button.reject')[0].click()
    wait(d, lambda d: not css(d, "[data-op]"))
    assert KYOTO in read(vault, "MEMORY.md")
    assert read(vault, "USER.md") == USER and LISBON not in read(vault, "USER.md")
    assert subjects(vault)[:2] == ["review: reject 1 of 2 from dream 1..2",
                                   "review: accept 1 of 2 from dream 1..2"]
    assert "because: I still live in Berlin" in vault.git("log", "-1", "--format=%B")
    assert vault.dirty_paths() == []
    # The accepted fact's story, as agent why tells it.
    page.open("/memory")
    n = read(vault, "MEMORY.md").splitlines().index(KYOTO) + 1
    css(d, f'a.line[data-line="{n}"]')[0].click()
    wait(d, lambda d: css(d, "#story .story"))
    story = css(d, "#story")[0].text
    assert "review" in story and vault.git("log", "-1", "--format=%h", "--", "MEMORY.md").strip() in story
    why = agent_proc("why", KYOTO[2:], vault=vault.root, timeout=60).stdout
    assert css(d, "#story pre.why")[0].get_attribute("textContent").strip() == why.strip()
    shoot(d, "memory")
    # The timeline, filtered to reviews: each entry one, newest first, with its diff.
    page.open("/timeline")
    shoot(d, "timeline")
    fits_a_phone(d, ".commit .c-main")
    from selenium.webdriver.support.ui import Select
    Select(css(d, "select[name=kind]")[0]).select_by_value("review")
    css(d, ".filters button")[0].click()
    wait(d, lambda d: "kind=review" in d.current_url)
    entries = css(d, "[data-commit]")
    shas = vault.git("log", "--format=%H", "--grep=^review:").split()
    assert [e.get_attribute("data-commit") for e in entries] == shas
    entries[-1].find_element("css selector", "a").click()
    wait(d, lambda d: css(d, "pre.diff .add"))
    assert KYOTO in " ".join(e.text for e in css(d, "pre.diff .add"))
    shoot(d, "commit")
    # Undo on the newest agent commit, as `agent undo SHA` does it.
    page.open("/timeline")
    newest = css(d, "[data-commit]")[0]
    assert newest.get_attribute("data-commit") == vault.head()
    newest.find_element("css selector", "form.undo button").click()
    wait(d, lambda d: css(d, ".flash.ok"))
    assert subjects(vault)[0] == 'undo: revert "review: reject 1 of 2 from dream 1..2"'
    assert css(d, ".flash.ok")[0].text.startswith("Reverted ")
    # Search: agent search's results and labels, the matches marked.
    page.open("/search?q=Kyoto")
    cli = agent_proc("search", "-n", "20", "Kyoto", vault=vault.root, timeout=60).stdout
    heads = [line.split("  ")[0] for line in cli.splitlines() if not line.startswith(" ")]
    assert [e.text for e in css(d, ".hit .hit-head code")] == heads
    assert "Kyoto" in [e.text for e in css(d, ".hit mark")]
    shoot(d, "search")
    page.serve.stop()


def test_memory_edited_by_hand_is_committed_as_the_persons_and_a_broken_edit_refused(
        page, fake_anthropic):
    d, vault = page.driver, page.vault
    page.open("/memory/edit?file=MEMORY.md")
    shoot(d, "edit")
    before = read(vault, "MEMORY.md")
    head = vault.head()
    area = css(d, "#memtext")[0]
    area.send_keys("\n<<<<<<< HEAD\n")
    css(d, ".editor button")[0].click()
    wait(d, lambda d: css(d, ".flash.bad"))
    assert "merge conflict marker" in css(d, ".flash.bad")[0].text
    assert read(vault, "MEMORY.md") == before and vault.head() == head
    page.open("/memory/edit?file=MEMORY.md")
    css(d, "#memtext")[0].send_keys("- Keeps bees on the roof\n")
    css(d, ".editor button")[0].click()
    wait(d, lambda d: css(d, ".flash.ok"))
    assert read(vault, "MEMORY.md") == before + "- Keeps bees on the roof\n"
    assert subjects(vault)[0] == "edit: MEMORY.md by hand"
    assert vault.git("log", "-1", "--format=%an").strip() == "Test User"


# ---- the door ---------------------------------------------------------------------------


def test_a_stranger_is_refused_cross_site_posts_foreign_hosts_used_codes(page, run,
                                                                        fake_anthropic):
    vault = page.vault
    head = vault.head()
    status, headers, _ = raw(page, "GET", "/")
    assert status == 401                              # no cookie: the page says agent web
    cookie = page.cookie()
    status, headers, text = raw(page, "GET", "/", headers={"Cookie": cookie})
    assert status == 200 and "script-src 'self'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]
    # A cross-site form post: the browser sends the cookie only to its own site
    # (SameSite=Strict), and without the CSRF token nothing happens even with it.
    form = "session=web%2Fdefault&text=READFILE+MEMORY.md"
    for h in ({"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"},
              {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded",
               "Origin": "http://evil.example"},
              {"Content-Type": "application/x-www-form-urlencoded"}):
        status, _, text = raw(page, "POST", "/chat/send", body=form.encode(), headers=h)
        assert status == 403, text
    csrf = css(page.driver, "body")[0].get_attribute("data-csrf")
    status, _, _ = raw(page, "POST", "/review/accept", headers={
        "Cookie": cookie, "Origin": "http://evil.example", "X-CSRF-Token": csrf,
        "Content-Type": "application/x-www-form-urlencoded"}, body=b"all=1")
    assert status == 403
    assert fake_anthropic.calls() == [] and vault.head() == head
    assert not (vault.root / "sessions" / "web").exists()
    # DNS rebinding: a name that points at 127.0.0.1 is not this page's.
    for host in ("evil.example", f"evil.example:{page.port}", f"127.0.0.1.nip.io:{page.port}"):
        status, _, _ = raw(page, "GET", "/", headers={"Host": host, "Cookie": cookie})
        assert status == 421, host
    # The session cookie: HttpOnly, SameSite=Strict; a login code works once.
    url = page.login_url()
    path = url[len(page.origin):]
    status, headers, _ = raw(page, "GET", path)
    assert status == 303 and headers["location"] == "/"
    assert re.search(r"HttpOnly", headers["set-cookie"], re.I)
    assert re.search(r"SameSite=strict", headers["set-cookie"], re.I)
    status, headers, text = raw(page, "GET", path)
    assert status == 403 and "set-cookie" not in headers and "used already" in text
    # The API keeps its bearer token: the cookie is no key to it.
    status, _, _ = raw(page, "POST", "/v1/sessions/web/default/messages",
                       body=b'{"text": "hi"}', headers={"Cookie": cookie})
    assert status == 401
    assert fake_anthropic.calls() == [] and vault.head() == head


def test_answers_reach_a_client_that_sends_its_body_after_its_headers(vault, gateway):
    """urllib (agent web, agent chat) writes the headers, then the body: an answer that
    needs no body must not close the connection before the body is written."""
    from agent.serve.remote import Remote

    remote = Remote.find(vault)
    for _ in range(40):
        assert remote.stop("gateway/x") is False
        assert remote.web_login().startswith(gateway.url + "/login?code=")


def test_a_login_code_expires_after_five_minutes_and_works_once():
    from agent.serve.web.auth import CODE_TTL, Logins

    now = [1000.0]
    logins = Logins(clock=lambda: now[0])
    late, soon = logins.new_code(), None
    now[0] += CODE_TTL + 1
    soon = logins.new_code()
    assert logins.redeem(late) is None
    login = logins.redeem(soon)
    assert login is not None and logins.find(login.sid) is login
    assert logins.redeem(soon) is None and logins.redeem("guessed") is None


def test_agent_web_without_a_serve_says_how_to_start_one(vault):
    # No [gateway] port: the page has nowhere to be served; it says how to set one.
    p = agent_proc("web", vault=vault.root, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "agent config set gateway.port" in p.stderr and "agent serve" in p.stderr
    # A port, but no serve running: it says to start one.
    enable_gateway(vault)
    p = agent_proc("web", vault=vault.root, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "No agent serve is running" in p.stderr and "agent serve" in p.stderr


def test_agent_web_while_serve_is_starting_waits_for_its_page(vault, fake_anthropic):
    """A serve holds its lock from its first moment and brings the gateway up a second or
    two later: `agent web` meanwhile says it is starting and waits, instead of saying none
    runs. Here the test process is that serve: the real lock, then the real gateway."""
    import os
    import subprocess
    import sys

    from agent.serve.gateway import Gateway
    from agent.serve.lock import ServeLock
    from helpers import router

    enable_gateway(vault)
    cmd = [sys.executable, "-m", "agent", "--vault", str(vault.root), "web", "--no-open"]
    lock = ServeLock(vault).acquire()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
        assert p.stderr.readline().strip() == (f"agent serve (pid {os.getpid()}) is starting; "
                                               f"waiting for its web page...")
        conv = router(vault)
        gw = Gateway(vault, conv, port=0).start()
        try:
            out, err = p.communicate(timeout=60)
        finally:
            gw.close(5)
            conv.drain(10)
        assert p.returncode == 0, err
        assert re.search(r"http://\S+/login\?code=\S+", out) and "No agent serve" not in err
        # A serve that stops before its page is up: said, with where to look.
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
        assert "is starting" in p.stderr.readline()
    finally:
        lock.release()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1 and "Traceback" not in err
    assert f"agent serve (pid {os.getpid()}) stopped before its web page was up: see " in err
    assert "serve.log" in err


# ---- every page at a phone's width ------------------------------------------------------


UUID = "5f3c2a9e-8b1d-4e7a-9c6f-2d8e1b4a7c30"


def test_every_page_fits_a_phone_with_long_names_and_the_template_reads_as_a_paragraph(
        vault, browser, procs, run, fake_anthropic, tmp_path):
    """At 390 px no page is wider than the screen (document.documentElement.scrollWidth
    against its client width), with what makes pages wide: an imported conversation's
    key (`import/claude-<uuid>`) in the chat's picker, a dream run's 37-character id on
    review cards. MEMORY.md's template paragraph, wrapped over two lines of the file, is
    one block on the Memory page."""
    from dreamkit import finding, op, write_entries
    from fakeanthropic import json_reply

    claude = [{"uuid": UUID, "name": "Marathon training", "summary": "",
               "created_at": "2024-03-01T09:00:00Z", "updated_at": "2024-03-01T09:05:00Z",
               "chat_messages": [{"uuid": "m1", "sender": "human", "text": "I run.",
                                  "created_at": "2024-03-01T09:00:00Z", "content": [],
                                  "attachments": [], "files": []}]}]
    (tmp_path / "conversations.json").write_text(json.dumps(claude))
    assert run("import", "--format", "claude", str(tmp_path / "conversations.json")).exit_code == 0
    first = 202611230931024417                     # ids as archive entries are stamped today
    write_entries(vault, ["Planned the Kyoto trip; flights booked for 3 December."],
                  start=first)
    set_review(vault, "all")
    fake_anthropic.add(json_reply({"findings": [finding("Flying to Kyoto on 2026-12-03",
                                                        evidence=[f"archive:{first}"])]}),
                       json_reply({"ops": [op("add", section="Travel", new=KYOTO,
                                              reason=f"archive:{first}: flights booked")]}))
    assert run("dream", "--sync").exit_code == 0
    page = Page(vault, browser, procs)
    page.login()
    d = page.driver
    page.open("/memory")
    ln = css(d, 'a.line[data-line="3"] .ln')[0].text
    said = css(d, 'a.line[data-line="3"] .lt')[0].text
    assert (ln, said) == ("3–4", "Long-term facts, one per bullet, under headings. The agent "
                                 "adds to this file when it dreams; you can edit it by hand "
                                 "at any time.")
    assert not css(d, 'a.line[data-line="4"]')
    pages = ["/", f"/?session=import/claude-{UUID}", "/memory", "/memory?file=USER.md",
             "/memory/edit", "/memory/story?file=MEMORY.md&line=3", "/review", "/timeline",
             f"/timeline/{vault.head()}", "/search?q=Kyoto", "/health", "/schedules",
             "/settings", "/timeline/0000000"]
    d.set_window_size(*SIZES["phone"])
    try:
        wide = {}
        for path in pages:
            page.open(path)
            w = d.execute_script("return [document.documentElement.scrollWidth,"
                                 " document.documentElement.clientWidth]")
            if w[0] > w[1]:
                wide[path] = w
        assert wide == {}, wide
        page.open(f"/?session=import/claude-{UUID}")
        opened = css(d, ".pick button")[0].rect
        assert opened["x"] + opened["width"] <= SIZES["phone"][0]     # Open is on screen
    finally:
        d.set_window_size(*SIZES["laptop"])
    page.serve.stop()


# ---- schedules and settings -------------------------------------------------------------


def test_schedules_disable_a_job_and_settings_show_config_check_and_doctor(page, run):
    d, vault = page.driver, page.vault
    assert run("cron", "add", "ping", "-m", "say pong", "--every", "1h").exit_code == 0
    job = json.loads((vault.root / "cron.json").read_text())["jobs"][0]
    page.open("/schedules")
    row = css(d, f'[data-job="{job["id"]}"]')[0]
    assert "ping" in row.text and "every 1h" in row.text
    shoot(d, "schedules")
    row.find_element("css selector", "button.quiet").click()       # Disable
    wait(d, lambda d: css(d, ".flash.ok"))
    assert css(d, ".flash.ok")[0].text.startswith('Disabled "ping"')
    assert json.loads((vault.root / "cron.json").read_text())["jobs"][0]["enabled"] is False
    assert subjects(vault)[0].startswith("cron")
    # Settings: agent.toml as it is, config check's verdict, doctor's checks (htmx).
    page.open("/settings")
    wait(d, lambda d: css(d, "#doctor .checks li"))
    assert "agent config check: ok" in css(d, "main")[0].text
    names = [e.text for e in css(d, "#doctor .checks strong")]
    assert "git" in names and "held" in names
    assert "[gateway]" in css(d, "pre.file")[0].text
    shoot(d, "settings")


def test_the_chat_box_runs_the_slash_commands_the_terminal_and_telegram_run(page, fake_anthropic):
    """One table of slash commands (agent.ops.commands) serves the page too: /help lists
    the page's commands, /memory shows the files, /undo reverts the last turn; none of
    them reaches the model."""
    from agent.ops import commands

    fake_anthropic.add(reply("Noted."))
    d = page.driver
    page.open("/")

    def send(text):
        box = css(d, "#text")[0]
        box.clear()
        box.send_keys(text)
        n = len(css(d, ".msg.assistant:not(.streaming)"))
        css(d, "#send-button")[0].click()
        wait(d, lambda d: len(css(d, ".msg.assistant:not(.streaming)")) > n)
        return css(d, ".msg.assistant")[-1].text

    send("remember that I like green tea")
    turn = page.vault.head()
    assert subjects(page.vault)[0].startswith("chat(web/default): remember")
    shown = send("/help")
    for c in commands.offered("web"):
        if c.name != "/start":
            assert c.name in shown
    assert "/quit" not in shown and "/start" not in shown
    assert "--- MEMORY.md" in send("/memory")
    said = send("/undo")
    assert "Undid" in said and turn[:7] in said
    assert subjects(page.vault)[0].startswith("undo:")
    assert "Unknown command /fly" in send("/fly")
    assert len(fake_anthropic.calls()) == 1          # no slash command reached the model


def test_a_reply_shows_the_memories_it_used_and_expands_to_them(page, run, fake_anthropic):
    """Under a reply: "used N memories" (issue 35), expandable to the lines it was shown,
    each with the commit that taught it; after a reload too, from the same operation
    `agent why --reply` calls."""
    path = page.vault.root / "USER.md"
    path.write_text(path.read_text() + "- Alice lives in Lisbon\n")
    run("note", "planted")                           # the hand edit, committed first
    fake_anthropic.add(reply("You live in Lisbon."))
    d = page.driver
    page.open("/")
    css(d, "#text")[0].send_keys("where do I live?")
    css(d, "#send-button")[0].click()
    wait(d, lambda d: css(d, ".msg.assistant details.used summary"))
    summary = css(d, ".msg.assistant details.used summary")[-1]
    said = json.loads(run("why", "--last", "--json").output)
    assert said["reply"]["session"] == "web/default"
    assert summary.text == f"used {said['count']} memories" and said["count"] >= 1

    def expanded():
        summary = css(d, ".msg.assistant details.used summary")[-1]
        summary.click()
        wait(d, lambda d: any("- Alice lives in Lisbon" in e.text
                              for e in css(d, "details.used[open] .used-item")))
        return [e.text for e in css(d, "details.used[open] .used-item")]
    items = expanded()
    shown_id = css(d, "details.used[open] .used-id")[-1].text
    assert shown_id == f"reply {said['reply']['id']}: agent why --reply {said['reply']['id']}"
    row = next(t for t in items if "- Alice lives in Lisbon" in t)
    assert row.startswith("USER.md:") and "taught by" in row and "hand edit" in row
    assert len(items) == len(said["items"])
    # Rendered by the server after a reload: the same count, the list fetched on opening.
    page.open("/")
    box = css(d, ".msg.assistant details.used")[-1]
    assert box.get_attribute("data-reply") == said["reply"]["id"]
    assert box.find_element("css selector", "summary").text == f"used {said['count']} memories"
    assert expanded() == items
    assert css(d, "details.used[open] .used-id")[-1].text == shown_id
    fits_a_phone(d)
    shoot(d, "chat-used")
    # The page's JSON is the operation's.
    status, _, body = raw(page, "GET", f"/chat/used?session=web/default&reply={said['reply']['id']}",
                          headers={"Cookie": page.cookie()})
    assert status == 200 and json.loads(body)["items"] == said["items"]
