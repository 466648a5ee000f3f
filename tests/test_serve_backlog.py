"""Serve archives an import in the background without a person ever waiting for it
(issue 46): a turn through serve answers and commits while the model summarises a chunk
of the imported history, and no chunk starts while a person's turn runs. Judged by the
requests the fake Anthropic server received and `git log`; the model's answers are held
open by events the test sets, never by sleeps."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone

import pytest
from fakeanthropic import json_reply, reply

from agent.clock import now as vault_now
from conftest import subjects
from helpers import after, server_at

SUMMARY = {"topic": "Old talk", "summary": "They talked about the garden.", "importance": 0.3}


@pytest.fixture
def imported(vault, run, tmp_path, monkeypatch):
    """The vault with 2,000 messages imported into cli/default: far more than a window,
    so most of them wait to be archived."""
    monkeypatch.setenv("AGENT_EMBED", "off")        # the archiving is the point, not vectors
    t0 = datetime(2020, 1, 1, tzinfo=timezone.utc)
    path = tmp_path / "history.jsonl"
    with open(path, "w") as f:
        for i in range(2000):
            f.write(json.dumps({
                "session": "cli/default", "id": f"h{i}", "role": "user" if i % 2 == 0 else "assistant",
                "content": f"message {i}: the garden, the tomatoes and the roses we planted {i % 97}.",
                "ts": (t0 + timedelta(hours=i)).isoformat()}) + "\n")
    r = run("import", str(path))
    assert r.exit_code == 0 and "Imported 2000 messages" in r.output
    return vault


def summaries(server) -> list:
    return [c for c in server.calls() if "output_config" in c.body]


def test_a_turn_answers_and_commits_while_serve_summarises_imported_history(
        imported, fake_anthropic):
    vault = imported
    release = threading.Event()

    def model(body):
        if "output_config" in body:             # an archive summary: held open by the test
            assert release.wait(240), "the test never released the summary"
            return json_reply(SUMMARY)
        return reply("You planted tomatoes.")
    fake_anthropic.default_reply = model
    now = vault_now()
    server, _ = server_at(vault, now)
    step = threading.Thread(target=server.step, args=(now,), daemon=True)
    try:
        step.start()
        fake_anthropic.wait_for_requests(1)     # serve's summary request is open
        assert len(summaries(fake_anthropic)) == 1

        ticket = server.conversations.submit("cli/default", "what did we plant?")
        result = ticket.wait(120)
        assert result is not None and result.sha, ticket.error
        assert result.reply == "You planted tomatoes."
        # Answered and committed while the summary is still open: the turn waited for
        # neither the session nor the vault lock, and archived nothing itself.
        assert not release.is_set() and step.is_alive()
        assert subjects(vault)[0] == "chat(cli/default): what did we plant?"
        assert len(summaries(fake_anthropic)) == 1
        assert not list((vault.root / "archive").rglob("*.md"))
    finally:
        release.set()
    step.join(240)
    assert not step.is_alive()
    # Then serve's chunk lands after the turn, and nothing of the turn is lost.
    log = subjects(vault)
    assert log[0].startswith("archive(cli/default):")
    assert "chat(cli/default): what did we plant?" in log[1:]
    assert list((vault.root / "archive").rglob("*.md"))
    text = "".join(p.read_text() for p in sorted((vault.root / "sessions/cli/default").glob("*.jsonl")))
    assert "what did we plant?" in text and "You planted tomatoes." in text


def test_no_chunk_of_imported_history_starts_while_a_persons_turn_runs(imported, fake_anthropic):
    vault = imported
    cue = threading.Event()
    fake_anthropic.add(after(cue, reply("You planted tomatoes."), timeout=300))
    fake_anthropic.default_reply = json_reply(SUMMARY)
    now = vault_now()
    server, _ = server_at(vault, now)
    try:
        ticket = server.conversations.submit("cli/default", "what did we plant?")
        fake_anthropic.wait_for_requests(1)     # the turn's model call is open
        done = threading.Event()
        step = threading.Thread(target=lambda: (server.step(now), done.set()), daemon=True)
        step.start()
        # The scheduler's pass leaves the backlog for after the turn, without waiting.
        assert done.wait(120), "serve's pass waited for the person's turn"
        assert summaries(fake_anthropic) == []
    finally:
        cue.set()
    result = ticket.wait(120)
    assert result is not None and result.sha
    # The turn left the imported history to serve: its own requests hold no summary.
    assert summaries(fake_anthropic) == []
    server.step(now + timedelta(seconds=10))
    assert len(summaries(fake_anthropic)) >= 1
    assert subjects(vault)[0].startswith("archive(cli/default):")


def _embed_installed() -> bool:
    from agent.search import embed
    return embed.installed() and embed.wanted() != "off"


@pytest.mark.skipif(not _embed_installed(), reason="the embed extra is not installed")
def test_a_turn_through_serve_leaves_the_imports_vectors_to_the_background(
        vault, run, tmp_path, fake_anthropic):
    from agent.search import index

    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps({
        "session": "cli/default", "id": f"h{i}", "role": "user" if i % 2 == 0 else "assistant",
        "content": f"note {i} about the garden shed and its {['roof', 'door'][i % 2]}",
        "ts": f"2020-01-01T{i // 60 % 24:02d}:{i % 60:02d}:00+00:00"}) + "\n" for i in range(300)))
    # --no-embed: the vectors are left to serve, as the import then says.
    assert run("import", "--no-embed", str(path)).exit_code == 0
    cue = threading.Event()
    fake_anthropic.add(after(cue, reply("The roof."), timeout=300))
    fake_anthropic.default_reply = reply("ok")
    now = vault_now()
    server, _ = server_at(vault, now)
    try:
        ticket = server.conversations.submit("cli/default", "what about the shed roof?")
        fake_anthropic.wait_for_requests(1)     # the turn searched memory, and now waits
        documents = sum(index.status(vault).documents.values())
        waiting = index.vectors_waiting(vault)
        server.step(now)                        # serve's pass while the person's turn runs
        # The turn's search queued every document for serve and made no vector itself,
        # nor did serve's pass while the person's turn ran.
        assert waiting == documents >= 300
        assert index.vectors_waiting(vault) == waiting
    finally:
        cue.set()
    result = ticket.wait(120)
    assert result is not None and result.sha
    matrix = index.db_path(vault).parent / "index.sqlite-vectors"
    assert not matrix.exists()
    # Once nobody is talking, serve makes them, and writes the matrix file a search maps
    # (so that a person's next search need not).
    server.step(now + timedelta(minutes=2))
    assert index.vectors_waiting(vault) < waiting
    assert matrix.exists()


@pytest.mark.skipif(not _embed_installed(), reason="the embed extra is not installed")
def test_the_index_stays_writable_while_the_embedding_model_runs(vault, run, tmp_path,
                                                                 monkeypatch):
    # While serve's background embeds a batch (a second or more of the model), a turn's
    # search and save must still get the index's write lock.
    import sqlite3

    from agent.search import embed, index

    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps({
        "session": "cli/default", "id": f"h{i}", "role": "user",
        "content": f"note {i} about the garden shed", "ts": "2020-01-01T10:00:00+00:00"}) + "\n"
        for i in range(100)))
    assert run("import", "--no-embed", str(path)).exit_code == 0
    model = embed.load()
    real = model._model
    inside, release = threading.Event(), threading.Event()

    class Held:
        """The real engine, held open by the test once a batch reaches it."""
        def passage(self, texts):
            inside.set()
            assert release.wait(240), "the test never let the model go on"
            return real.passage(texts)

        def __getattr__(self, name):
            return getattr(real, name)

    monkeypatch.setattr(model, "_model", Held())
    done = threading.Event()
    worker = threading.Thread(target=lambda: (index.vectors_now(vault, limit=64), done.set()),
                              daemon=True)
    worker.start()
    try:
        assert inside.wait(240)
        db = sqlite3.connect(index.db_path(vault), timeout=2, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")       # 'database is locked' if the batch held it
            db.execute("ROLLBACK")
        finally:
            db.close()
    finally:
        release.set()
    assert done.wait(240)
    assert index.vectors_waiting(vault) < sum(index.status(vault).documents.values())


@pytest.mark.skipif(not _embed_installed(), reason="the embed extra is not installed")
def test_a_query_waits_for_a_few_documents_of_a_background_batch_not_the_whole(monkeypatch):
    from agent.search import embed

    model = embed.load()
    real = model._model
    calls: list[tuple[str, int]] = []
    inside, release = threading.Event(), threading.Event()

    class Held:
        """The real engine, recording its calls; the first is held open by the test."""
        def passage(self, texts):
            calls.append(("passage", len(texts)))
            if len(calls) == 1:
                inside.set()
                assert release.wait(240), "the test never let the model go on"
            return real.passage(texts)

        def query(self, text):
            calls.append(("query", 1))
            return real.query(text)

        def __getattr__(self, name):
            return getattr(real, name)

    monkeypatch.setattr(model, "_model", Held())
    batch = threading.Thread(target=model.passages,
                             args=([f"document {i} about the garden shed" for i in range(64)],),
                             daemon=True)
    batch.start()
    assert inside.wait(240)
    asked = threading.Thread(target=model.queries, args=(["the shed roof"],), daemon=True)
    asked.start()
    # The query is waiting for the engine: let the held call finish.
    while not getattr(model, "_asking", 1):      # (a count of queries waiting)
        threading.Event().wait(0.01)
    release.set()
    asked.join(240)
    batch.join(240)
    first = calls.index(("query", 1))
    assert sum(n for what, n in calls[:first]) <= 8, calls       # a few, not 64
    assert sum(n for what, n in calls if what == "passage") == 64
