"""agent/ops/jobs.py called directly: each change is one commit of cron.json with a
sentence, a refused change leaves the file and the history as they were, and the
listing gives each job's next run."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from agent.ops import jobs
from agent.schedule import ScheduleError
from agent.stores import cronfile
from agent.vault.change import Change
from conftest import subjects

T0 = datetime(2030, 1, 1, 10, 0, tzinfo=timezone.utc)


def jobs_on_disk(vault) -> list[dict]:
    return json.loads((vault.root / "cron.json").read_text())["jobs"]


def head(vault) -> str:
    return vault.git("rev-parse", "HEAD").strip()


def test_add_edit_enable_disable_remove_each_make_one_commit(vault):
    job, sha = jobs.add(vault, "water", "drink water", T0, every="1h")
    assert sha == head(vault) and subjects(vault)[0] == 'cron: add "water" (every 1h)'
    assert [j["name"] for j in jobs_on_disk(vault)] == ["water"]
    assert job.state.next_run == T0 + timedelta(hours=1)

    later = T0 + timedelta(minutes=30)
    edited, sha = jobs.edit(vault, job.id, later, name="hydrate", every="2h")
    assert edited.id == job.id and sha == head(vault)
    assert subjects(vault)[0] == 'cron: edit "hydrate": renamed from "water", every 2h'
    assert f"Job: {job.id}" in vault.git("log", "-1", "--format=%b")
    on_disk = jobs_on_disk(vault)[0]
    assert (on_disk["id"], on_disk["name"], on_disk["message"]) == (job.id, "hydrate",
                                                                   "drink water")
    assert edited.state.next_run == later + timedelta(hours=2)      # reckoned from now

    n = len(subjects(vault))
    assert jobs.edit(vault, job.id, later, name="hydrate").sha is None     # already so
    assert jobs.disable(vault, job.id, later).sha == head(vault)
    assert jobs.disable(vault, job.id, later).sha is None
    assert len(subjects(vault)) == n + 1 and subjects(vault)[0] == 'cron: disable "hydrate"'
    assert jobs_on_disk(vault)[0]["enabled"] is False
    jobs.enable(vault, "hydrate", later)                             # by its name too
    assert subjects(vault)[0] == 'cron: enable "hydrate"'

    gone, sha = jobs.remove(vault, job.id)
    assert gone.id == job.id and jobs_on_disk(vault) == []
    assert subjects(vault)[0] == 'cron: remove "hydrate"'


def test_a_refused_change_leaves_the_file_and_the_history_alone(vault):
    jobs.add(vault, "water", "drink water", T0, every="1h")
    tea, _ = jobs.add(vault, "tea", "make tea", T0, cron="0 16 * * *")
    before, sha = (vault.root / "cron.json").read_bytes(), head(vault)
    with pytest.raises(ScheduleError, match='already named "water"'):
        jobs.edit(vault, tea.id, T0, name="water")
    with pytest.raises(ScheduleError, match="needs a message"):
        jobs.edit(vault, tea.id, T0, message="  ")
    with pytest.raises(ScheduleError):
        jobs.edit(vault, tea.id, T0, every="soon")
    with pytest.raises(ScheduleError, match="no cron job 'coffee'"):
        jobs.remove(vault, "coffee")
    assert (vault.root / "cron.json").read_bytes() == before and head(vault) == sha

    (vault.root / "cron.json").write_text('{"version": 1, "jobs": [\n')      # a bad hand edit
    with pytest.raises(cronfile.CronFileError, match="cron.json:2:1: not valid JSON"):
        jobs.add(vault, "coffee", "make coffee", T0, every="1d")
    assert (vault.root / "cron.json").read_text() == '{"version": 1, "jobs": [\n'
    assert head(vault) == sha                                  # not even the hand edit


def test_a_held_job_runs_only_once_approved_for_an_allowed_chat(vault):
    cf = cronfile.read(vault.root)
    held = cronfile.add(cf, "digest", "send my digest", T0, every="1d", host=vault.host(),
                        deliver="telegram/42", created_by="model")
    vault.write_text("cron.json", cronfile.dumps(cf))
    vault.commit(Change("cron", "the model's job"))
    assert [j.why_not for j in jobs.list_jobs(vault).jobs] == ["held"]

    sha = head(vault)
    with pytest.raises(ScheduleError, match="was not approved: nobody talked there"):
        jobs.approve(vault, held.id, T0, lambda target: "nobody talked there")
    assert head(vault) == sha and jobs_on_disk(vault)[0].get("approved") is False

    later = T0 + timedelta(days=3)
    job, sha = jobs.approve(vault, held.id, later, lambda target: None)
    assert subjects(vault)[0] == 'cron: approve "digest" (delivers to telegram/42)'
    assert jobs_on_disk(vault)[0]["approved"] is True
    assert job.state.next_run > later                     # the held days do not come due
    assert jobs.approve(vault, held.id, later, lambda target: None).sha is None


def test_list_jobs_gives_each_job_its_next_run_or_why_none(vault):
    water, _ = jobs.add(vault, "water", "drink water", T0, every="1h")
    tea, _ = jobs.add(vault, "tea", "make tea", T0, every="1d")
    jobs.disable(vault, tea.id, T0)
    listing = jobs.list_jobs(vault)
    assert [(j.job.name, j.next, j.why_not) for j in listing.jobs] == [
        ("water", T0 + timedelta(hours=1), None), ("tea", None, "disabled")]
    assert {j.host for j in listing.jobs} == {vault.host()} and listing.problems == []


def test_run_now_is_one_commit_holding_the_turn_and_the_jobs_record(vault, fake_anthropic):
    from agent.llm import make_provider
    from fakeanthropic import reply

    job, _ = jobs.add(vault, "water", "remind me to drink water", T0, every="1h")
    fake_anthropic.add(reply("Drink a glass of water."))
    later = T0 + timedelta(minutes=5)
    outcome = jobs.run_now(vault, make_provider(), "water", later)
    assert (outcome.status, outcome.reply) == ("ok", "Drink a glass of water.")
    assert outcome.sha == head(vault)
    changed = vault.git("show", "--format=", "--name-only", "HEAD").split()
    assert "cron.json" in changed and any(p.startswith(f"sessions/cron/{job.id}/")
                                          for p in changed)
    state = jobs_on_disk(vault)[0]["state"]
    assert state["last_status"] == "ok" and state["last_run"].startswith("2030-01-01T10:05")
    assert jobs.list_jobs(vault).jobs[0].next == T0 + timedelta(hours=1)   # as it was
