"""Delivery of scheduled output: a cron job's or heartbeat's reply sent to the chat its
`deliver` names, the serve part that retries what failed.

After a run whose job has `deliver`, its record (agent.stores.delivery) says a delivery
is pending: for a cron job in cron.json (in the turn's own commit), for a heartbeat in
`.agent/heartbeat-state.json`. The reply is sent at once; when that works, the message
is appended to the chat's transcript (`telegram/<chat id>`, an assistant line with
`source` saying which job sent it, so an answer in the chat has its context) and the
record removed, in one commit. When it fails (Telegram down, 403 because the person
blocked the bot, serve without Telegram) the record says so and when the next try is;
pending records survive a restart, and `agent cron list` / `agent heartbeat list` show
them. A reply of HEARTBEAT_OK is never delivered.

Scheduled output goes only to a chat the person allowed: a private chat of a user in
`[channels.telegram] allow_from`, or a chat where one of them has talked to the agent
(a group). It is checked here, at each delivery, whatever cron.json or a heartbeat
says (the model, a hand edit or a sync may have written it): a job made by the model
could otherwise send the vault's contents to a stranger. A job held for approval
(`agent cron approve`) is never delivered either.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from agent.errors import UserError
from agent.ops.runs import short
from agent.serve.turns import local, log
from agent.stores import cronfile
from agent.stores import delivery, sessions
from agent.stores import heartbeatfile
from agent.stores.cronfile import CRON_FILE, CronFileError
from agent.fs import atomic
from agent.vault.change import Change

NO_CHANNEL = ("agent serve has no Telegram channel: set [channels.telegram] enabled = true "
              "in agent.toml and $TELEGRAM_BOT_TOKEN in serve's environment")


class Outbox:
    """The scheduler's delivery part: `senders` by channel name (set by serve), each with
    `deliver(chat_id, text)` raising an exception that says why it failed."""

    def __init__(self, server):
        self.server = server
        self.vault = server.vault
        self.senders: dict[str, object] = {}

    # -- the scheduler's part --

    def run(self, now: datetime) -> None:
        cron = self.server.cron.cron
        here = self.vault.host()
        for job in list(cron.jobs) if cron else []:
            if self.server.stopping:
                return
            # A job's reply is sent by the machine that ran it (its host), never also
            # by another one that synced the pending record.
            if job.runs_on(here) and delivery.due(job.state.delivery, now):
                self.deliver_job(job.id, now)
        state = heartbeatfile.read_state(self.vault.state)
        for name, e in state.items():
            if self.server.stopping:
                return
            if isinstance(e, dict) and delivery.due(e.get("delivery"), now):
                self.deliver_heartbeat(name, now)

    def wake_times(self, now: datetime) -> list[datetime]:
        records = []
        cron = self.server.cron.cron
        here = self.vault.host()
        records += [j.state.delivery for j in cron.jobs if j.runs_on(here)] if cron else []
        records += [e.get("delivery") for e in heartbeatfile.read_state(self.vault.state).values()
                    if isinstance(e, dict)]
        return [delivery.next_try(r) or now for r in records
                if isinstance(r, dict) and r.get("status") in delivery.WAITING]

    # -- one delivery --

    def _send(self, target: str, text: str) -> str | None:
        """None when sent, else why not."""
        channel, chat = delivery.split_target(target)
        sender = self.senders.get(channel)
        if sender is None:
            return NO_CHANNEL
        why = refusal(self.vault.root, self.server.settings, target)
        if why:
            raise Undeliverable(why)
        try:
            sender.deliver(chat, text)
        except Exception as e:  # noqa: BLE001 - whatever a channel raises is why it failed, said to the caller
            return str(e) or type(e).__name__
        return None

    def deliver_job(self, job_id: str, now: datetime, text: str | None = None) -> None:
        vault = self.vault
        try:
            job = cronfile.read(vault.root).get(job_id)
        except CronFileError as e:
            log.error("%s", e)
            return
        record = job.state.delivery if job is not None else None
        if not delivery.due(record, now):
            return
        text = text or record.get("text") or _last_reply(vault.root, job.session)
        target = record["target"]
        what = f"cron {job.label()} ({job.id})"
        if not text or text.strip() == heartbeatfile.OK:
            self._update_job(job_id, None, None)     # nothing to say: nothing sent
            return
        final = False
        try:
            if job.held:
                raise Undeliverable(f"the job awaits the person's approval (agent cron approve "
                              f"{job.id})")
            error = self._send(target, text)
        except Undeliverable as e:
            error, final = f"refused: {e}", True
        if error is None:
            sha = self._update_job(job_id, None, self._line(target, text, f"cron/{job.id}", now),
                                   Change("deliver", short(text, 60), scope=target,
                                          trailers={"Job": job.id, "From": job.session}))
            log.info("%s: delivered to %s (%s)", what, target, (sha or "")[:7])
            return
        after = delivery.failed_attempt(dict(record, text=text), now, error, final=final)
        sha = self._update_job(job_id, after, None, Change(
            "cron", f"{job.label()}: delivery to {target} failed"
            f"{'' if after['status'] == 'failed' else ', retried later'}: {short(error, 80)}",
            trailers={"Job": job.id}))
        self._log_failure(what, target, after, error, sha)

    def _update_job(self, job_id: str, record: dict | None, line: sessions.Line | None,
                    change: Change | None = None) -> str | None:
        """Set the job's delivery record (and append the transcript line), one commit."""
        vault = self.vault
        with vault.locked():
            try:
                before = cronfile.read_text(vault.root)
                cf = cronfile.loads(before or "")
            except CronFileError as e:
                log.error("%s", e)
                return None
            job = cf.get(job_id)
            if job is not None:
                job.state.delivery = record
                if (record is None and job.delete_after_run and job.state.next_run is None
                        and job.state.last_status == "ok"):
                    cf.remove(job_id)           # a one-off whose reply is now delivered
                after = cronfile.dumps(cf)
                if after != before:
                    vault.write_text(CRON_FILE, after)
            if line is not None:
                target = change.scope
                vault.append_lines(sessions.month_file(target, _ts(line)), [line.dumps()])
            sha = vault.commit(change or Change("cron", f"delivery of {job_id} settled"))
        self._refresh(line)
        self.server.cron.reload(self.server.clock(), quiet=True)
        return sha

    def deliver_heartbeat(self, name: str, now: datetime) -> None:
        vault = self.vault
        state = heartbeatfile.read_state(vault.state)
        record = (state.get(name) or {}).get("delivery")
        if not delivery.due(record, now):
            return
        text, target = record.get("text") or "", record["target"]
        final = False
        try:
            error = None if not text.strip() or text.strip() == heartbeatfile.OK else \
                self._send(target, text)
        except Undeliverable as e:
            error, final = f"refused: {e}", True
        sha = None
        with vault.locked():
            state = heartbeatfile.read_state(vault.state)
            e = state.get(name)
            if isinstance(e, dict):
                e["delivery"] = None if error is None else \
                    delivery.failed_attempt(record, now, error, final=final)
                atomic.write_json(vault.state / heartbeatfile.STATE_FILE, state)
            if error is None and text.strip() and text.strip() != heartbeatfile.OK:
                line = self._line(target, text, f"heartbeat/{name}", now)
                vault.append_lines(sessions.month_file(target, now), [line.dumps()])
                sha = vault.commit(Change("deliver", short(text, 60), scope=target,
                                          trailers={"Heartbeat": name}))
        if error is None:
            if sha:
                self._refresh(True)
                log.info("heartbeat %s: delivered to %s (%s)", name, target, sha[:7])
            return
        self._log_failure(f"heartbeat {name}", target, state[name]["delivery"], error, None)

    # -- helpers --

    @staticmethod
    def _line(target: str, text: str, source: str, now: datetime) -> sessions.Line:
        return sessions.Line.new(None, "assistant", text, now, id=f"d-{secrets.token_hex(4)}",
                                 source=source)

    def _refresh(self, changed) -> None:
        if changed:
            from agent.search import index
            index.refresh(self.vault, after_commit=True)

    def _log_failure(self, what, target, record, error, sha) -> None:
        if record["status"] == "failed":
            log.error("%s: delivery to %s failed %d times, given up: %s%s", what, target,
                      record["attempts"], error, f" ({sha[:7]})" if sha else "")
        else:
            log.warning("%s: delivery to %s failed (%s); next try %s", what, target, error,
                        local(delivery.next_try(record)))


