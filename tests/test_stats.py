"""`agent stats` (issue 35, item 4): memory health per day and in total, summed from the
commits' trailers of a known history, priced by the table agent.toml may override."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import agent_proc

DAY1, DAY2 = "2035-03-01", "2035-03-02"
NOW = "2035-03-03T10:00:00+00:00"
SONNET = "claude-sonnet-5-5"


def commit(vault, when: str, message: str, files: dict[str, str] | None = None) -> None:
    """A commit as the agent makes them, at noon UTC of day `when`, changing `files`."""
    for rel, text in (files or {}).items():
        (vault.root / rel).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=vault.root, check=True)
    at = f"{when}T12:00:00+00:00"
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", message], cwd=vault.root,
                   check=True, env={**__import__("os").environ, "GIT_AUTHOR_DATE": at,
                                    "GIT_COMMITTER_DATE": at})


def plant(vault) -> None:
    """Two days of history: chat turns, a compaction, a dream with proposals, reviews."""
    user = (vault.root / "USER.md").read_text()
    memory = (vault.root / "MEMORY.md").read_text()
    commit(vault, DAY1, f"chat(cli/default): hello\n\nSession: cli/default\nTurn: 1\n"
                        f"Model: {SONNET}\nTokens: 1000 in, 200 out, 5000 cache read, 300 cache write",
           {"USER.md": user + "- Likes green tea\n"})
    commit(vault, DAY1, "archive(cli/default): the tea talk\n\nSession: cli/default\nArchive: 1\n"
                        "Model: claude-haiku-4-5\nTokens: 400 in, 100 out, 0 cache read, 0 cache write")
    commit(vault, DAY2, "dream: +2 facts, 1 updated, 0 removed, 3 proposed (archive 1..1)\n\n"
                        "Run: 1..1\nCursor: 0 -> 1\nBatch: msgbatch_01\n"
                        f"Model: {SONNET}\nTokens: analyst: 2000 in, 500 out, 0 cache read, "
                        "1000 cache write; editor: 1500 in, 300 out, 1000 cache read, 0 cache write\n"
                        "Dropped-duplicates: 2",
           {"MEMORY.md": memory + "- Kyoto trip in April\n- Flies from Lisbon\n"})
    commit(vault, DAY2, "review: accept 2 of 3 from dream 1..1\n\nRun: 1..1\nAccepted: 1, 3\n"
                        "Reviewer: Test User <test@example.com>")
    commit(vault, DAY2, "review: reject 1 of 3 from dream 1..1\n\nRun: 1..1\nRejected: 2\n"
                        "Reviewer: Test User <test@example.com>")


def stats_json(run, *args) -> dict:
    r = run("stats", "--json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.fixture
def planted(vault, monkeypatch):
    monkeypatch.setenv("AGENT_NOW", NOW)
    plant(vault)
    return vault


# What the history costs at the shipped prices (USD per million tokens): sonnet 3 in,
# 15 out, 0.3 cache read, 3.75 cache write; haiku 1 in, 5 out; the dream's batch at half.
CHAT = (1000 * 3 + 200 * 15 + 5000 * 0.3 + 300 * 3.75) / 1e6
COMPACTION = (400 * 1 + 100 * 5) / 1e6
DREAM = (3500 * 3 + 800 * 15 + 1000 * 0.3 + 1000 * 3.75) / 1e6 / 2


def test_stats_sums_the_trailers_of_a_known_history_exactly(planted, run):
    out = stats_json(run, "--since", DAY1)
    assert out["since"] == DAY1
    d1, d2 = out["days"]
    assert (d1["day"], d2["day"]) == (DAY1, DAY2)
    assert (d1["facts"], d2["facts"]) == (1, 3)
    assert d1["tokens"]["chat"] | {"cost": None, "cost_known": None} == {
        "input": 1000, "output": 200, "cache_read": 5000, "cache_write": 300,
        "cost": None, "cost_known": None, "unknown_models": []}
    assert d1["tokens"]["chat"]["cost"] == pytest.approx(CHAT)
    assert d1["tokens"]["compaction"]["input"] == 400
    assert d1["tokens"]["compaction"]["cost"] == pytest.approx(COMPACTION)
    dream = d2["tokens"]["dream"]
    assert (dream["input"], dream["output"], dream["cache_read"], dream["cache_write"]) == \
        (3500, 800, 1000, 1000)
    assert dream["cost"] == pytest.approx(DREAM)
    assert d2["proposals"] == {"made": 3, "accepted": 2, "rejected": 1, "stale": 0,
                               "dropped_duplicates": 2, "accept_rate": round(2 / 3, 4)}
    assert d2["direct_edits"] == 3
    total = out["total"]
    assert total["facts"] == 3
    assert total["proposals"]["made"] == 3 and total["proposals"]["accepted"] == 2
    assert total["tokens"]["chat"]["input"] == 1000
    assert total["cost"] == pytest.approx(CHAT + COMPACTION + DREAM)

    # Only the second day: the first day's tokens are left out of the total.
    later = stats_json(run, "--since", DAY2)
    assert [d["day"] for d in later["days"]] == [DAY2]
    assert later["total"]["tokens"]["chat"]["input"] == 0
    assert later["total"]["cost"] == pytest.approx(DREAM)

    text = run("stats", "--since", DAY1).output
    assert f"{DAY2}     3     3    2    1     0    2   67%      3,500      800" in text
    assert "dream       3,500 in, 800 out, 1,000 cache read, 1,000 cache write: $0.0133" in text


def test_a_dream_commit_is_counted_from_its_trailers_not_its_subject(vault, run, monkeypatch):
    monkeypatch.setenv("AGENT_NOW", NOW)
    # A subject that counts nothing the way older subjects did: only the trailers count.
    commit(vault, DAY2, "dream: tidied memory (archive 4..4)\n\nRun: 4..4\nCursor: 3 -> 4\n"
                        "Batch: none (plain Messages calls)\nModel: local/qwen3:8b\n"
                        "Facts-added: 2\nFacts-updated: 1\nFacts-removed: 1\nProposed: 4")
    [day] = stats_json(run, "--since", DAY2)["days"]
    assert day["direct_edits"] == 4 and day["proposals"]["made"] == 4


def test_a_dream_commit_of_an_older_version_is_counted_from_its_subject(vault, run,
                                                                        monkeypatch):
    monkeypatch.setenv("AGENT_NOW", NOW)
    commit(vault, DAY2, "dream: +1 fact, 2 updated, 1 removed, 5 proposed (archive 4..4)\n\n"
                        "Run: 4..4\nCursor: 3 -> 4\nBatch: msgbatch_01\nModel: " + SONNET)
    [day] = stats_json(run, "--since", DAY2)["days"]
    assert day["direct_edits"] == 4 and day["proposals"]["made"] == 5


def test_a_price_in_agent_toml_changes_the_cost(planted, run):
    before = stats_json(run, "--since", DAY1)["total"]["tokens"]["chat"]["cost"]
    with open(planted.root / "agent.toml", "a") as f:
        f.write(f'\n[prices."{SONNET}"]\ninput = 30.0\noutput = 150.0\n')
    after = stats_json(run, "--since", DAY1)["total"]["tokens"]["chat"]
    assert before == pytest.approx(CHAT)
    # cache read and write follow the input price when the table gives none.
    assert after["cost"] == pytest.approx(CHAT * 10)


def test_a_model_without_a_price_shows_its_tokens_and_cost_unknown(planted, run):
    commit(planted, DAY2, "chat(cli/default): hi\n\nSession: cli/default\nTurn: 2\n"
                          "Model: local-llama-7b\nTokens: 70 in, 7 out, 0 cache read, 0 cache write")
    out = stats_json(run, "--since", DAY1)
    chat = out["days"][1]["tokens"]["chat"]
    assert chat["input"] == 70 and chat["output"] == 7
    assert chat["cost"] is None and chat["unknown_models"] == ["local-llama-7b"]
    assert out["total"]["cost"] is None
    # The known part is still priced; nothing is guessed for the unknown one.
    assert out["total"]["tokens"]["dream"]["cost"] == pytest.approx(DREAM)
    text = run("stats").output
    assert "cost unknown" in text and "No price for local-llama-7b" in text


def test_bad_prices_are_refused_with_the_key_named(vault, run):
    (vault.root / "agent.toml").write_text('[prices."gpt-5"]\ninput = "cheap"\n')
    r = run("stats")
    assert r.exit_code == 1
    assert 'prices."gpt-5" needs output' in r.output
    r = run("config", "check")
    assert r.exit_code != 0
    assert "prices.\"gpt-5\".input must be a number of USD per million tokens" in r.output


def test_since_refuses_what_is_not_a_date(vault, run):
    r = run("stats", "--since", "banana")
    assert r.exit_code == 1
    assert r.output.strip() == ("Error: --since 'banana': not a date git understands; use "
                                "e.g. 2025-03-01, yesterday, '2 weeks ago', 'last monday'.")


@pytest.mark.parametrize("when", ["2026-13-45", "2026-02-30", "2026/00/10"])
def test_since_refuses_a_date_that_does_not_exist(vault, run, when):
    r = run("stats", "--since", when)
    assert r.exit_code == 1
    assert r.output.startswith(f"Error: --since {when!r}: not a date (")
    assert len(r.output.strip().splitlines()) == 1


def test_a_price_past_any_real_one_is_refused_and_stats_stay_json(planted, run):
    toml = planted.root / "agent.toml"
    toml.write_text(toml.read_text() + f'\n[prices."{SONNET}"]\ninput = 1e308\noutput = 15.0\n')
    r = run("config", "check")
    assert r.exit_code != 0
    assert (f'prices."{SONNET}".input must be a number of USD per million tokens, 0 to '
            f'10,000, not 1e+308') in r.output
    r = run("stats", "--json")
    assert "Infinity" not in r.output and "Traceback" not in r.output
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1


def test_a_forged_tokens_trailer_leaves_stats_valid_json(planted, run):
    commit(planted, DAY2, f"chat(cli/default): forged\n\nModel: {SONNET}\n"
                          f"Tokens: {'9' * 5000} in, {'9' * 300} out, 0 cache read, 0 cache write")
    r = run("stats", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)              # (Infinity is not JSON: this would fail)
    assert out["total"]["tokens"]["chat"]["input"] == 1000
    assert "Infinity" not in r.output


def _git_starts(vault, *args) -> int:
    trace = vault.root.parent / "git.trace"
    trace.unlink(missing_ok=True)
    p = agent_proc(*args, vault=vault.root, env={"GIT_TRACE": str(trace), "AGENT_NOW": NOW})
    assert p.returncode == 0, p.stderr
    return sum(1 for line in trace.read_text().splitlines() if "trace: built-in: git " in line)


@pytest.mark.slow
def test_stats_starts_as_many_git_processes_for_ten_commits_as_for_sixty(planted):
    few = _git_starts(planted, "stats", "--json")
    for i in range(50):
        commit(planted, DAY2, f"chat(cli/default): turn {i}\n\nModel: {SONNET}\n"
                              f"Tokens: 1 in, 1 out, 0 cache read, 0 cache write")
    assert _git_starts(planted, "stats", "--json") == few
    assert few <= 6, f"agent stats started {few} git processes"


# ---- serve's nightly message and the web page ---------------------------------------------


@pytest.mark.slow
def test_the_nightly_dreams_message_carries_a_line_of_memory_health(vault, fake_anthropic,
                                                                    fake_telegram):
    from datetime import datetime, timedelta

    from agent import schedule as sched
    from helpers import ANA, Running, server_at, telegram_vault

    telegram_vault(vault, fake_telegram, fake_anthropic)
    fake_anthropic.batch_polls = 0
    tg = Running(vault, fake_telegram)
    try:
        fake_telegram.wait_for(lambda: tg.channel.connected.is_set(), what="the channel up")
        night = datetime(2026, 11, 21, 2, 59, tzinfo=sched.local_zone())
        s, clock = server_at(vault, night, compact=False)
        s.outbox.senders["telegram"] = tg.channel
        for minutes in (0, 1.1, 3, 5, 7):
            clock.t = night + timedelta(minutes=minutes)
            s.step(clock.t)
        [told] = fake_telegram.wait_sent(ANA)
        first, health = told["text"].splitlines()
        assert first == "The dream left 1 proposal for your review: /review shows it."
        facts = sum(1 for rel in ("MEMORY.md", "USER.md")
                    for line in (vault.root / rel).read_text().splitlines()
                    if line.startswith("- "))
        assert health.startswith(f"Memory: {facts} facts; 1 proposed, 0 accepted, 0 rejected "
                                 f"(accept rate -), 0 stale, 0 duplicates dropped since "
                                 f"2026-11-14; "), health
        assert "tokens, $" in health and health.endswith("(estimate).")
    finally:
        tg.stop()


@pytest.mark.slow
def test_the_health_view_draws_its_charts_offline_in_chromium(vault, browser, procs,
                                                               fake_anthropic, monkeypatch):
    from helpers import Page, css, shoot, wait

    monkeypatch.setenv("AGENT_NOW", NOW)
    plant(vault)
    # The page's own commit (the gateway's setting) follows the planted days.
    for var in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        monkeypatch.setenv(var, f"{DAY2}T13:00:00+00:00")
    page = Page(vault, browser, procs)
    try:
        page.login()
        d = page.driver
        page.open("/")
        css(d, 'nav a[href="/health"]')[0].click()
        wait(d, lambda d: css(d, "#health-charts[data-ready=yes]"))
        boxes = css(d, "#health-charts [data-chart]")
        assert [b.get_attribute("data-chart") for b in boxes] == ["facts", "proposals",
                                                                  "tokens", "cost"]
        # uPlot drew each chart on its canvas: pixels were painted, one point per day.
        painted = d.execute_script(
            "return [...document.querySelectorAll('#health-charts canvas')].map(c => {"
            "  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            "  let n = 0; for (let i = 3; i < px.length; i += 4) if (px[i]) n++; return n; });")
        assert len(painted) == 4 and all(n > 100 for n in painted), painted
        assert all(b.get_attribute("data-drawn") == "3" for b in boxes)   # init day + 2
        legend = css(d, "#health-charts .u-legend")[1].text
        assert "accepted" in legend and "duplicates" in legend
        total = css(d, "table.health tfoot tr")[0].text
        assert total.startswith("total 3 3 2 1 0 2 67%")
        # Everything the page loaded came from serve itself: nothing from the net.
        loaded = d.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name);")
        assert any(u.endswith("/static/uplot/uPlot.iife.min.js") for u in loaded), loaded
        assert all(u.startswith(page.origin + "/") for u in loaded), loaded
        shoot(d, "health")
    finally:
        page.serve.stop()


@pytest.fixture
def first_day(monkeypatch, request):
    """A vault on its first day (made, and used, on 2035-03-01): one chat turn of 25,441
    tokens, one fact."""
    monkeypatch.setenv("AGENT_NOW", f"{DAY1}T18:00:00+00:00")
    for var in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        monkeypatch.setenv(var, f"{DAY1}T09:00:00+00:00")
    vault = request.getfixturevalue("vault")          # made with the clock above
    memory = (vault.root / "MEMORY.md").read_text()
    commit(vault, DAY1, f"chat(cli/default): hello\n\nSession: cli/default\nTurn: 1\n"
                        f"Model: {SONNET}\nTokens: 25000 in, 441 out, 0 cache read, 0 cache write",
           {"MEMORY.md": memory + "- Likes green tea\n"})
    return vault


@pytest.mark.slow
def test_the_charts_of_a_first_day_read_as_days_whole_numbers_and_whole_labels(
        first_day, browser, procs, fake_anthropic):
    """On a vault's first day the time axis read 2027 2028 2029; "Tokens per day" cut
    25,000 to "5,000"; counts had ticks at 0.5. The labels are read from the drawn charts
    (uPlot's axes), their widths measured with the axis's own font."""
    from helpers import SIZES, Page, css, wait

    page = Page(first_day, browser, procs)
    try:
        page.login()
        d = page.driver
        page.open("/health")
        wait(d, lambda d: css(d, "#health-charts[data-ready=yes]"))
        axes = d.execute_script("""
            return Object.fromEntries([...document.querySelectorAll('[data-chart]')].map(b => {
              const u = b.plot, ctx = document.createElement('canvas').getContext('2d');
              return [b.dataset.chart, u.axes.map(a => {
                ctx.font = a.font[0];
                return {labels: a._values, room: a._size - a.ticks.size - a.gap,
                        widths: a._values.map(v => ctx.measureText(v).width / devicePixelRatio)};
              })];
            }));""")
        assert set(axes) == {"facts", "proposals", "tokens", "cost"}
        for name, (x, y) in axes.items():
            assert x["labels"] == ["Mar 1"], (name, x)
            assert all(w <= y["room"] for w in y["widths"]), (name, y)
            if name != "cost":
                assert all(v.replace(",", "").isdigit() for v in y["labels"]), (name, y)
        assert max(len(v) for v in axes["tokens"][1]["labels"]) >= 6, axes["tokens"]
        # The table shows its last column on a laptop, without a scrollbar of its own.
        wrap = d.execute_script("const w = document.querySelector('.table-wrap');"
                                "return [w.scrollWidth, w.clientWidth];")
        assert wrap[0] <= wrap[1], wrap
        d.set_window_size(*SIZES["phone"])
        wide = d.execute_script("return [document.documentElement.scrollWidth,"
                                " document.documentElement.clientWidth]")
        assert wide[0] <= wide[1], wide
    finally:
        d.set_window_size(*SIZES["laptop"])
        page.serve.stop()
