"""Which machine runs a job: a sync gives the cron jobs no machine has claimed yet
to this one (`claim_jobs`), in a commit of their own."""

from __future__ import annotations

from agent.errors import UserError
from agent.fs import boundedjson, safe
from agent.vault.change import Change
from agent.vault.repo import Vault

_CRON_FILE = "cron.json"    # agent.stores.cronfile.CRON_FILE, loaded only when a job is unclaimed


def _all_claimed(text: str) -> bool:
    """Whether every job of cron.json's text names a machine, told from the JSON alone,
    so that a sync with nothing to claim does not load the cron store (a file the store
    would refuse gets the same answer from claim_jobs: nothing claimed)."""
    try:
        data = boundedjson.loads(text)
    except ValueError:
        return False
    jobs = data.get("jobs") if isinstance(data, dict) else None
    return isinstance(jobs, list) and all(
        isinstance(j, dict) and isinstance(j.get("host"), str) and j["host"] for j in jobs)


def claim_jobs(vault: Vault) -> tuple[list[str], str | None]:
    """Give this machine (`vault.host()`) every cron job that names none, in one commit:
    (the jobs' ids, the sha). Called by a sync (after its merge, so the claim goes out
    with the push) and by `agent serve`; a job names its machine from then on, and
    every other machine leaves it alone. A cron.json that does not parse is left alone
    (serve and `agent cron list` name its problem)."""
    try:
        text = safe.read_text(vault.root, _CRON_FILE)
    except UserError:
        return [], None                     # named by serve and `agent cron list`
    if text is None or _all_claimed(text):
        return [], None
    from agent.stores import cronfile
    try:
        if all(j.host for j in cronfile.loads(text).jobs):
            return [], None
    except cronfile.CronFileError:
        return [], None
    from agent.vault.edit import edit

    here = vault.host()
    claimed: list = []

    def claim(text: str | None):
        try:
            cf = cronfile.loads(text or "")
        except cronfile.CronFileError:
            return None, None
        claimed.extend(cronfile.claim(cf, here))
        if not claimed:
            return None, None
        what = claimed[0].label() if len(claimed) == 1 else f"{len(claimed)} jobs"
        return cronfile.dumps(cf), Change(
            "cron", f"run {what} on {here}",
            body="Jobs that named no machine run on this one only from now on (`agent cron "
                 "move JOB HOST` gives one to another machine):\n"
                 + "\n".join(f"- {j.label()} ({j.id})" for j in claimed))

    _, sha = edit(vault, cronfile.CRON_FILE, claim)
    return [j.id for j in claimed], sha