class Undeliverable(Exception):
    """A delivery that must not be made (not tried again); str() says why."""


def refusal(root, settings, target: str) -> str | None:
    """Why scheduled output must not go to `target` (None: it may): only to a private
    chat of a user in allow_from, or to a chat where one of them talked to the agent."""
    try:
        channel, chat = delivery.split_target(target)
    except delivery.DeliveryError as e:
        return str(e)
    allow = set(settings.telegram_allow_from)
    if chat in allow or _talked_in(root, target, allow):
        return None
    ids = ", ".join(str(i) for i in sorted(allow)) or "none"
    return (f"{target} is not a chat you allowed: scheduled replies go only to the chats of "
            f"the users in [channels.telegram] allow_from ({ids}), or to a chat where one of "
            f"them has talked to the agent")


def _talked_in(root, key: str, allow: set[int]) -> bool:
    """Whether an allowed user's message came in from chat `key` (its transcript has a
    user line its channel wrote, `source: telegram:<user id>`), newest month first."""
    if not allow:
        return False
    who = {f"telegram:{i}" for i in allow}
    session = sessions.Session(root, key)
    for path in reversed(session.files()):
        try:
            lines = sessions.read_file(path, path.relative_to(root).as_posix(), root)
        except (OSError, UserError):
            continue
        if any(m is not None and m.role == "user" and m.extra.get("source") in who
               for m in map(sessions.Line.read, lines)):
            return True
    return False


def _ts(line: sessions.Line) -> datetime:
    return datetime.fromisoformat(line.ts)


def _last_reply(root, session: str) -> str | None:
    """The reply of a job's last turn (for a record left pending by a restart)."""
    last = sessions.Line.read(sessions.Session(root, session).last_line())
    if last is not None and last.role == "assistant":
        return sessions.message_text(last.content, sep="")
    return None
