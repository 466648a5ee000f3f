"""The Schedules and Settings pages (see pages.py for how a page works): cron jobs and
heartbeats with their next run, enabled or disabled, run now, a held job approved;
agent.toml with `agent config check`'s findings, `agent doctor`'s checks and the
changes a sync held, accepted or rejected."""

from __future__ import annotations

import threading
from typing import Any

from agent.errors import UserError
from agent.serve.web.pages import _back, _form, _now, stamp


def schedules(page, request):
    from agent.stores import cronfile
    from agent.stores import heartbeatfile

    vault = page.vault
    problems: list[str] = []
    try:
        cf = cronfile.read(vault.root)
        jobs, problems = cf.jobs, list(cf.problems)
    except UserError as e:
        jobs, problems = [], [str(e)]
    beats, broken = heartbeatfile.load_all(vault.root)
    state = heartbeatfile.read_state(vault.state)
    rows = []
    for hb in beats:
        kept = state.get(hb.name)
        beat: dict[str, Any] = kept if isinstance(kept, dict) else {}
        same = beat.get("sig") == hb.signature()
        rows.append({"hb": hb, "next": stamp(heartbeatfile.due_time(beat)) if hb.enabled and same else (
            "disabled" if not hb.enabled else "when serve starts"),
            "last": beat.get("last_status") or "never ran"})
    return page.render(request, "schedules.html", nav="schedules", jobs=jobs, beats=rows,
                       problems=problems + [f"skipped {p}" for p in broken], stamp=stamp,
                       here=vault.host())


def cron_action(page, request, action: str):
    from agent.ops import jobs

    vault = page.vault
    job_id = _form(request).get("id", "")
    try:
        if action in ("enable", "disable"):
            job, sha = jobs.set_enabled(vault, job_id, action == "enable", _now())
            said = (f"{job.label()} is already {action}d." if sha is None else
                    f"{action.capitalize()}d {job.label()} ({sha[:7]}).")
        elif action == "approve":
            from agent.config import load_settings
            from agent.serve.delivery import refusal

            settings = load_settings(vault.root)
            job, sha = jobs.approve(vault, job_id, _now(),
                                    lambda target: refusal(vault.root, settings, target))
            said = (f"{job.label()} is not held; nothing to approve." if sha is None else
                    f"Approved {job.label()}: it delivers to {job.deliver} ({sha[:7]}).")
        else:                                  # run now, in the background: a turn
            job = jobs.find(vault, job_id)
            provider = page.conversations.provider
            threading.Thread(target=jobs.run_now, daemon=True,
                             args=(vault, provider, job.id, _now()),
                             name=f"cron run {job.id}").start()
            said = f"Running {job.label()} now; its commit shows in the Timeline when done."
    except UserError as e:
        return _back("/schedules", error=str(e))
    return _back("/schedules", msg=said)


def heartbeat_action(page, request, enabled: bool):
    from agent.ops import heartbeats

    try:
        hb, sha = heartbeats.set_enabled(page.vault, _form(request).get("name", ""), enabled)
    except UserError as e:
        return _back("/schedules", error=str(e))
    word = "enable" if enabled else "disable"
    return _back("/schedules", msg=f"Heartbeat {hb.name} is already {word}d." if sha is None
                 else f"{word.capitalize()}d heartbeat {hb.name} ({sha[:7]}).")


def settings_page(page, request):
    from agent import config as cfg
    from agent.sync import held

    vault = page.vault
    path = cfg.path_of(vault.root)
    try:
        data, text = cfg.read_data(vault.root)
        findings = cfg.findings(data) if text is not None else []
    except UserError as e:
        text, findings = None, [str(e)]
    items = [(h, held.diff(vault, h)) for h in held.pending(vault)]
    return page.render(request, "settings.html", nav="settings", path=path.name, text=text,
                       findings=findings, held=items)


def doctor_part(page, request):
    from agent.ops.doctor import run_checks
    checks = run_checks(page.vault, _telegram)
    fragment = request.headers.get("hx-request") == "true"
    return page.render(request, "doctor_part.html" if fragment else "doctor.html",
                       nav="settings", checks=checks)


def held_action(page, request, accept: bool):
    from agent.sync import held

    which = _form(request).get("which") or None
    try:
        if accept:
            chosen, sha = held.accept(page.vault, which)
            said = f"Accepted {', '.join(h.label() for h in chosen)}" + (
                f" ({sha[:7]})." if sha else "." if any(h.tombstone for h in chosen)
                else " (it was already so).")
        else:
            chosen = held.reject(page.vault, which)
            said = (f"Rejected {', '.join(h.label() for h in chosen)}: this machine keeps "
                    f"its version.")
    except UserError as e:
        return _back("/settings", error=str(e))
    return _back("/settings", msg=said)


def routes(page, sync) -> list:
    from starlette.routing import Route

    return [
        Route("/schedules", sync(schedules)),
        *[Route(f"/cron/{a}", sync(cron_action, a), methods=["POST"])
          for a in ("enable", "disable", "approve", "run")],
        Route("/heartbeat/enable", sync(heartbeat_action, True), methods=["POST"]),
        Route("/heartbeat/disable", sync(heartbeat_action, False), methods=["POST"]),
        Route("/settings", sync(settings_page)),
        Route("/settings/doctor", sync(doctor_part)),
        Route("/held/accept", sync(held_action, True), methods=["POST"]),
        Route("/held/reject", sync(held_action, False), methods=["POST"]),
    ]


def _telegram(settings):
    """The Telegram channel's own check (python-telegram-bot is loaded only for it)."""
    from agent.serve.channels.telegram import check

    return check(settings)
